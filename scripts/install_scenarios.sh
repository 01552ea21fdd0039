#!/usr/bin/env bash
# The install scenarios that need a package index and minutes, so not part of `make test` (tests/test_install.py and
# tests/test_wheelhouse.py test the decisions without a network). Each plays an image with a venv of its own and prints
# one line: scenario | what it checked | ok or FAILED (log). docs/install.md has the results of a run.
#
# usage: scripts/install_scenarios.sh [SCENARIO...]      default: all four
#   offline311      make wheelhouse for this machine's Python 3.11; install it with --offline, with no index and (where
#                   `unshare -n` works) no network, into a venv over an image venv that has torch; xmfu run
#                   experiment=smoke, also with no network
#   offline312      make wheelhouse WHEELHOUSE_PYTHON=3.12 WHEELHOUSE_PLATFORM=manylinux_2_28_x86_64; install it likewise
#                   over a Python 3.12 image venv that has numpy (no torch: a 3.12 torch is a GBs CUDA download);
#                   xmfu --help, peaks, doctor
#   numpy1          an image venv with torch and numpy 1.26.4: install.sh --extras history (online), numpy kept;
#                   xmfu run experiment=smoke (torch, Triton's interpreter, the JAX that fits numpy 1.26)
#   pip-constraint  the numpy1 image with PIP_CONSTRAINT naming a file that pins what it has (`pip freeze`, as NGC's
#                   images do): the same install
# environment:
#   XMFU_SCENARIO_DIR  where the venvs, wheelhouses and logs go (default ~/.cache/xmfu-install-scenarios), afresh
#   PYENV_ROOT         where Python 3.11 and 3.12 are (default ~/.pyenv): versions/3.1N.*/bin/python3.1N
# torch comes from wherever pip finds it (PyPI's Linux wheels are CUDA builds, GBs; PIP_EXTRA_INDEX_URL=
# https://download.pytorch.org/whl/cpu gives the CPU build).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${XMFU_SCENARIO_DIR:-$HOME/.cache/xmfu-install-scenarios}
TORCH=$(sed -n 's/^torch==\([^ ]*\).*/\1/p' constraints.txt)
mkdir -p "$DIR/logs"

python_of() {  # the newest pyenv interpreter of version $1
  ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -V | tail -1
}
image() {  # image NAME X.Y PACKAGES...: a plain venv (no site packages of the machine) with PACKAGES
  local name=$1 version=$2 base; shift 2
  base=$(python_of "$version")
  [ -x "$base" ] || { echo "install_scenarios: no Python $version under ${PYENV_ROOT:-$HOME/.pyenv}" >&2; exit 2; }
  rm -rf "${DIR:?}/$name"
  "$base" -m venv "$DIR/$name"
  "$DIR/$name/bin/python" -m pip install -q "$@"
}
# No index, no configuration file (one may name extra indexes or find-links), no find-links from the environment,
# and no network at all where a network namespace can be made.
offline() {
  local isolate=()
  if unshare -n true 2>/dev/null; then isolate=(unshare -n); fi
  env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_NO_INDEX=1 PIP_CONFIG_FILE=/dev/null \
      ${isolate[@]+"${isolate[@]}"} "$@"
}
report() { printf '%-15s | %-70s | %s\n' "$1" "$2" "$3"; }
check() {  # check SCENARIO WHAT COMMAND...: run it, logging; one line either way
  local scenario=$1 what=$2 log="$DIR/logs/$1.log"; shift 2
  if "$@" >>"$log" 2>&1; then report "$scenario" "$what" ok; else report "$scenario" "$what" "FAILED ($log)"; return 1; fi
}
smoke_command() {  # smoke_command NAME XMFU: shell words that run experiment=smoke into a fresh folder, validated
  local out="$DIR/results-$1"
  rm -rf "$out" && mkdir -p "$out"
  printf "cd '%s' && '%s' run experiment=smoke results_dir='%s' && '%s' validate '%s'/*/" "$out" "$2" "$out" "$2" "$out"
}

offline311() {
  local wh="$DIR/wheelhouse-3.11" log="$DIR/logs/offline311.log"
  : >"$log"
  check offline311 "make wheelhouse (Python 3.11, this machine)" make wheelhouse WHEELHOUSE="$wh" \
      WHEELHOUSE_PYTHON=3.11 || return 1
  tail -n 2 "$log" | sed 's/^/    /'
  check offline311 "image venv: torch==$TORCH, numpy" image image311 3.11 "torch==$TORCH" numpy || return 1
  check offline311 "install.sh --offline over the image, no index, no network" offline env XMFU_PLATFORM=cpu \
      PYTHON="$DIR/image311/bin/python" VENV="$DIR/node311" scripts/install.sh --offline "$wh" || return 1
  check offline311 "xmfu run experiment=smoke, no network; xmfu validate" offline \
      sh -c "$(smoke_command offline311 "$DIR/node311/bin/xmfu")"
}

offline312() {
  local wh="$DIR/wheelhouse-3.12" log="$DIR/logs/offline312.log"
  : >"$log"
  check offline312 "make wheelhouse (Python 3.12, manylinux_2_28_x86_64)" make wheelhouse WHEELHOUSE="$wh" \
      WHEELHOUSE_PYTHON=3.12 WHEELHOUSE_PLATFORM=manylinux_2_28_x86_64 || return 1
  tail -n 2 "$log" | sed 's/^/    /'
  check offline312 "image venv: numpy" image image312 3.12 numpy || return 1
  check offline312 "install.sh --offline over the image, no index, no network" offline env XMFU_PLATFORM=cpu \
      PYTHON="$DIR/image312/bin/python" VENV="$DIR/node312" scripts/install.sh --offline "$wh" || return 1
  local xmfu="$DIR/node312/bin/xmfu"
  check offline312 "xmfu --help, xmfu peaks, xmfu doctor, no network" offline sh -c \
      "'$xmfu' --help >/dev/null && '$xmfu' peaks >/dev/null && { '$xmfu' doctor; [ \$? -le 1 ]; }"
}

numpy1_image() {
  check "$1" "image venv: torch==$TORCH, numpy==1.26.4" image image-numpy1 3.11 "torch==$TORCH" numpy==1.26.4
}
numpy1_install() {  # numpy1_install SCENARIO VENV [ENV...]: install.sh on the numpy-1.26 image; numpy kept
  local scenario=$1 venv="$DIR/$2"; shift 2
  check "$scenario" "install.sh --extras history (online)" env "$@" XMFU_PLATFORM=cpu \
      PYTHON="$DIR/image-numpy1/bin/python" VENV="$venv" scripts/install.sh --extras history || return 1
  grep '^keep_installed:' "$DIR/logs/$scenario.log" | sed 's/^/    /'
  check "$scenario" "numpy 1.26.4 kept; what was added" "$venv/bin/python" -c "import importlib.metadata as m
print('   ', ', '.join(f'{n} {m.version(n)}' for n in ('numpy', 'torch', 'jax', 'ml_dtypes', 'pandas')))
assert m.version('numpy') == '1.26.4'" || return 1
  grep '^    numpy' "$DIR/logs/$scenario.log" | tail -n 1
  check "$scenario" "xmfu run experiment=smoke; xmfu validate" sh -c "$(smoke_command "$scenario" "$venv/bin/xmfu")"
}
numpy1() { : >"$DIR/logs/numpy1.log"; numpy1_image numpy1 && numpy1_install numpy1 node-numpy1; }
pip-constraint() {
  : >"$DIR/logs/pip-constraint.log"
  [ -x "$DIR/image-numpy1/bin/python" ] || numpy1_image pip-constraint || return 1
  "$DIR/image-numpy1/bin/python" -m pip freeze >"$DIR/image-constraint.txt"
  echo "    PIP_CONSTRAINT pins: $(paste -sd' ' "$DIR/image-constraint.txt")"
  numpy1_install pip-constraint node-pip-constraint PIP_CONSTRAINT="$DIR/image-constraint.txt"
}

status=0
for scenario in "${@:-offline311 offline312 numpy1 pip-constraint}"; do
  for one in $scenario; do
    case "$one" in
      offline311|offline312|numpy1|pip-constraint) "$one" || status=1 ;;
      *) echo "install_scenarios: unknown scenario '$one' (offline311, offline312, numpy1, pip-constraint)" >&2
         exit 2 ;;
    esac
  done
done
exit "$status"
