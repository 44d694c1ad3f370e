# Shared install helpers for the scripts: each installs only what is missing.

ensure_rust_targets() {
  rustup component add clippy rustfmt >/dev/null 2>&1 || true
  local installed
  installed=$(rustup target list --installed)
  for t in wasm32-unknown-unknown thumbv7em-none-eabihf; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t"
  done
}

# ensure_apt PKG... : installs Debian packages that are not installed yet (needs root).
ensure_apt() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}

# ensure_cargo_bin BIN VERSION CRATE [ARGS...]: installs CRATE when BIN is absent or not at VERSION.
ensure_cargo_bin() {
  local bin=$1 version=$2 crate=$3; shift 3
  if command -v "$bin" >/dev/null 2>&1 && "$bin" --version 2>/dev/null | grep -q "$version"; then return 0; fi
  cargo install "$crate" --version "$version" "$@"
}
