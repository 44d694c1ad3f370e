# Sourced by the GPU machine scripts (tests/device/*.sh).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# device_libs: NVRTC, cuBLAS and NCCL from the toolkit, else from PyTorch's nvidia wheels.
device_libs() {
  local wheels
  wheels="$(python3 -c 'import glob, site
print(":".join(sorted({d for s in site.getsitepackages() for d in glob.glob(s + "/nvidia/*/lib")})))' 2>/dev/null || true)"
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${wheels}:${LD_LIBRARY_PATH:-}"
}

# device_bin [DIR]: sets $bin to DIR (default devcarry/cuda, what tests/device/build.sh
# writes), unpacking devcarry/cuda.tar.xz first when DIR is missing; then device_libs.
device_bin() {
  local dir="${1:-$root/devcarry/cuda}"
  if [ ! -d "$dir" ] && [ -f "$root/devcarry/cuda.tar.xz" ]; then
    tar -C "$root/devcarry" -xJf "$root/devcarry/cuda.tar.xz"
  fi
  bin="$(cd "$dir" && pwd)"
  device_libs
}
