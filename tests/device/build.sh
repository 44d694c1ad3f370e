#!/usr/bin/env bash
# On the build machine (repository root): prepares devcarry/cuda/ (gitignored) for
# tests/device/run_all.sh on the GPU machine:
#   kiln             release `kiln` with --features nccl (CUDA, and NCCL for `--gpus N`)
#   kiln-lib-test    kiln's lib tests with --features nccl: the CUDA backend tests (every planned
#                    kernel variant through NVRTC, ops vs the CPU oracle), the NCCL tests (on 2
#                    GPUs where there are 2) and the ignored `cuda::bench`
#   conformance-ops, conformance-fast_paths, conformance-transformer, conformance-custom_op
#                    the conformance suites (every op forward and backward vs the CPU oracle;
#                    the kernels' fast paths and their fallbacks), when they build with
#                    --features cuda
#   wgpu_bench       kernels/examples/wgpu_bench.rs (matmul, add, sum, copy on wgpu's device)
#   mnist/           the MNIST .gz files from shared/data/mnist
#   shakespeare/     the Shakespeare corpus (plays/*.txt.gz) from shared/data/shakespeare
set -eu
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out="$root/devcarry/cuda"
rm -rf "$out" && mkdir -p "$out/mnist"
target="${CARGO_TARGET_DIR:-$root/target}"

# Prints the executables of the test targets of kind $1 that a `cargo test --no-run` reports.
executables() {
  python3 -c 'import json, sys
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and sys.argv[1] in m["target"]["kind"] + [m["target"]["name"]]:
        print(m["executable"])' "$1"
}

cargo build --release -p kiln --features nccl --bin kiln
cp "$target/release/kiln" "$out/kiln"
lib="$(cargo test --release -p kiln --features nccl --lib --no-run --message-format=json | executables lib | tail -n 1)"
cp "$lib" "$out/kiln-lib-test"
for suite in ops fast_paths transformer custom_op; do
  if exe="$(cargo test --release -p kiln-conformance --features cuda --test $suite --no-run --message-format=json | executables $suite | tail -n 1)" && [ -n "$exe" ]; then
    cp "$exe" "$out/conformance-$suite"
  else
    echo "build.sh: the conformance suite $suite did not build with --features cuda; run_all.sh will skip it"
  fi
done
cargo build --release -p kiln-kernels --example wgpu_bench
cp "$target/release/examples/wgpu_bench" "$out/wgpu_bench"
data="$(cd "$root/.." && pwd)/shared/data/mnist"
[ -d "$root/shared/data/mnist" ] && data="$root/shared/data/mnist"
cp "$data"/*-ubyte.gz "$out/mnist/"
mkdir -p "$out/shakespeare/plays"
cp "$(dirname "$data")"/shakespeare/plays/*.txt.gz "$out/shakespeare/plays/"
strip "$out"/kiln "$out"/kiln-lib-test "$out"/conformance-* "$out"/wgpu_bench 2>/dev/null || true
du -sh "$out"
# The device tool carries at most 64 MiB with the working tree: carry the archive, not the folder
# (run_all.sh unpacks it when devcarry/cuda/ is missing).
tar -C "$root/devcarry" -cf - cuda | xz -T0 -3 > "$root/devcarry/cuda.tar.xz"
du -sh "$root/devcarry/cuda.tar.xz"
echo "carry: [\"devcarry/cuda.tar.xz\", \".gl\"] (move devcarry/cuda aside first)"
