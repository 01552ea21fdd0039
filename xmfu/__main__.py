"""`python -m xmfu ARGS` is `xmfu ARGS` (torchrun and srun start it this way: `torchrun ... -m xmfu run ...`)."""

# Nothing is written before the command's own handlers are in place (run_as_module): an interrupt during the
# imports ends the process as an interrupted run does, 130 and no traceback (Ctrl-C at start-up).
from xmfu.harness.cli.start_up import guard

guard()

# Before anything loads torch (and its OpenMP runtime, which reads OMP_WAIT_POLICY once, as it loads): CPU threads
# that do not spin while another framework runs (harness/machine/threads.py). torchrun's ranks start here too.
from xmfu.harness.machine.threads import prepare_environment  # noqa: E402

prepare_environment()

from xmfu.harness.cli.main import run_as_module  # noqa: E402  (after the handlers, on purpose)

run_as_module()
