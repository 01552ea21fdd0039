#!/usr/bin/env bash
# Build a venv for one named framework stack ("image profile") on this CPU machine, then run xmfu's unit suite and
# every workload's smoke run with it. A profile downloads GBs the first time (PyPI's Linux torch wheels are CUDA
# builds with their nvidia-* libraries; they run on a CPU); CI (.ci/run) runs the `floor` profile's unit suite in
# the venv it keeps. docs/install.md#supported-versions has the results table.
#
# usage: scripts/compat.sh PROFILE [--no-tests | --no-smoke | --install-only]    (scripts/compat.sh --help: this)
#   PROFILE: cuda13-2026 | rocm64 | floor | dev   (each pinned below; `dev` is constraints.txt's pins)
# exit status: 0 when the install, the unit suite and every smoke run that ran passed; 1 when one of them failed
# (the table line says which, the logs say why); 2 for a bad argument or a Python that is not there.
# environment:
#   XMFU_COMPAT_DIR  where the venvs and logs go (default ~/.cache/xmfu-compat): <dir>/<profile>/venv, .../logs
#   PYENV_ROOT       where the interpreters are (default ~/.pyenv): versions/<X.Y.*>/bin/python
# A venv is reused between tries (pip only adds what its pins lack); delete <dir>/<profile> to start afresh.
# Prints the profile's line of the table: profile | Python | torch | triton | jax/jaxlib | numpy | tests | smoke
# (each smoke run: ok or FAIL, and its rows by status). Exit status 1 when the unit suite failed or a smoke run did.
set -euo pipefail
# The whole script is one block, so bash reads all of it before running any: editing it during a run (a profile
# takes many minutes) cannot change what that run does.
{
cd "$(dirname "$0")/.."
ROOT=$PWD

for arg in "$@"; do
  case "$arg" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
done
PROFILE=${1:-}
RUN_TESTS=1 RUN_SMOKE=1
case "${2:-}" in --no-tests) RUN_TESTS=0 ;; --no-smoke) RUN_SMOKE=0 ;; --install-only) RUN_TESTS=0 RUN_SMOKE=0 ;; "") ;;
  *) echo "compat.sh: unknown option '$2' (--no-tests, --no-smoke or --install-only)" >&2; exit 2 ;; esac

# Each profile: its Python (major.minor) and the pins of what it has. Empty jax: the image has none (AMD's
# rocm/pytorch has no JAX), so JAX's backends must report skipped. triton: torch's own pin where it names one.
# A pin's version alone: constraints.txt's lines may end in a comment (`triton==3.9.0  # needs python>=3.11`).
pin() { sed -n "s/^$1==\([^[:space:]#]*\).*/\1/p" constraints.txt; }
case "$PROFILE" in
  cuda13-2026) PYV=3.12 PINS="torch==2.11.0 triton==3.6.0 jax==0.11.2 jaxlib==0.11.2 numpy==2.5.*" ;;
  # the rocm/pytorch image Dockerfile.rocm starts from: torch 2.6 with numpy 1.26 (docs/install.md says what was
  # found about its manifest); its Triton is pytorch-triton-rocm 3.2, here PyPI's triton 3.2.0 that torch 2.6 pins
  rocm64) PYV=3.12 PINS="torch==2.6.0 triton==3.2.0 numpy==1.26.4" ;;
  # the oldest of everything harness/machine/compat.py declares supported
  floor) PYV=3.10 PINS="torch==2.6.0 triton==3.2.0 jax==0.4.38 jaxlib==0.4.38 numpy==1.26.4" ;;
  dev) PYV=3.11 PINS="torch==$(pin torch) triton==$(pin triton) jax==$(pin jax) jaxlib==$(pin jaxlib) numpy==$(pin numpy)" ;;
  *) echo "compat.sh: PROFILE must be one of cuda13-2026, rocm64, floor, dev (got '${PROFILE}')." \
          "Each pins a Python, torch, triton, jax and numpy; see the top of scripts/compat.sh." >&2; exit 2 ;;
esac

DIR=${XMFU_COMPAT_DIR:-$HOME/.cache/xmfu-compat}/$PROFILE
VENV=$DIR/venv PY=$DIR/venv/bin/python LOGS=$DIR/logs
BASE_PY=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$PYV".*/bin/python 2>/dev/null | sort -V | tail -1)
[ -x "$BASE_PY" ] || { echo "compat.sh: no Python $PYV under ${PYENV_ROOT:-$HOME/.pyenv}/versions" >&2; exit 2; }
mkdir -p "$LOGS"
say() { echo "compat $PROFILE: $*" >&2; }

# A plain venv (no --system-site-packages): the profile's stack and nothing of the machine's.
[ -x "$PY" ] || "$BASE_PY" -m venv "$VENV"
printf '%s\n' $PINS >"$DIR/constraints.txt"
if [[ " $PINS " != *" jax=="* ]]; then JAX_PKGS=""; else JAX_PKGS="jax jaxlib optax"; fi
say "installing $PINS into $VENV (log $LOGS/install.log)"
# Each step must succeed (a `||` after a block turns `set -e` off inside it, so the steps are chained with &&).
# shellcheck disable=SC2086  # PINS and JAX_PKGS are word lists
if ! { "$PY" -m pip install -q --upgrade pip &&
       "$PY" -m pip install -c "$DIR/constraints.txt" $PINS $JAX_PKGS &&
       "$PY" -m pip install -c "$DIR/constraints.txt" -e ".[dev]"; } >"$LOGS/install.log" 2>&1; then
  say "install failed: tail of $LOGS/install.log"
  tail -20 "$LOGS/install.log" >&2
  echo "| $PROFILE | install failed (log $LOGS/install.log) |" | tee "$LOGS/table-line.md"
  exit 1
fi
# A conflict pip check finds is reported, not fatal: an image's own stack may carry one (the log keeps it).
"$PY" -m pip check >>"$LOGS/install.log" 2>&1 || say "pip check reports conflicts: see $LOGS/install.log"

version() { "$PY" -c "from importlib import metadata as m
try: print(m.version('$1'))
except m.PackageNotFoundError: print('-')"; }
VERSIONS="$("$PY" -c 'import platform; print(platform.python_version())') | $(version torch) | $(version triton) |"
VERSIONS+=" $(version jax)/$(version jaxlib) | $(version numpy)"

TESTS="not run" FAILED=0
if [ "$RUN_TESTS" = 1 ]; then
  say "unit suite (log $LOGS/pytest.log)"
  # Not the Slurm group: it needs a cluster of this host's daemons (make test-slurm), and under CI=true its skip fails.
  rc=0
  "$PY" -m pytest -n 2 --dist worksteal -m "not e2e and not slurm and not sweep" -q -p no:cacheprovider >"$LOGS/pytest.log" 2>&1 \
    || rc=$?
  # pytest's closing line, e.g. "== 3 failed, 1400 passed, 12 skipped in 80.1s =="
  TESTS=$(tail -1 "$LOGS/pytest.log" | sed 's/^=* *//; s/ *=*$//; s/ in [0-9.]*s.*$//; s/, [0-9]* warnings*//')
  if [ "$rc" != 0 ]; then TESTS="FAIL (pytest exit $rc): $TESTS"; FAILED=1; fi
fi

# Each workload's smoke run; collectives as two gloo processes under torchrun (torch_dist and jax over them).
# A smoke run is ok when xmfu exits 0 and no row is failed or incorrect; skipped rows are counted, with reasons
# in the bundle and the log.
smoke_one() {
  local workload=$1 out="$DIR/results/$1" log="$LOGS/smoke-$1.log" launch=()
  rm -rf "$out"
  if [ "$workload" = collectives ]; then
    launch=("$PY" -m torch.distributed.run --standalone --nproc_per_node=2)
  fi
  local rc=0
  "${launch[@]}" "$VENV/bin/xmfu" run experiment=smoke "workload=$workload" "results_dir=$out" >"$log" 2>&1 || rc=$?
  "$PY" - "$out" "$rc" <<'EOF'
import json, pathlib, sys
bundles = sorted(pathlib.Path(sys.argv[1]).glob("*/manifest.json"))
counts = json.loads(bundles[-1].read_text()).get("counts", {}) if bundles else {}
bad = sum(counts.get(s, 0) for s in ("failed", "incorrect"))
verdict = "ok" if sys.argv[2] == "0" and bundles and not bad else f"FAIL (exit {sys.argv[2]})"
print(verdict + " (" + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()) if v) + ")")
EOF
}
SMOKE="not run"
if [ "$RUN_SMOKE" = 1 ]; then
  SMOKE=""
  for workload in matmul attention transformer inference collectives; do
    say "smoke run: $workload (log $LOGS/smoke-$workload.log)"
    verdict=$(smoke_one "$workload")
    [[ "$verdict" == ok* ]] || FAILED=1
    SMOKE+="${SMOKE:+; }$workload $verdict"
  done
fi
echo "| $PROFILE | $VERSIONS | $TESTS | $SMOKE |" | tee "$LOGS/table-line.md"
if [ "$FAILED" = 1 ]; then
  say "failed: the unit suite or a smoke run (logs in $LOGS)"
  [ "$RUN_TESTS" = 0 ] || grep -E "^(FAILED|ERROR) " "$LOGS/pytest.log" >&2 || true
fi
exit "$FAILED"
}
