//! Sets `cfg(threaded)` where the CPU backend's loops run on threads: natively with `std`
//! (rayon), and in the wasm32 build with `+atomics` (the page's own pool, `src/cpu/par.rs`).
//! One name for what was a three-part `cfg` at each of its uses.

use std::env;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(threaded)");
    println!("cargo::rerun-if-changed=build.rs");
    let std = env::var_os("CARGO_FEATURE_STD").is_some();
    let wasm = env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "wasm32");
    let atomics = env::var("CARGO_CFG_TARGET_FEATURE")
        .is_ok_and(|f| f.split(',').any(|feature| feature == "atomics"));
    if std && (!wasm || atomics) {
        println!("cargo::rustc-cfg=threaded");
    }
}
