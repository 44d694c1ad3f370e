#!/usr/bin/env bash
# Builds the npm package kiln-ml (npm/) from web/ (the main module and the threaded one, each
# also without WebGPU, and the main module with text generation, which npm/index.js loads only on
# a page's first TextModel.load) and web-onnx/ (the ONNX converter, a module that npm/index.js
# loads only when a page first meets an ONNX file)
# and assembles the draw-a-digit page in www/ and the text demo in www/text/,
# installing what the build needs when it is missing (scripts/lib/ensure.sh): the wasm32 target,
# wasm-bindgen-cli at the version web's wasm-bindgen is pinned to, and tests/web's npm tools
# (binaryen's wasm-opt). scripts/test-web.sh runs the web tests on top of this.
#   scripts/build-web.sh           release build, wasm-opt -Oz, size check, npm pack, page in www/
#   KILN_WEB_QUICK=1 scripts/build-web.sh      release build without wasm-opt and its size check
#                                  (scripts/demo.sh: the page runs the same, see KILN_WEB_QUICK below)
#   KILN_WEB_DEV=1 scripts/build-web.sh        unoptimised, fastest to build
#   KILN_WEB_OPT_LEVEL=z scripts/build-web.sh  rustc opt-level for the release .wasm (default 3)
#   KILN_WEB_THREADS=0 scripts/build-web.sh    without the threaded module (no nightly build;
#                                  npm/index.js then uses the main module everywhere)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/lib/ensure.sh
start=$(date +%s)
step() { printf '\n--- [%4ss] %s\n' "$(($(date +%s) - start))" "$*"; }

step "toolchain"
ensure_rust_targets
ensure_wasm_bindgen
[ "${KILN_WEB_THREADS:-1}" = 0 ] || ensure_nightly
[ -n "${KILN_WEB_QUICK:-}${KILN_WEB_DEV:-}" ] || ensure_npm_tools

step "wasm: cargo build -p kiln-web (CPU only, WebGPU only, with text generation, with both) -p kiln-web-onnx, wasm-bindgen -> npm/dist"
profile=release
cargo_args=(--release)
if [ -n "${KILN_WEB_DEV:-}" ]; then
  profile=debug
  cargo_args=()
fi
if [ -z "${KILN_WEB_DEV:-}" ]; then
  # Set here rather than in the workspace profile so native release builds stay as they are.
  # Measured (wasm-opt -Oz, gzip -9, WebGPU + CPU): opt-level z + fat LTO 293.5 KiB, MNIST CNN
  # prediction on the CPU path 5.7 ms; opt-level 3 + fat LTO with simd128 (.cargo/config.toml)
  # 385.4 KiB, 2.2 ms (403.6 KiB since TextModel, stop 26). The budget (npm/size-budget.json) is
  # 420 KiB; z stays available through KILN_WEB_OPT_LEVEL=z.
  export CARGO_PROFILE_RELEASE_OPT_LEVEL=${KILN_WEB_OPT_LEVEL:-3}
  export CARGO_PROFILE_RELEASE_LTO=fat
  export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
  export CARGO_PROFILE_RELEASE_PANIC=abort
  # Dependencies (wgpu's web layer, serde, safetensors...) are built for size: they are not the
  # hot loops. kiln-core (the CPU kernels) and matrixmultiply keep the opt-level above; so do
  # kiln's other crates unless named here. Measured at 70576ed: 401.9 KiB gzipped with every
  # crate at 3. kiln-kernels (the GPU planner, fusion, WGSL generation: host code run once per
  # op) at z: 448.9 KiB instead of 451.0, with no measurable change in kiln CPU's MNIST batch 1
  # and 64 nor in the host cost of a WebGPU dispatch (issue 18). kiln-web at s: the fat-LTO link
  # runs at the cdylib's level, and at z (438.1 KiB then) batch 64 was 11-15% slower; at s the
  # main module is 4.3 KiB smaller (430.9 -> 426.6 KiB) with batch 1 and 64 unchanged in
  # interleaved rounds (issue 18, bytes).
  if [ -z "${KILN_WEB_OPT_LEVEL:-}" ]; then
    cargo_args+=(--config 'profile.release.package."*".opt-level="z"'
      --config 'profile.release.package.matrixmultiply.opt-level=3'
      --config 'profile.release.package.kiln-kernels.opt-level="z"'
      --config 'profile.release.package.kiln-web.opt-level="s"')
  fi
  # The ONNX converter runs one trace per model file, so it is built for size throughout: its
  # own crates at opt-level z, and z for its fat-LTO link, which follows the cdylib's level
  # (kiln-core is shared with the main module and built once, at the level above). Measured
  # before wasm-opt: 392.2 KiB gzipped, against 430.5 KiB with both at 3 (362.2 KiB after -Oz).
  cargo_args+=(--config 'profile.release.package.kiln-onnx.opt-level="z"'
    --config 'profile.release.package.kiln-web-onnx.opt-level="z"')
fi
# wasm-opt is npm's binaryen, a JavaScript build: -Oz takes minutes on 2 cores. Its output is
# cached by the hash of its input, so an unchanged module is not optimised twice. It runs on one
# core, so each module is optimised in the background as soon as wasm-bindgen has written it,
# beside the next cargo build, whose fat-LTO link runs on one core too (all five side by side at
# the end took 86-135 s each on 2 cores).
optimising=()
cache="${CARGO_TARGET_DIR:-$ROOT/target}/wasm-opt-cache"
# The single-threaded modules' memory starts with the stack (rustc links wasm32 stack-first), so
# their low 1 KiB is reached only by a stack within 1 KiB of overflowing: wasm-opt may then fold
# constant offsets into loads and stores (--low-memory-unused; the CPU-only module 1.5 KiB smaller
# gzipped, issue 18, bytes; MNIST in the page unchanged in run.mjs --ab). No gain in the threaded
# modules, whose memory is imported.
# --converge repeats -Oz until it stops shrinking the module: 0.5 KiB off the CPU-only one for
# about 25 s more each, in the background.
oz=(-Oz --low-memory-unused --converge)
# bindgen NAME WASM: wasm-bindgen's glue and module for WASM as npm/dist/NAME.js and NAME_bg.wasm,
# the functions the module imports from the glue renamed to short names in both
# (scripts/lib/short-imports.mjs: wasm-bindgen's hashed names do not compress; the WebGPU page
# 247.1 -> 240.3 KiB gzipped, the CPU page 242.7 -> 239.9, issue 18, bytes).
bindgen() {
  wasm-bindgen --target web --no-typescript --out-dir npm/dist --out-name "$1" "$2"
  node scripts/lib/short-imports.mjs "npm/dist/$1"
}
# optimise WASM LEVEL [FLAG...]: wasm-opt at LEVEL, with the features every module uses and FLAG...
optimise() {
  local wasm=$1 level=$2 key before t0
  shift 2
  key=$(cat "$wasm" <(echo "$level $*") | sha256sum | cut -c1-32)
  before=$(stat -c %s "$wasm")
  if [ -f "$cache/$key.wasm" ]; then
    cp "$cache/$key.wasm" "$wasm"
    echo "wasm-opt $level $wasm: unchanged module, reused $cache/$key.wasm"
    return
  fi
  t0=$(date +%s)
  wasm-opt "$level" --strip-debug --strip-producers --enable-bulk-memory --enable-nontrapping-float-to-int \
    --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue "$@" \
    "$wasm" -o "$wasm.opt"
  mv "$wasm.opt" "$wasm"
  mkdir -p "$cache"
  cp "$wasm" "$cache/$key.wasm"
  echo "wasm-opt $level $wasm: $before -> $(stat -c %s "$wasm") bytes in $(($(date +%s) - t0)) s"
}
# optimise_later WASM LEVEL [FLAG...]: `optimise` in the background, waited for at the end (release
# builds only).
optimise_later() {
  [ -z "${KILN_WEB_DEV:-}${KILN_WEB_QUICK:-}" ] || return 0
  optimise "$@" &
  optimising+=($!)
}
rm -rf npm/dist
wasm_out="${CARGO_TARGET_DIR:-$ROOT/target}/wasm32-unknown-unknown/$profile"
# The CPU-only build first: npm/index.js loads it where a page asks for no WebGPU or has none
# (Node included). The CPU backend alone, without wgpu's web layer and kiln-kernels (planner,
# fusion, WGSL), is about a quarter smaller (336.9 against 434.0 KiB gzipped when it was added).
# Its kiln-web has other features, so cargo keeps both builds' artifacts; only the .wasm file is
# shared, and the main build below leaves its own there (npm/check-types.mjs reads it).
cargo build -p kiln-web --lib --target wasm32-unknown-unknown --no-default-features --features cpu "${cargo_args[@]}"
bindgen kiln_web_cpu "$wasm_out/kiln_web.wasm"
optimise_later npm/dist/kiln_web_cpu_bg.wasm "${oz[@]}"
# The WebGPU-only module (`init({ cpu: false })`): WebGPU without the CPU kernels, whose CPU
# device holds tensors but runs no op; about a third smaller than the main module (issue 18,
# bytes). Single-threaded only: threads serve the CPU kernels. Every crate at opt-level z (kiln-web
# too, whose level the fat-LTO link follows): without its kernels kiln-core is host code run once
# per op or per model (graphs, plans, model loading), as kiln-kernels is. Measured (issue 18,
# bytes): 254.5 -> 233.8 KiB (GNU gzip -9 after -Oz), and in `run.mjs --ab` (modules G,G, both
# orders) MNIST on WebGPU at batch 1 1.009 and 1/1.018 (30 blocks of 20), at batch 64 1.043 and
# 1/0.984 (8 blocks of 3, spread about 10%), the forward call's host time 0.560 against 0.605 ms
# and 0.570 against 0.580 ms.
gpu_only_args=("${cargo_args[@]}")
[ "$profile" = debug ] || gpu_only_args+=(--config 'profile.release.opt-level="z"' --config 'profile.release.package.kiln-web.opt-level="z"')
cargo build -p kiln-web --lib --target wasm32-unknown-unknown --no-default-features --features webgpu "${gpu_only_args[@]}"
bindgen kiln_web_gpu "$wasm_out/kiln_web.wasm"
optimise_later npm/dist/kiln_web_gpu_bg.wasm "${oz[@]}"
# The text-generation module: the main module with TextModel (the `text` feature), which
# npm/index.js loads on a page's first TextModel.load only. Built before the main module, whose
# .wasm is then the one left in the target folder; npm/check-types.mjs reads both (this one
# from a copy).
cargo build -p kiln-web --lib --target wasm32-unknown-unknown --features text "${cargo_args[@]}"
cp "$wasm_out/kiln_web.wasm" "$wasm_out/kiln_web_text.wasm"
bindgen kiln_web_text "$wasm_out/kiln_web_text.wasm"
optimise_later npm/dist/kiln_web_text_bg.wasm "${oz[@]}"
# Both modules in one cargo run: the crates they share (kiln-core, serde, ...) compile once.
cargo build -p kiln-web -p kiln-web-onnx --lib --target wasm32-unknown-unknown "${cargo_args[@]}"
for name in kiln_web kiln_web_onnx; do
  bindgen "$name" "$wasm_out/$name.wasm"
  optimise_later "npm/dist/${name}_bg.wasm" "${oz[@]}"
done

if [ "${KILN_WEB_THREADS:-1}" != 0 ]; then
  step "wasm, threaded: kiln-web with +atomics on $KILN_NIGHTLY -> npm/dist/kiln_web_threads{_cpu,_text,}*"
  # npm/index.js loads this module instead of the main one on cross-origin isolated pages: the
  # CPU kernels then run on a pool of Web Workers sharing its memory (web/src/threads.rs).
  # Atomics need a standard library built with them (-Z build-std, nightly only); std's
  # optimize_for_size (smaller sorts, formatting and string search; kiln's kernels are its own
  # code) took the module from 480.3 to 460.9 KiB gzipped (the main module: 455.8). Its
  # own target folder: the flags differ, and the .wasm would overwrite the main module's.
  threads_target="${CARGO_TARGET_DIR:-$ROOT/target}/threads"
  # The memory is shared, so the linker is told to import it (wasm-bindgen's loader creates it)
  # with a maximum (4 GiB, the main module's reach) and to export what sets up each thread's
  # thread-local storage.
  # RUSTFLAGS replaces .cargo/config.toml's wasm32 flags, so its unrolling rule is repeated.
  # Legacy symbol names, as stable rustc gives the other modules: the nightly's default (v0)
  # spells out the types in the names of wasm-bindgen's closure shims, which the module exports
  # and the glue calls (up to 334 characters each; -0.6 KB gzipped, issue 18, bytes).
  threads_rustflags="-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128 -C llvm-args=-unroll-runtime=false"
  threads_rustflags+=" -Z unstable-options -C symbol-mangling-version=legacy"
  for arg in --shared-memory --max-memory=4294967296 --import-memory --export=__wasm_init_tls \
    --export=__tls_size --export=__tls_align --export=__tls_base; do
    threads_rustflags+=" -C link-arg=$arg"
  done
  # Three builds, as for the main module: CPU only (kiln_web_threads_cpu, for `webgpu: false`),
  # with text generation (kiln_web_threads_text: TextModel on an isolated page), with WebGPU.
  for name in kiln_web_threads_cpu kiln_web_threads_text kiln_web_threads; do
    case $name in
      kiln_web_threads_cpu) features=(--features threads --no-default-features) ;;
      kiln_web_threads_text) features=(--features threads,text) ;;
      *) features=(--features threads) ;;
    esac
    RUSTFLAGS="$threads_rustflags" \
      nightly_cargo build -p kiln-web --lib "${features[@]}" --target wasm32-unknown-unknown \
      -Z build-std=panic_abort,std -Z build-std-features=optimize_for_size \
      --target-dir "$threads_target" "${cargo_args[@]}"
    bindgen "$name" "$threads_target/wasm32-unknown-unknown/$profile/kiln_web.wasm"
    # -Os, not -Oz: -Oz's module came out larger (gzipped) than -O2's (1.8 KiB at first, 0.4
    # at stop 49), and -Os --converge smaller than either (threaded CPU-only module: 250.4 KB
    # with -O2, 249.8 with -Os --converge; issue 18, bytes).
    optimise_later "npm/dist/${name}_bg.wasm" -Os --converge --enable-threads
  done
fi

if [ -z "${KILN_WEB_DEV:-}${KILN_WEB_QUICK:-}" ]; then
  for job in "${optimising[@]}"; do wait "$job"; done
  # The glue without its JSDoc and whitespace (scripts/lib/minify-glue.mjs): the CPU page's
  # 12.1 KiB gzipped -> 6.0 (issue 18, bytes).
  node scripts/lib/minify-glue.mjs npm/dist/*.js
  node npm/check-size.mjs
fi

step "npm pack"
rm -f npm/kiln-ml-*.tgz
# Packed from a copy of the package's files (package.json's "files", as npm lists them) in which
# release builds minify the entry files index.js, thread.js and program.js
# (scripts/lib/minify-glue.mjs --entry: index.js 4.1 -> 1.8 KiB gzipped, issue 18, bytes); npm/
# keeps them readable.
pack="${CARGO_TARGET_DIR:-$ROOT/target}/npm-pack"
rm -rf "$pack"
(cd npm && npm pack --dry-run --json --silent) \
  | node -e 'for (const f of JSON.parse(require("fs").readFileSync(0, "utf8"))[0].files) console.log(f.path)' \
  | while read -r file; do install -D -m 644 "npm/$file" "$pack/$file"; done
[ -n "${KILN_WEB_DEV:-}${KILN_WEB_QUICK:-}" ] || node scripts/lib/minify-glue.mjs --entry "$pack/index.js" "$pack/thread.js" "$pack/program.js"
(cd "$pack" && npm pack --silent --pack-destination "$ROOT/npm" >/dev/null)
tarball=$(ls "$ROOT"/npm/kiln-ml-*.tgz)
echo "$tarball"

step "page: demos/mnist -> www/"
mkdir -p www/models www/vendor
cp demos/mnist/index.html demos/mnist/app.js demos/mnist/digit.js demos/mnist/style.css www/
rm -rf www/vendor/kiln-ml
mkdir -p www/vendor/kiln-ml
tar -xzf "$tarball" -C www/vendor/kiln-ml --strip-components=1
# www/ is a build output (ignored by git); it serves the committed model (scripts/demo.sh puts
# the model it trains there afterwards).
cp demos/mnist/models/mnist.safetensors demos/mnist/models/mnist-train.jsonl www/models/

step "page: demos/text -> www/text/"
mkdir -p www/text/models
cp demos/text/index.html demos/text/app.js demos/text/text.css www/text/
cp demos/text/models/shakespeare.safetensors demos/text/models/shakespeare-curve.json www/text/models/
echo "www/ is ready: serve it with 'kiln serve www'"
