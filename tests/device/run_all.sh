#!/usr/bin/env bash
# Everything the CUDA backend is checked by, on the GPU machine (CUDA 12 or 13 and PyTorch; no
# Rust), in one call. Its inputs come from tests/device/build.sh, in devcarry/cuda/.
# Usage (repository root): bash tests/device/run_all.sh [devcarry/cuda]
# Steps: 1. the CUDA backend tests (every planned kernel variant compiled by NVRTC, ops vs the
# CPU oracle); 2. the conformance suite on cuda, when carried; 3. `kiln train mnist --device cuda
# --epochs 1`; 4. tests/bench/cuda_vs_torch.py; 5. wgpu through Vulkan: conformance, training,
# tests/bench/wgpu_vs_torch.py; 6. CPU training bench vs PyTorch CPU. Exit status 1 if any failed.
set -u -o pipefail
source "$(dirname "$0")/env.sh"
device_bin "${1:-}"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
work="$(mktemp -d)"
status=0
step() { echo; echo "== $*"; }

step "1. CUDA backend tests: NVRTC on every planned kernel variant, ops vs the CPU oracle"
"$bin/kiln-lib-test" cuda:: --test-threads 1 --nocapture 2>&1 | grep -v '^$' || status=1

step "2. conformance suite on cuda (every op forward and backward vs the CPU oracle)"
for suite in "$bin"/conformance-*; do
  if [ -x "$suite" ]; then
    KILN_CONFORMANCE_DEVICE=cuda "$suite" --test-threads 1 2>&1 | tail -n 40 || status=1
  else
    echo "not carried (tests/device/build.sh could not build it); skipped"
  fi
done

step "3. kiln train mnist --device cuda --epochs 1"
(cd "$work" && "$bin/kiln" train mnist --device cuda --epochs 1 --quiet --data "$bin/mnist" \
  --out "$work/model.safetensors") 2>&1 | tail -n 20 || status=1

step "4. kiln vs PyTorch on the same GPU"
python3 "$root/tests/bench/cuda_vs_torch.py" --kiln-bin "$bin/kiln" \
  --kiln-lib-test "$bin/kiln-lib-test" --data "$bin/mnist" || status=1

# wgpu on the same GPU through Vulkan: the loader comes from the carried .gl/ debs (see README).
step "5. wgpu on Vulkan: conformance suite, kiln train mnist --device wgpu --epochs 1, bench vs PyTorch"
if [ -d "$root/.gl" ]; then
  for f in "$root"/.gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export WGPU_BACKEND=vulkan
for suite in "$bin"/conformance-*; do
  if [ -x "$suite" ]; then
    KILN_CONFORMANCE_DEVICE=wgpu "$suite" --test-threads 1 2>&1 | tail -n 20 || status=1
  fi
done
(cd "$work" && "$bin/kiln" train mnist --device wgpu --epochs 1 --quiet --data "$bin/mnist" \
  --out "$work/model-wgpu.safetensors") 2>&1 | tail -n 5 || status=1
"$bin/kiln" bench train-mnist --device wgpu --data "$bin/mnist" 2>&1 | tail -n 3 || status=1
if [ -x "$bin/wgpu_bench" ]; then
  python3 "$root/tests/bench/wgpu_vs_torch.py" --kiln-bench "$bin/wgpu_bench" 2>&1 | tail -n 30 || status=1
fi

step "6. CPU: kiln bench train-mnist vs PyTorch CPU, same machine, 2 and 16 threads"
export KILN_MNIST_DIR="$bin/mnist"
for t in 2 16; do
  RAYON_NUM_THREADS=$t python3 "$root/tests/bench/mnist_torch_cpu.py" --threads $t --run-kiln \
    --kiln-bin "$bin/kiln" --data "$bin/mnist" 2>&1 | tail -n 6 || status=1
done

rm -rf "$work"
echo
echo "run_all: exit $status"
exit $status
