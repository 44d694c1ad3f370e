#!/usr/bin/env bash
# Fusion on the GPU machine (after tests/device/build.sh; repository root), fused against
# unfused (KILN_FUSION=0) in one run:
#   1. `kiln bench fusion`: GELU composed from 6 tensor ops on 2^24 f32, fused, unfused and a
#      device copy of the same bytes, on CUDA and on Vulkan (wgpu; needs the carried .gl/ debs)
#   2. tests/bench/cuda_vs_torch.py (MNIST training at batch 64 and 256 against PyTorch eager)
#   3. tests/bench/gpt_vs_torch.py (the GPT's training tokens/s against PyTorch eager)
#   4. the conformance ops suite on CUDA through the fusion decorator
# Usage: bash tests/device/fusion_bench.sh [cuda|vulkan|mnist|gpt|conformance]...  (default: all)
set -u -o pipefail
source "$(dirname "$0")/env.sh"
device_bin
steps="${*:-cuda vulkan mnist gpt conformance}"
for s in $steps; do
  case "$s" in
    cuda) KILN_FUSION_LOG=1 "$bin/kiln" bench fusion --device cuda --runs 50 ;;
    vulkan)
      # The Vulkan loader is not on the GPU machine: unpack the carried Debian packages.
      for f in "$root"/.gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
      ldconfig 2>/dev/null
      VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} \
        WGPU_BACKEND=vulkan "$bin/kiln" bench fusion --device wgpu --runs 50 ;;
    mnist)
      for f in 1 0; do
        echo "== KILN_FUSION=$f"
        KILN_FUSION=$f python3 "$root/tests/bench/cuda_vs_torch.py" --kiln-bin "$bin/kiln" \
          --data "$bin/mnist" 2>&1 | grep -E "mnist train"
      done ;;
    gpt)
      for f in 1 0; do
        echo "== KILN_FUSION=$f"
        KILN_FUSION=$f python3 "$root/tests/bench/gpt_vs_torch.py" --kiln-bin "$bin/kiln" \
          --data "$bin/shakespeare" 2>&1 | tail -n 3
      done ;;
    conformance)
      KILN_CONFORMANCE_DEVICE=cuda "$bin/conformance-ops" --test-threads 1 2>&1 | tail -n 4 ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
