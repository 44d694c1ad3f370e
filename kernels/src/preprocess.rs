//! A very small WGSL preprocessor: kernels stay readable `.wgsl` files, and one file serves every
//! dtype, op and tile size through defines.
//!
//! Directives (each on its own line, leading whitespace allowed):
//!
//! | directive | meaning |
//! | --- | --- |
//! | `#include "name.wgsl"` | the text of another kernel file (from [`crate::kernels::source`]) |
//! | `#if COND` / `#elif COND` / `#else` / `#endif` | keep or drop lines; nests |
//!
//! A `COND` is terms joined by `||`, each term factors joined by `&&`; a factor is `NAME` (defined
//! and not `0`/`false`), `!NAME`, `NAME == value` or `NAME != value`. In every kept line,
//! `{{NAME}}` is replaced by the define's value; an undefined name is an error, so a kernel never
//! compiles with a hole in it.
//!
//! ```
//! use kiln_kernels::preprocess::{preprocess, Defines};
//! let mut d = Defines::new();
//! d.insert("T".into(), "f32".into());
//! d.insert("OP".into(), "exp".into());
//! let src = "#if OP == exp\nfn f(x: {{T}}) -> {{T}} { return exp(x); }\n#else\nfn f(x: {{T}}) -> {{T}} { return x; }\n#endif\n";
//! assert_eq!(preprocess(src, &d, &|_| None).unwrap(), "fn f(x: f32) -> f32 { return exp(x); }\n");
//! ```

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use kiln_core::{Error, Result};

/// Define names to values, sorted so that equal sets compare and hash equal.
pub type Defines = BTreeMap<String, String>;

/// Expands directives and `{{NAME}}` placeholders in `src`. `include` resolves `#include` names.
pub fn preprocess(
    src: &str,
    defines: &Defines,
    include: &dyn Fn(&str) -> Option<&'static str>,
) -> Result<String> {
    let mut out = String::with_capacity(src.len());
    expand(src, defines, include, &mut out, 0)?;
    Ok(out)
}

/// One open `#if`: whether its current branch is kept, whether any branch was taken, and whether
/// the enclosing block is kept at all.
struct Frame {
    active: bool,
    taken: bool,
    parent: bool,
}

fn expand(
    src: &str,
    defines: &Defines,
    include: &dyn Fn(&str) -> Option<&'static str>,
    out: &mut String,
    depth: usize,
) -> Result<()> {
    let err =
        |line: usize, m: String| Error::invalid("wgsl preprocess", format!("line {line}: {m}"));
    if depth > 8 {
        return Err(err(0, "#include nested more than 8 deep".into()));
    }
    let mut stack: Vec<Frame> = Vec::new();
    let live = |stack: &[Frame]| stack.last().is_none_or(|f| f.active);
    for (n, line) in src.lines().enumerate() {
        let n = n + 1;
        let t = line.trim_start();
        if let Some(cond) = t.strip_prefix("#if ") {
            let parent = live(&stack);
            let v = parent && eval(cond, defines).map_err(|m| err(n, m))?;
            stack.push(Frame {
                active: v,
                taken: v,
                parent,
            });
        } else if let Some(cond) = t.strip_prefix("#elif ") {
            let f = stack
                .last_mut()
                .ok_or_else(|| err(n, "#elif without #if".into()))?;
            let v = f.parent && !f.taken && eval(cond, defines).map_err(|m| err(n, m))?;
            f.active = v;
            f.taken |= v;
        } else if t.starts_with("#else") {
            let f = stack
                .last_mut()
                .ok_or_else(|| err(n, "#else without #if".into()))?;
            f.active = f.parent && !f.taken;
            f.taken = true;
        } else if t.starts_with("#endif") {
            stack
                .pop()
                .ok_or_else(|| err(n, "#endif without #if".into()))?;
        } else if !live(&stack) {
            continue;
        } else if let Some(name) = t.strip_prefix("#include ") {
            let name = name.trim().trim_matches('"');
            let text = include(name).ok_or_else(|| err(n, format!("unknown #include {name:?}")))?;
            expand(text, defines, include, out, depth + 1)?;
        } else {
            substitute(line, defines, out).map_err(|m| err(n, m))?;
            out.push('\n');
        }
    }
    if !stack.is_empty() {
        return Err(err(src.lines().count(), "#if without #endif".into()));
    }
    Ok(())
}

fn eval(cond: &str, defines: &Defines) -> core::result::Result<bool, String> {
    let factor = |f: &str| -> core::result::Result<bool, String> {
        let f = f.trim();
        let value = |name: &str| defines.get(name.trim()).map(String::as_str);
        if let Some((a, b)) = f.split_once("==") {
            Ok(value(a) == Some(b.trim()))
        } else if let Some((a, b)) = f.split_once("!=") {
            Ok(value(a) != Some(b.trim()))
        } else if let Some(name) = f.strip_prefix('!') {
            Ok(!truthy(value(name)))
        } else if f.is_empty() {
            Err("empty condition".to_string())
        } else {
            Ok(truthy(value(f)))
        }
    };
    for term in cond.split("||") {
        let mut all = true;
        for f in term.split("&&") {
            all &= factor(f)?;
        }
        if all {
            return Ok(true);
        }
    }
    Ok(false)
}

fn truthy(v: Option<&str>) -> bool {
    !matches!(v, None | Some("0") | Some("false"))
}

fn substitute(line: &str, defines: &Defines, out: &mut String) -> core::result::Result<(), String> {
    let mut rest = line;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or("unclosed {{")?;
        let name = after[..end].trim();
        let v = defines
            .get(name)
            .ok_or_else(|| format!("{{{{{name}}}}} is not defined"))?;
        out.push_str(v);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defs(kv: &[(&str, &str)]) -> Defines {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn nested_conditions_and_elif() {
        let src = "a\n#if X\n#if Y == 2\nxy2\n#elif Y == 3 || Z\nxy3\n#else\nxother\n#endif\n#else\nnox\n#endif\nb {{Y}}\n";
        let run = |kv: &[(&str, &str)]| preprocess(src, &defs(kv), &|_| None).unwrap();
        assert_eq!(run(&[("X", "1"), ("Y", "2")]), "a\nxy2\nb 2\n");
        assert_eq!(run(&[("X", "1"), ("Y", "3")]), "a\nxy3\nb 3\n");
        assert_eq!(run(&[("X", "1"), ("Y", "4"), ("Z", "1")]), "a\nxy3\nb 4\n");
        assert_eq!(run(&[("X", "1"), ("Y", "4")]), "a\nxother\nb 4\n");
        assert_eq!(run(&[("X", "0"), ("Y", "2")]), "a\nnox\nb 2\n");
    }

    #[test]
    fn and_not_and_include() {
        let d = defs(&[("A", "1"), ("B", "x")]);
        let inc = |n: &str| (n == "inc.wgsl").then_some("inc {{B}}\n");
        let out = preprocess(
            "#if A && !C && B != y\n#include \"inc.wgsl\"\n#endif\n",
            &d,
            &inc,
        )
        .unwrap();
        assert_eq!(out, "inc x\n");
    }

    #[test]
    fn errors_name_the_problem() {
        let d = defs(&[]);
        let e = preprocess("x {{MISSING}}\n", &d, &|_| None).unwrap_err();
        assert!(e.to_string().contains("MISSING"), "{e}");
        assert!(preprocess("#if A\n", &d, &|_| None).is_err());
        assert!(preprocess("#endif\n", &d, &|_| None).is_err());
        assert!(preprocess("#include \"nope\"\n", &d, &|_| None).is_err());
    }
}
