#!/usr/bin/env bash
# Everything the CUDA backend is checked by, on the GPU machine (CUDA 13, nvcc, PyTorch, no
# Rust). Inputs prepared on the build machine by tests/device/build.sh into devcarry/cuda/.
# Usage (repository root): bash tests/device/run_all.sh [devcarry/cuda]
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${1:-$root/devcarry/cuda}"
export PATH="/usr/local/cuda/bin:$PATH"
# NVRTC and cuBLAS: the toolkit's, else PyTorch's wheels.
libs="/usr/local/cuda/lib64:$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
for s in site.getsitepackages():
    for pat in ("nvidia/*/lib", "nvidia/cu*/lib"):
        dirs.update(glob.glob(os.path.join(s, pat)))
print(":".join(sorted(dirs)))
PY
)"
export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
status=0
echo "== 1. nvcc compile check of every translated kernel variant"
bash "$root/tests/device/cuda_compile.sh" "$bin/kernels" || status=1
echo "== 2. kiln CUDA backend tests (vs the CPU oracle)"
"$bin/kiln-lib-test" cuda:: --test-threads 1 || status=1
for t in "$bin"/conformance-*; do
  [ -x "$t" ] || continue
  echo "== 2b. conformance: $(basename "$t")"
  KILN_CONFORMANCE_DEVICE=cuda "$t" --test-threads 1 || status=1
done
echo "== 3. benchmarks beside PyTorch on the same GPU"
python3 "$root/tests/bench/cuda_vs_torch.py" --kiln-bin "$bin/kiln" --kiln-lib-test "$bin/kiln-lib-test" \
  --data "$root/shared/data/mnist" || status=1
echo "run_all: exit $status"
exit $status
