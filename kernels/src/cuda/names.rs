//! Unique, legal C++ identifiers for WGSL names.

use std::collections::HashSet;

/// Words a WGSL identifier may spell but C++, CUDA, HIP or the prelude reserve.
const RESERVED: &[&str] = &[
    // C++
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "char8_t",
    "char16_t",
    "char32_t",
    "class",
    "compl",
    "concept",
    "const",
    "consteval",
    "constexpr",
    "constinit",
    "const_cast",
    "continue",
    "co_await",
    "co_return",
    "co_yield",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "requires",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    "xor",
    "xor_eq",
    "main",
    // CUDA / HIP built-in variables, types and common library names
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "dim3",
    "uint",
    "ushort",
    "ulong",
    "half",
    "float2",
    "float3",
    "float4",
    "int2",
    "int3",
    "int4",
    "uint2",
    "uint3",
    "uint4",
    "double2",
    "abs",
    "min",
    "max",
    "exp",
    "exp2",
    "log",
    "log2",
    "pow",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "tanh",
    "floor",
    "ceil",
    "round",
    "rint",
    "trunc",
    "fma",
    "fabs",
    "fmin",
    "fmax",
    "fmod",
    "signbit",
    "isnan",
    "isinf",
    "isfinite",
    "printf",
    "malloc",
    "free",
    "memcpy",
    "memset",
    "assert",
    "atomicAdd",
    "atomicSub",
    "atomicExch",
    "atomicMin",
    "atomicMax",
    "atomicAnd",
    "atomicOr",
    "atomicXor",
    "atomicCAS",
    "std",
    "size_t",
    "NULL",
    "INFINITY",
    "NAN",
    // the prelude
    "kvec",
];

/// Hands out identifiers, each unique within its namer.
#[derive(Clone, Debug, Default)]
pub struct Names {
    used: HashSet<String>,
}

impl Names {
    /// Claims an exact name (an entry point's symbol); `false` when it is not available.
    pub fn claim_exact(&mut self, name: &str) -> bool {
        is_plain(name) && !is_reserved(name) && self.used.insert(name.to_string())
    }

    /// A fresh identifier resembling `base` (`fallback` when there is none).
    pub fn fresh(&mut self, base: Option<&str>, fallback: &str) -> String {
        let mut stem: String = base
            .unwrap_or(fallback)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if stem.is_empty() || stem.starts_with(|c: char| c.is_ascii_digit()) {
            stem.insert(0, 'v');
        }
        // `__` anywhere is reserved to the implementation in C++.
        while stem.contains("__") {
            stem = stem.replace("__", "_");
        }
        // The prelude's prefixes stay the prelude's.
        if stem.starts_with('_') || stem.starts_with("k_") || stem.starts_with("karr_") {
            stem.insert(0, 'v');
        }
        // Collisions take a numeric suffix, `x_1`, but never one that would make a reserved
        // prefix (`k` + `_1`) or a double underscore (`a_` + `_1`): those get `k1`, `a_1`.
        // Then no suffixed name is reserved by prefix, so the search ends.
        let sep = if stem.ends_with('_') || is_reserved(&format!("{stem}_")) {
            ""
        } else {
            "_"
        };
        let mut name = stem.clone();
        let mut n = 1u64;
        while is_reserved(&name) || self.used.contains(&name) {
            name = format!("{stem}{sep}{n}");
            n += 1;
        }
        self.used.insert(name.clone());
        name
    }
}

fn is_plain(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && !name.contains("__")
}

fn is_reserved(name: &str) -> bool {
    RESERVED.contains(&name) || name.starts_with("k_") || name.starts_with("karr_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_legal_and_unique() {
        let mut n = Names::default();
        assert_eq!(n.fresh(Some("x"), "v"), "x");
        assert_eq!(n.fresh(Some("x"), "v"), "x_1");
        assert_eq!(n.fresh(Some("float"), "v"), "float_1");
        assert_eq!(n.fresh(Some("k_exp"), "v"), "vk_exp");
        assert_eq!(n.fresh(Some("_a__b"), "v"), "v_a_b");
        assert_eq!(n.fresh(None, "e"), "e");
        assert_eq!(n.fresh(Some("é"), "v"), "v_");
        // `k` and `karr` are fine names, but their suffixed forms must avoid the prelude's
        // `k_` / `karr_` prefixes (a loop over `k_1`, `k_2`, ... would never end).
        assert_eq!(n.fresh(Some("k"), "v"), "k");
        assert_eq!(n.fresh(Some("k"), "v"), "k1");
        assert_eq!(n.fresh(Some("k"), "v"), "k2");
        assert_eq!(n.fresh(Some("karr"), "v"), "karr");
        assert_eq!(n.fresh(Some("karr"), "v"), "karr1");
        assert_eq!(n.fresh(Some("a_"), "v"), "a_");
        assert_eq!(n.fresh(Some("a_"), "v"), "a_1");
        assert!(n.claim_exact("main_kernel"));
        assert!(!n.claim_exact("main_kernel"));
        assert!(!n.claim_exact("float"));
    }
}
