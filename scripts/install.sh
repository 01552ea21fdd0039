#!/usr/bin/env bash
# Install xmfu into a virtual environment that reuses the machine's own torch / JAX / Triton builds.
# The one install procedure: `make install` and every Dockerfile run this script (tests/test_install.py checks).
#
# usage: scripts/install.sh [--editable] [--extras LIST] [--offline DIR] [--no-venv] [--dry-run | --print-platform]
#        scripts/install.sh --help    (this text)
#   --editable        pip install -e (a checkout being worked on); default: a regular install (the containers)
#   --extras LIST     xmfu extras besides the platform's, comma-separated (make install: dev)
#   --offline DIR     install from the wheelhouse DIR (make wheelhouse) with pip's --no-index: nothing is fetched;
#                     a framework (torch, JAX, Triton) is added only where DIR holds it, xmfu with DIR's extras
#   --no-venv         install into PYTHON's own environment (an image's Python) instead of a venv over it
#   --dry-run         print the platform and the commands, run nothing
#   --print-platform  print the platform (cpu | cuda | rocm | tpu | neuron | hpu | xpu) and stop
# environment:
#   XMFU_PLATFORM  cpu | cuda | rocm | tpu | neuron | hpu | xpu: use it instead of detecting (a `docker build`
#                  sees no device). neuron (AWS Trainium), hpu (Intel Gaudi) and xpu (Intel GPUs) take their torch
#                  from the vendor: nothing framework-side is installed there, only xmfu
#   PYTHON         the interpreter the venv is made from (default python3)
#   VENV           the venv (default .venv), made with --system-site-packages so the image's frameworks are seen
#   TORCH_VERSION  the torch to install where none is importable (default: constraints.txt's pin)
#
# Nothing importable is ever replaced: the frameworks are installed only where `import` fails, and pip runs with
# constraints.txt in which every package already installed is pinned to the version it has (keep_installed.py, which
# also leaves to an image's PIP_CONSTRAINT what that pins, and drops a pin that needs a newer numpy or Python than the
# environment keeps). Offline, only the pins of installed packages: the wheelhouse holds one version of the rest.
set -euo pipefail
CALLER=$PWD
cd "$(dirname "$0")/.."

usage_error() { echo "install.sh: $* (see the comment at the top of scripts/install.sh)" >&2; exit 2; }
EDITABLE=0 EXTRAS="" MODE=install OFFLINE="" NO_VENV=0
while [ $# -gt 0 ]; do
  case "$1" in
    --editable) EDITABLE=1 ;;
    --extras|--offline) [ $# -ge 2 ] || usage_error "$1 needs a value"
      if [ "$1" = --extras ]; then EXTRAS="$2"; else OFFLINE="$2"; fi; shift ;;
    --no-venv) NO_VENV=1 ;;
    --dry-run) MODE=dry-run ;;
    --print-platform) MODE=print-platform ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
  shift
done
if [ -n "$OFFLINE" ]; then
  case "$OFFLINE" in /*) ;; *) OFFLINE="$CALLER/$OFFLINE" ;; esac
  [ -f "$OFFLINE/wheelhouse.json" ] || { echo "install.sh: --offline $OFFLINE: no wheelhouse there (no" \
    "wheelhouse.json). Make one on a machine that reaches a package index, in an xmfu checkout: \`make wheelhouse" \
    "WHEELHOUSE_PYTHON=<the node's X.Y> WHEELHOUSE_PLATFORM=<its tag, e.g. manylinux_2_28_x86_64>\` (docs/install.md," \
    "Offline nodes), and copy the folder dist/wheelhouse here." >&2; exit 2; }
fi

BASE_PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ "$NO_VENV" = 1 ]; then
  PY=$BASE_PY CONSTRAINTS="${TMPDIR:-/tmp}/xmfu-constraints.$$.txt"
  trap 'rm -f "$CONSTRAINTS"' EXIT
else
  PY="$VENV/bin/python" CONSTRAINTS="$VENV/xmfu-constraints.txt"
fi

say() { echo "xmfu install: $*"; }

# With the venv active, python3 is the venv's own interpreter: a venv made from it over the same folder would be
# made from itself (its python links pointing at themselves, its .pth naming its own site-packages). The
# interpreter the venv was made from is used instead.
if [ "$NO_VENV" = 0 ] && [ -d "$VENV" ]; then
  base_prefix=$("$BASE_PY" -c 'import os, sys; print(os.path.realpath(sys.prefix))' 2>/dev/null || true)
  if [ -n "$base_prefix" ] && [ "$base_prefix" = "$(cd "$VENV" && pwd -P)" ]; then
    # sys._base_executable names the base interpreter from Python 3.11; in 3.10 it is the venv's own python, and
    # sys.base_prefix (the base installation, in every version: the venv module's docs) gives bin/pythonX.Y
    BASE_PY=$("$BASE_PY" -c 'import os, sys
base = getattr(sys, "_base_executable", "") or ""
if not base or os.path.abspath(base).startswith(os.path.abspath(sys.prefix) + os.sep):
    base = os.path.join(sys.base_prefix, "bin", "python%d.%d" % sys.version_info[:2])
print(base)')
    say "$VENV is the active venv (python3 is its own interpreter): it is made again from $BASE_PY, the" \
        "interpreter it was made from" >&2
  fi
fi

# A Google TPU chip on the PCI bus, as jax/_src/hardware_utils.py counts them (vendor 0x1ae0 with a TPU device id:
# v3, plc, v4, v5p, v5e, v6e, TPU7x; the vendor alone is also Google's virtual NIC on every GCE VM).
tpu_chip() {
  local dev
  for dev in /sys/bus/pci/devices/*; do
    [ "$(cat "$dev/vendor" 2>/dev/null)" = 0x1ae0 ] || continue
    case "$(cat "$dev/device" 2>/dev/null)" in
      0x0027|0x0056|0x005e|0x0062|0x0063|0x006f|0x0076) return 0 ;;
    esac
  done
  return 1
}

# Where the device nodes are: /dev (tests/test_install.py points it at a folder of stand-in nodes).
DEV=${XMFU_DEV_DIR:-/dev}

detect_platform() {
  # NVIDIA: the driver's device nodes (what jax/_src/hardware_utils.py looks for) or a working nvidia-smi.
  if [ -e "$DEV/nvidiactl" ] || [ -e "$DEV/nvidia0" ] || nvidia-smi -L >/dev/null 2>&1; then echo cuda
  # AMD: /dev/kfd, ROCm's compute interface shared by all GPUs (ROCm's "Running ROCm Docker containers"), or rocminfo.
  elif [ -e "$DEV/kfd" ] || rocminfo >/dev/null 2>&1; then echo rocm
  # AWS Trainium: the Neuron driver's /dev/neuron0.. nodes (AWS's neuron-ls and container docs pass them in).
  elif compgen -G "$DEV/neuron[0-9]*" >/dev/null; then echo neuron
  # Intel Gaudi: the habanalabs driver's /dev/accel/accel0.. (accel subsystem, a directory, unlike the TPU's
  # /dev/accel0) with a working hl-smi, its management tool.
  elif compgen -G "$DEV/accel/accel[0-9]*" >/dev/null && hl-smi -L >/dev/null 2>&1; then echo hpu
  # Intel data-center GPUs: xpu-smi (Intel's XPU Manager CLI) lists them (an integrated GPU alone is not one).
  elif xpu-smi discovery >/dev/null 2>&1; then echo xpu
  # TPU: a TPU chip on the PCI bus, the /dev/accel* nodes of TPU v2-v4 VMs, or libtpu already installed.
  elif tpu_chip || compgen -G "$DEV/accel[0-9]*" >/dev/null || "$BASE_PY" -c "import libtpu" 2>/dev/null; then echo tpu
  else echo cpu
  fi
}

PLATFORM=${XMFU_PLATFORM:-$(detect_platform)}
case "$PLATFORM" in
  cpu|cuda|rocm|tpu|neuron|hpu|xpu) ;;
  *) echo "install.sh: XMFU_PLATFORM='$PLATFORM' is not one of cpu, cuda, rocm, tpu, neuron, hpu, xpu" >&2; exit 2 ;;
esac
if [ "$MODE" = print-platform ]; then echo "$PLATFORM"; exit 0; fi
say "platform $PLATFORM${XMFU_PLATFORM:+ (XMFU_PLATFORM)}"

run() {
  if [ "$MODE" = dry-run ]; then echo "+ $*"; else "$@"; fi
}
# The interpreter being installed into: the venv's once it exists (a dry run asks the one it would be made from).
py() {
  local py="$PY"
  [ -x "$py" ] || py="$BASE_PY"
  "$py" "$@"
}
has() { py -c "import $1" >/dev/null 2>&1; }  # whether a module imports
vendor_torch() { case "$PLATFORM" in neuron|hpu|xpu) return 0 ;; *) return 1 ;; esac; }
# Offline, pip's only source is the wheelhouse (pip's own docs: --no-index ignores the package index, --find-links
# is where it looks instead; a build-isolation environment is given the same two: pip/_internal/build_env.py).
INDEX=()
[ -z "$OFFLINE" ] || INDEX=(--no-index --find-links "$OFFLINE")
pip_install() {
  if [ -z "$OFFLINE" ] || [ "$MODE" = dry-run ]; then
    run "$PY" -m pip install ${INDEX[@]+"${INDEX[@]}"} -c "$CONSTRAINTS" "$@"
  else
    offline_pip_install "$@"
  fi
}
# A requirement pip cannot find offline is one paragraph naming it and the command that adds it, versions that do not
# fit what is kept one saying so (exit 2 both); pip's own messages are shown first. "No matching distribution found
# for" and "ResolutionImpossible" are pip's wording (pip/_internal/resolution/resolvelib/factory.py).
offline_pip_install() {
  local log status=0 missing explained=""
  log=$(mktemp)
  "$PY" -m pip install "${INDEX[@]}" -c "$CONSTRAINTS" "$@" 2>"$log" || status=$?
  cat "$log" >&2
  missing=$(sed -n 's/^ERROR: No matching distribution found for \([A-Za-z0-9._-]*\).*/\1/p' "$log" | head -n 1)
  if [ "$status" != 0 ] && [ -n "$missing" ]; then explained="--remedy $missing"
  elif [ "$status" != 0 ] && grep -q ResolutionImpossible "$log"; then explained=--conflict
  fi
  rm -f "$log"
  if [ -n "$explained" ]; then
    # shellcheck disable=SC2086  # explained is an option and its value
    "$PY" scripts/wheelhouse_check.py "$OFFLINE" $explained >&2; exit 2
  fi
  return "$status"
}
optional() {  # an install whose failure leaves one backend skipped, not the whole install failed
  local what=$1; shift
  pip_install "$@" || say "$what not installed; the backends that need it will report skipped"
}
# Whether a framework may be installed: online always; offline only where the wheelhouse holds it (its wheels.txt
# lists every wheel as name==version), else a note saying what that leaves out.
available() {
  [ -z "$OFFLINE" ] || grep -qi "^$1==" "$OFFLINE/wheels.txt" && return 0
  say "$1 does not import and is not in the wheelhouse: $2 (make wheelhouse WHEELHOUSE_ADD=$1 adds it)"
  return 1
}
# JAX's CUDA build must be for the CUDA major the image's torch was built for (torch.version.cuda "13.0" -> 13), so
# that the two load one CUDA runtime; 12 where torch says none (a CPU build, or torch not installed yet in a dry run).
cuda_major() {
  local version
  version=$(py -c "import torch; print(torch.version.cuda or '')" 2>/dev/null || true)
  case "${version%%.*}" in
    12|13) echo "${version%%.*}" ;;
    "") echo 12 ;;
    *) say "torch was built for CUDA $version; JAX's CUDA builds in xmfu's extras are for 12 and 13: 12 taken" >&2
       echo 12 ;;
  esac
}

make_venv() {
  # A system Python without ensurepip (Debian's python3 without python3-venv) still makes a venv without pip of its
  # own; `$PY -m pip` then runs the interpreter's pip, which --system-site-packages makes importable, into the venv.
  if ! run "$BASE_PY" -m venv --system-site-packages "$VENV"; then
    say "no ensurepip here: making the venv without pip of its own"
    run "$BASE_PY" -m venv --system-site-packages --without-pip "$VENV"
  fi
  # --system-site-packages shows the base interpreter's packages; where PYTHON is itself a venv's (an image that
  # keeps its torch in one), those are not its packages, so its site folders are added by a .pth file (appended
  # after the venv's own, as site-packages are).
  local base_site
  base_site=$("$BASE_PY" -c 'import site, sys; sys.prefix != sys.base_prefix and print("\n".join(site.getsitepackages()))' \
              2>/dev/null || true)
  [ -n "$base_site" ] || return 0
  say "$BASE_PY is a venv's interpreter: its packages are added to $VENV"
  if [ "$MODE" = dry-run ]; then echo "+ (a .pth file in $VENV naming $base_site)"
  else printf '%s\n' "$base_site" >"$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/xmfu-base-venv.pth"
  fi
}
if [ "$NO_VENV" = 1 ]; then say "into $BASE_PY's own environment (--no-venv)"; else make_venv; fi

# Offline: the wheelhouse's extras come along, and the platform's telemetry where the wheelhouse holds it. The check
# (for this Python, files matching their sha256, every requirement installed or there) runs before any pip.
if [ -n "$OFFLINE" ]; then
  # wheelhouse.json is written by scripts/wheelhouse.py with one setting a line
  EXTRAS=$(printf '%s,%s' "$EXTRAS" "$(sed -n 's/^ *"WHEELHOUSE_EXTRAS": "\([^"]*\)".*/\1/p' "$OFFLINE/wheelhouse.json")")
  case "$PLATFORM" in
    cuda) ! grep -qi '^nvidia-ml-py==' "$OFFLINE/wheels.txt" || EXTRAS="$EXTRAS,nvidia" ;;
    rocm) has amdsmi || ! grep -qi '^amdsmi==' "$OFFLINE/wheels.txt" || EXTRAS="$EXTRAS,amd" ;;
  esac
  EXTRAS=$(printf '%s\n' "$EXTRAS" | sed 's/^,*//; s/,*$//; s/,,*/,/g')
  py scripts/wheelhouse_check.py "$OFFLINE" --extras "$EXTRAS"
  run "$PY" scripts/keep_installed.py --installed-only constraints.txt "$CONSTRAINTS"
else
  run "$PY" scripts/keep_installed.py constraints.txt "$CONSTRAINTS" ${TORCH_VERSION:+"torch==$TORCH_VERSION"}
fi

HAD_JAX=0
if has jax; then HAD_JAX=1; fi

if ! has torch; then
  case "$PLATFORM" in
    # PyPI's Linux torch wheels are CUDA builds; a CPU-only machine may point PIP_EXTRA_INDEX_URL at PyTorch's CPU index.
    cpu|cuda) if available torch "the torch and Triton backends will report skipped"; then pip_install torch; fi ;;
    rocm) say "torch not installed: use the rocm/pytorch image, or PyTorch's ROCm wheels (pytorch.org, Get Started," \
              "names the index for each ROCm release); torch and Triton backends will report skipped" ;;
    tpu) say "torch not installed: xmfu's torch backends do not drive TPUs" ;;
    neuron|hpu|xpu) say "torch not installed: on $PLATFORM it comes from the vendor (AWS Neuron SDK, Intel Gaudi" \
                        "software, Intel's XPU builds); nothing framework-side is installed here" ;;
  esac
fi

# The platform's extra: its telemetry library and JAX's build for it (cuda12 or cuda13: cuda_major). A JAX already
# here stays as it is, plugin and all: pip would add jax[cudaNN]'s plugin to it, so the extra is then only the
# telemetry part. Offline, the telemetry came with the wheelhouse's extras above, and JAX is its own step.
PLATFORM_EXTRA=""
if [ -n "$OFFLINE" ]; then
  if [ "$HAD_JAX" = 0 ] && [ "$PLATFORM" != rocm ] && ! vendor_torch && available jax "the JAX backends will report skipped"; then
    case "$PLATFORM" in cuda) optional jax "jax[cuda$(cuda_major)]" ;; tpu) optional jax "jax[tpu]" ;;
                        *) optional jax jax ;; esac
  fi
  if [ "$PLATFORM" = rocm ] && ! has amdsmi && [ -d /opt/rocm/share/amd_smi ]; then
    optional amdsmi /opt/rocm/share/amd_smi
  fi
else
  case "$PLATFORM" in
    cpu) [ "$HAD_JAX" = 1 ] || optional jax jax ;;
    cuda) if [ "$HAD_JAX" = 1 ]; then PLATFORM_EXTRA=nvidia; else PLATFORM_EXTRA=cuda$(cuda_major); fi ;;
    tpu) [ "$HAD_JAX" = 1 ] || PLATFORM_EXTRA=tpu ;;
    neuron|hpu|xpu) ;;  # the vendor's torch (and its JAX, where one exists) is the image's; xmfu adds none
    rocm)
      [ "$HAD_JAX" = 1 ] || say "jax not installed: JAX on ROCm comes from AMD (rocm/jax images, or" \
                                "jax[rocm7-local] on ROCm 7); jax backends will report skipped"
      if ! has amdsmi; then
        if [ -d /opt/rocm/share/amd_smi ]; then  # the bindings ROCm ships, matching its libamd_smi.so
          optional amdsmi /opt/rocm/share/amd_smi
        else
          PLATFORM_EXTRA=rocm  # PyPI's amdsmi: needs ROCm's libamd_smi.so of the same release at run time
        fi
      fi ;;
  esac
fi

ALL_EXTRAS=$(printf '%s\n' "$EXTRAS" "$PLATFORM_EXTRA" | paste -sd, - | sed 's/^,*//; s/,*$//; s/,,*/,/g')
TARGET=".${ALL_EXTRAS:+[$ALL_EXTRAS]}"
if [ -n "$OFFLINE" ] && [ "$EDITABLE" = 0 ]; then
  # the wheelhouse's own xmfu wheel, so that the node builds nothing; pinned, as an older xmfu here would satisfy it
  TARGET="xmfu${ALL_EXTRAS:+[$ALL_EXTRAS]}==$(sed -n 's/^ *"xmfu": "\([^"]*\)".*/\1/p' "$OFFLINE/wheelhouse.json")"
fi
# An editable install builds xmfu here; offline, pip's isolated build takes setuptools from the wheelhouse (which
# holds the release pip would pick online): an environment's own can be too old for pyproject.toml (Python 3.11's
# venv brings setuptools 65.5, which cannot read the version through package-dir).
if [ "$EDITABLE" = 1 ]; then pip_install -e "$TARGET"; else pip_install "$TARGET"; fi
# Editable only: from a folder holding a clone named xmfu, `import xmfu` found the clone's folder (an empty namespace
# package) before setuptools' editable finder; scripts/xmfu_checkout_finder.py, imported at start-up by a .pth file,
# hands that name to the editable install instead.
if [ "$EDITABLE" = 1 ]; then
  if [ "$MODE" = dry-run ]; then echo "+ (scripts/xmfu_checkout_finder.py and a .pth importing it, into site-packages)"
  else
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    cp scripts/xmfu_checkout_finder.py "$site/" && echo "import xmfu_checkout_finder" >"$site/xmfu-checkout-finder.pth"
  fi
fi

# optax (the cuda and tpu extras bring it with their jax) needs jax, so only beside one: pip would fetch a plain
# CPU jax for it. A dry run counts the jax it would have installed on a CPU.
if ! has optax && { has jax || [ "$MODE,$PLATFORM,$HAD_JAX" = dry-run,cpu,0 ]; } && available optax \
   "the JAX training-step backends will report skipped"; then optional optax optax; fi
if ! has triton; then
  case "$PLATFORM" in
    # PyPI's torch brings Triton itself on Linux x86_64
    cpu|cuda) if available triton "the Triton backends will report skipped"; then optional triton triton; fi ;;
    rocm) say "triton not installed: ROCm's torch ships it as pytorch-triton-rocm" ;;
    tpu|neuron|hpu|xpu) ;;
  esac
fi
say "done ($PLATFORM${ALL_EXTRAS:+, extras $ALL_EXTRAS})"
