#!/usr/bin/env bash
# The first hour on a GPU node, as one command, with only the repository and a wheelhouse there (no package index,
# no make): install xmfu offline on the image's own frameworks, record `xmfu doctor`, run the GPU reference set's
# parts (benchmarks/gpu_reference.py: each stopped at its budget, those already done skipped, so a second call
# goes on where the first stopped), and pack the folder into one .tar.gz to carry off the node.
#
# usage: benchmarks/reference_node.sh --wheelhouse DIR [--out DIR] [--archive FILE] [--no-venv] [--redo] [PART...]
#   --wheelhouse DIR  made by `make wheelhouse` on a machine with a package index (docs/install.md, Offline nodes)
#   --out DIR         the reference set's folder (default: gpu_reference.py's: results/reference/<device>; at smoke
#                     sizes, without an accelerator, a temporary folder)
#   --archive FILE    the archive (default: the folder's name + .tar.gz beside it)
#   --no-venv         install into the image's Python itself, not a venv over it
#   --redo            run the parts named even where a valid bundle is there
#   PART...           the parts to run (default: every part not yet done; gpu_reference.py --list names them)
# environment: PYTHON (the image's interpreter, default python3), VENV (default .venv-node)
#
# Exit status: 0 every part chosen has a valid bundle and the archive is written; 1 not; 2 bad input (the install's
# one-paragraph errors included). On a CPU every part runs at its smoke sizes (tests/e2e/test_reference_node.py).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

usage_error() { echo "reference_node.sh: $* (see the comment at the top of benchmarks/reference_node.sh)" >&2; exit 2; }
WHEELHOUSE="" INSTALL_ARGS=() SET_ARGS=() PARTS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheelhouse|--out|--archive)
      [ $# -ge 2 ] || usage_error "$1 needs a value"
      case "$1" in
        --wheelhouse) WHEELHOUSE=$2 ;;
        --out) SET_ARGS+=(--out "$2") ;;
        --archive) SET_ARGS+=(--archive "$2") ;;
      esac
      shift ;;
    --no-venv) INSTALL_ARGS+=(--no-venv) ;;
    --redo) SET_ARGS+=(--redo) ;;
    -*) usage_error "unknown option '$1'" ;;
    *) PARTS+=(--part "$1") ;;
  esac
  shift
done
[ -n "$WHEELHOUSE" ] || usage_error "--wheelhouse DIR is required (make wheelhouse makes one)"
case " ${SET_ARGS[*]-} " in *" --archive "*) ;; *) SET_ARGS+=(--archive) ;; esac

export VENV=${VENV:-$PWD/.venv-node}
PYTHON=${PYTHON:-python3}
say() { echo "reference-node: $*"; }

# 1. xmfu and what the image lacks, from the wheelhouse only (install.sh's errors are one paragraph, exit 2).
say "installing from $WHEELHOUSE (no package index)"
PYTHON=$PYTHON "$ROOT/scripts/install.sh" --offline "$WHEELHOUSE" ${INSTALL_ARGS[@]+"${INSTALL_ARGS[@]}"}
case " ${INSTALL_ARGS[*]-} " in
  *" --no-venv "*) PY=$(command -v "$PYTHON") ;;
  *) PY=$VENV/bin/python ;;
esac

# 2-4. doctor's view of the node, the parts, the archive: gpu_reference.py runs them with this interpreter.
say "the reference set with $PY"
status=0
"$PY" "$ROOT/benchmarks/gpu_reference.py" --doctor ${SET_ARGS[@]+"${SET_ARGS[@]}"} ${PARTS[@]+"${PARTS[@]}"} || status=$?
say "done (exit $status)"
exit "$status"
