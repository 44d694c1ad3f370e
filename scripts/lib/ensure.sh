# Shared install helpers for the scripts: each installs only what is missing, into places the
# project owns, so that a fresh clone installs from nothing exactly what CI installs.
#
# Tools built by `cargo install` go to $KILN_TOOLS (default target/tools), never to ~/.cargo:
# a tool left on the machine by someone else can then never hide a broken install, and CI
# (scripts/test.sh with KILN_FRESH_INSTALLS=1) points KILN_TOOLS at an empty folder.
# Set KILN_TOOLS=~/.cargo to use (and fill) the usual cargo bin folder instead.

ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
KILN_TOOLS=${KILN_TOOLS:-$ROOT/target/tools}
export KILN_TOOLS
# npm's binaryen (wasm-opt) and playwright-core first; then the tools folder.
export PATH="$ROOT/tests/web/node_modules/.bin:$KILN_TOOLS/bin:$PATH"

# The version wasm-bindgen is pinned to with `=` in the workspace Cargo.toml; the CLI must match it.
wasm_bindgen_version() {
  local v
  v=$(sed -n 's/^wasm-bindgen = "=\([0-9.]*\)".*/\1/p' "$ROOT/Cargo.toml")
  [ -n "$v" ] || { echo "no wasm-bindgen = \"=x.y.z\" pin in $ROOT/Cargo.toml" >&2; return 1; }
  echo "$v"
}

ensure_rust_targets() {
  rustup component add clippy rustfmt >/dev/null 2>&1 || true
  local installed
  installed=$(rustup target list --installed)
  for t in wasm32-unknown-unknown thumbv7em-none-eabihf; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t"
  done
}

# The nightly the threaded wasm build (scripts/build-web.sh) is pinned to: wasm atomics need the
# standard library rebuilt with them (`-Z build-std`), which only nightly cargo does. Installed
# with rust-src (build-std's input) and the wasm32 target into KILN_RUSTUP_HOME when that is set
# (scripts/test.sh with KILN_FRESH_INSTALLS=1: an empty folder), else rustup's usual home.
KILN_NIGHTLY=nightly-2026-10-01

# nightly_cargo ARGS... : cargo of the pinned nightly (from KILN_RUSTUP_HOME when set).
nightly_cargo() {
  env ${KILN_RUSTUP_HOME:+RUSTUP_HOME="$KILN_RUSTUP_HOME"} cargo "+$KILN_NIGHTLY" "$@"
}

ensure_nightly() {
  local home=${KILN_RUSTUP_HOME:-${RUSTUP_HOME:-$HOME/.rustup}}
  if RUSTUP_HOME=$home rustup component list --installed --toolchain "$KILN_NIGHTLY" 2>/dev/null \
    | grep -qx 'rust-src' \
    && RUSTUP_HOME=$home rustup target list --installed --toolchain "$KILN_NIGHTLY" 2>/dev/null \
    | grep -qx 'wasm32-unknown-unknown'; then
    return 0
  fi
  echo "installing $KILN_NIGHTLY with rust-src and wasm32-unknown-unknown into $home"
  RUSTUP_HOME=$home rustup toolchain install "$KILN_NIGHTLY" --profile minimal --no-self-update \
    --component rust-src --target wasm32-unknown-unknown
}

# ensure_apt [--no-install-recommends] PKG... : installs Debian packages that are not installed
# yet (needs root or sudo); leading options go to apt-get install.
ensure_apt() {
  local opts=() missing=()
  while [[ ${1:-} == -* ]]; do opts+=("$1"); shift; done
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${opts[@]}" "${missing[@]}"
}

# check_apt_from_nothing [--no-install-recommends] PKG... : proves that PKG... and everything
# they depend on install on a machine that has none of them (apt resolves against an empty
# package list, simulating only); leading options go to apt-get install, as for ensure_apt.
check_apt_from_nothing() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  local plan
  plan=$(apt-get install --simulate -o Dir::State::status=/dev/null "$@" 2>&1) || {
    echo "$plan" | tail -20 >&2
    echo "apt cannot install $* on a machine without them" >&2
    return 1
  }
  echo "apt: $* resolve from nothing ($(grep -c '^Inst ' <<<"$plan") packages)"
}

# ensure_wasm_bindgen: wasm-bindgen and its test runner, at the pinned version, in $KILN_TOOLS.
# Without --locked: the CLI's own lock file names versions crates.io no longer serves (it failed
# on webpki-roots). Without default features: they only add HTTPS (rustls, ring) to the test
# runner, which talks to a local chromedriver over plain HTTP; ring was the slowest crate to build.
ensure_wasm_bindgen() {
  local version
  version=$(wasm_bindgen_version) || return 1
  if [ -x "$KILN_TOOLS/bin/wasm-bindgen" ] && [ -x "$KILN_TOOLS/bin/wasm-bindgen-test-runner" ] \
    && "$KILN_TOOLS/bin/wasm-bindgen" --version 2>/dev/null | grep -qw "$version"; then
    return 0
  fi
  echo "installing wasm-bindgen-cli $version into $KILN_TOOLS (about 2 minutes on 2 cores)"
  cargo install wasm-bindgen-cli --version "=$version" --root "$KILN_TOOLS" --force \
    --no-default-features --bin wasm-bindgen --bin wasm-bindgen-test-runner
}

# ensure_npm_tools: tests/web's npm packages (binaryen's wasm-opt, playwright-core, Vite) exactly
# as package-lock.json pins them; reinstalled when the lock file changed.
ensure_npm_tools() {
  local dir=$ROOT/tests/web
  # npm ci empties node_modules first: through a link it would empty another clone's install.
  if [ -L "$dir/node_modules" ]; then
    echo "ensure_npm_tools: $dir/node_modules is a symbolic link (to $(readlink "$dir/node_modules")); npm ci would empty the folder it points to. Replace the link with a folder of its own." >&2
    return 1
  fi
  if [ ! -f "$dir/node_modules/.package-lock.json" ] \
    || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund)
  fi
}
