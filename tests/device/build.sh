#!/usr/bin/env bash
# On the build machine: prepares devcarry/cuda/ (gitignored) for tests/device/run_all.sh:
# the release `kiln` with --features cuda, the kiln lib test binary (CUDA backend tests and
# the `cuda::bench` figures), and every translated kernel variant as .cu for nvcc.
set -eu
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out="$root/devcarry/cuda"
rm -rf "$out" && mkdir -p "$out/kernels"
KILN_CUDA_DUMP="$out/kernels" cargo test --release -p kiln-kernels --test translate every_planned_variant
cargo build --release -p kiln --features cuda --bin kiln
cp "${CARGO_TARGET_DIR:-target}/release/kiln" "$out/kiln"
test_bin="$(cargo test --release -p kiln --features cuda --lib --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])' | tail -n 1)"
cp "$test_bin" "$out/kiln-lib-test"
strip "$out/kiln" "$out/kiln-lib-test" || true
du -sh "$out"
