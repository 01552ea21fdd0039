#!/usr/bin/env bash
# Install xmfu into a virtual environment that reuses the machine's own torch / JAX / Triton builds.
# The one install procedure: `make install` and every Dockerfile run this script (tests/test_install.py checks).
#
# usage: scripts/install.sh [--editable] [--extras LIST] [--dry-run | --print-platform]
#   --editable        pip install -e (a checkout being worked on); default: a regular install (the containers)
#   --extras LIST     xmfu extras besides the platform's, comma-separated (make install: dev)
#   --dry-run         print the platform and the commands, run nothing
#   --print-platform  print the platform (cpu | cuda | rocm | tpu) and stop
# environment:
#   XMFU_PLATFORM  cpu | cuda | rocm | tpu: use it instead of detecting (a `docker build` sees no device)
#   PYTHON         the interpreter the venv is made from (default python3)
#   VENV           the venv (default .venv), made with --system-site-packages so the image's frameworks are seen
#   TORCH_VERSION  the torch to install where none is importable (default: constraints.txt's pin)
#
# Nothing importable is ever replaced: the frameworks are installed only where `import` fails, and pip runs with
# constraints.txt in which every package already installed is pinned to the version it has (keep_installed.py).
set -euo pipefail
cd "$(dirname "$0")/.."

EDITABLE=0 EXTRAS="" MODE=install
while [ $# -gt 0 ]; do
  case "$1" in
    --editable) EDITABLE=1 ;;
    --extras) EXTRAS="$2"; shift ;;
    --dry-run) MODE=dry-run ;;
    --print-platform) MODE=print-platform ;;
    *) echo "install.sh: unknown argument '$1' (see the comment at the top of scripts/install.sh)" >&2; exit 2 ;;
  esac
  shift
done

BASE_PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
CONSTRAINTS="$VENV/xmfu-constraints.txt"

say() { echo "xmfu install: $*"; }

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

detect_platform() {
  # NVIDIA: the driver's device nodes (what jax/_src/hardware_utils.py looks for) or a working nvidia-smi.
  if [ -e /dev/nvidiactl ] || [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; then echo cuda
  # AMD: /dev/kfd, ROCm's compute interface shared by all GPUs (ROCm's "Running ROCm Docker containers"), or rocminfo.
  elif [ -e /dev/kfd ] || rocminfo >/dev/null 2>&1; then echo rocm
  # TPU: a TPU chip on the PCI bus, the /dev/accel* nodes of TPU v2-v4 VMs, or libtpu already installed.
  elif tpu_chip || compgen -G "/dev/accel[0-9]*" >/dev/null || "$BASE_PY" -c "import libtpu" 2>/dev/null; then echo tpu
  else echo cpu
  fi
}

PLATFORM=${XMFU_PLATFORM:-$(detect_platform)}
case "$PLATFORM" in
  cpu|cuda|rocm|tpu) ;;
  *) echo "install.sh: XMFU_PLATFORM='$PLATFORM' is not one of cpu, cuda, rocm, tpu" >&2; exit 2 ;;
esac
if [ "$MODE" = print-platform ]; then echo "$PLATFORM"; exit 0; fi
say "platform $PLATFORM${XMFU_PLATFORM:+ (XMFU_PLATFORM)}"

run() {
  if [ "$MODE" = dry-run ]; then echo "+ $*"; else "$@"; fi
}
# Whether a module imports: in the venv once it exists (a dry run asks the interpreter it would be made from).
has() {
  local py="$PY"
  [ -x "$py" ] || py="$BASE_PY"
  "$py" -c "import $1" >/dev/null 2>&1
}
pip_install() { run "$PY" -m pip install -c "$CONSTRAINTS" "$@"; }
optional() {  # an install whose failure leaves one backend skipped, not the whole install failed
  local what=$1; shift
  pip_install "$@" || say "$what not installed; the backends that need it will report skipped"
}

# A system Python without ensurepip (Debian's python3 without python3-venv) still makes a venv without pip of its
# own; `$PY -m pip` then runs the interpreter's pip, which --system-site-packages makes importable, into the venv.
if ! run "$BASE_PY" -m venv --system-site-packages "$VENV"; then
  say "no ensurepip here: making the venv without pip of its own"
  run "$BASE_PY" -m venv --system-site-packages --without-pip "$VENV"
fi
# --system-site-packages shows the base interpreter's packages; where PYTHON is itself a venv's (an image that keeps
# its torch in one), those are not its packages, so its site folders are added by a .pth file (appended after the
# venv's own, as site-packages are).
BASE_SITE=$("$BASE_PY" -c 'import site, sys; sys.prefix != sys.base_prefix and print("\n".join(site.getsitepackages()))' \
            2>/dev/null || true)
if [ -n "$BASE_SITE" ]; then
  say "$BASE_PY is a venv's interpreter: its packages are added to $VENV"
  if [ "$MODE" = dry-run ]; then echo "+ (a .pth file in $VENV naming $BASE_SITE)"
  else printf '%s\n' "$BASE_SITE" >"$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/xmfu-base-venv.pth"
  fi
fi
run "$PY" scripts/keep_installed.py constraints.txt "$CONSTRAINTS" ${TORCH_VERSION:+"torch==$TORCH_VERSION"}

HAD_JAX=0
if has jax; then HAD_JAX=1; fi

if ! has torch; then
  case "$PLATFORM" in
    # PyPI's Linux torch wheels are CUDA builds; a CPU-only machine may point PIP_EXTRA_INDEX_URL at PyTorch's CPU index.
    cpu|cuda) pip_install torch ;;
    rocm) say "torch not installed: use the rocm/pytorch image, or PyTorch's ROCm wheels (pytorch.org, Get Started," \
              "names the index for each ROCm release); torch and Triton backends will report skipped" ;;
    tpu) say "torch not installed: xmfu's torch backends do not drive TPUs" ;;
  esac
fi

# The platform's extra: its telemetry library and JAX's build for it. A JAX already here stays as it is, plugin and
# all: pip would add jax[cuda12]'s plugin to it, so the extra is then only the telemetry part.
PLATFORM_EXTRA=""
case "$PLATFORM" in
  cpu) [ "$HAD_JAX" = 1 ] || optional jax jax ;;
  cuda) if [ "$HAD_JAX" = 1 ]; then PLATFORM_EXTRA=nvidia; else PLATFORM_EXTRA=cuda; fi ;;
  tpu) [ "$HAD_JAX" = 1 ] || PLATFORM_EXTRA=tpu ;;
  rocm)
    [ "$HAD_JAX" = 1 ] || say "jax not installed: JAX on ROCm comes from AMD (rocm/jax images, or jax[rocm7-local]" \
                              "on ROCm 7); jax backends will report skipped"
    if ! has amdsmi; then
      if [ -d /opt/rocm/share/amd_smi ]; then  # the bindings ROCm ships, matching its libamd_smi.so
        optional amdsmi /opt/rocm/share/amd_smi
      else
        PLATFORM_EXTRA=rocm  # PyPI's amdsmi: needs ROCm's libamd_smi.so of the same release at run time
      fi
    fi ;;
esac

ALL_EXTRAS=$(printf '%s\n' "$EXTRAS" "$PLATFORM_EXTRA" | paste -sd, - | sed 's/^,*//; s/,*$//; s/,,*/,/g')
TARGET=".${ALL_EXTRAS:+[$ALL_EXTRAS]}"
if [ "$EDITABLE" = 1 ]; then pip_install -e "$TARGET"; else pip_install "$TARGET"; fi

# optax (the cuda and tpu extras bring it with their jax) needs jax, so only beside one: pip would fetch a plain
# CPU jax for it. A dry run counts the jax it would have installed on a CPU.
if ! has optax && { has jax || [ "$MODE,$PLATFORM,$HAD_JAX" = dry-run,cpu,0 ]; }; then optional optax optax; fi
if ! has triton; then
  case "$PLATFORM" in
    cpu|cuda) optional triton triton ;;  # PyPI's torch brings Triton itself on Linux x86_64
    rocm) say "triton not installed: ROCm's torch ships it as pytorch-triton-rocm" ;;
    tpu) ;;
  esac
fi
say "done ($PLATFORM${ALL_EXTRAS:+, extras $ALL_EXTRAS})"
