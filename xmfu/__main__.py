"""`python -m xmfu ARGS` is `xmfu ARGS` (torchrun and srun start it this way: `torchrun ... -m xmfu run ...`)."""

from xmfu.harness.cli.main import run_as_module

run_as_module()
