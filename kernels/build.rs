//! Copies the WGSL kernels into OUT_DIR without their `//` comments and blank lines: the text is
//! embedded in every build, the web package included (about 5 KiB of its gzipped size), and the
//! comments are for readers of `kernels/wgsl/`. Tests compile exactly what ships.

use std::path::PathBuf;
use std::{env, fs};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("wgsl");
    fs::create_dir_all(&out).expect("creating OUT_DIR/wgsl");
    println!("cargo:rerun-if-changed=wgsl");
    for entry in fs::read_dir("wgsl").expect("reading kernels/wgsl") {
        let path = entry.expect("listing kernels/wgsl").path();
        let text = fs::read_to_string(&path).expect("reading a kernel file");
        // WGSL has no string literals, so `//` always starts a comment.
        let mut code = String::with_capacity(text.len());
        for line in text.lines() {
            let line = line.split("//").next().unwrap_or("").trim_end();
            if !line.is_empty() {
                code.push_str(line);
                code.push('\n');
            }
        }
        let name = path.file_name().expect("a file name");
        fs::write(out.join(name), code).expect("writing a stripped kernel file");
    }
}
