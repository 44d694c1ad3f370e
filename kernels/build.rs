//! Embeds the WGSL kernels without their comments and indentation: they are documented in
//! `wgsl/`, and every byte of them is also a byte of the web package. Line breaks are kept so
//! that naga's messages point at the right lines of the files.

use std::{env, fs, path::Path};

fn main() {
    let out = env::var("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    println!("cargo:rerun-if-changed=wgsl");
    let entries = fs::read_dir("wgsl").expect("kernels/wgsl is readable");
    for entry in entries {
        let path = entry.expect("kernels/wgsl lists").path();
        if path.extension().is_none_or(|e| e != "wgsl") {
            continue;
        }
        println!("cargo:rerun-if-changed={}", path.display());
        let text = fs::read_to_string(&path).expect("a kernel file is UTF-8 text");
        let name = path.file_name().expect("a file has a name");
        fs::write(Path::new(&out).join(name), strip(&text)).expect("OUT_DIR is writable");
    }
}

/// Each line without its `//` comment and surrounding whitespace (WGSL has no string literals,
/// so `//` always starts a comment).
fn strip(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or("").trim())
        .collect::<Vec<_>>()
        .join("\n")
}
