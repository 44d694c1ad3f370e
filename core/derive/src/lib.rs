//! `#[derive(Module)]` for kiln: implements `kiln_core::nn::Module` for a struct whose fields are
//! modules or parameters.
//!
//! Each field's name becomes one segment of the dotted parameter names (`conv1.weight`); tuple
//! fields use their index. Field attributes:
//! - `#[module(skip)]`: not a module (hyper-parameters, counters);
//! - `#[module(training)]`: a `bool` set by `set_training` (train/eval mode flag);
//! - `#[module(counter)]`: an `AtomicUsize` of random draws made so far (dropout's mask
//!   counter), visited by `visit_counters` so checkpoints can save and restore it.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, Index, parse_macro_input};

/// Derives `kiln_core::nn::Module` (see the crate docs for the field attributes).
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

enum Role {
    Module,
    Skip,
    Training,
    Counter,
}

fn role(field: &syn::Field) -> syn::Result<Role> {
    let mut role = Role::Module;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                role = Role::Skip;
                Ok(())
            } else if meta.path.is_ident("training") {
                role = Role::Training;
                Ok(())
            } else if meta.path.is_ident("counter") {
                role = Role::Counter;
                Ok(())
            } else {
                Err(meta.error("expected `skip`, `training` or `counter`"))
            }
        })?;
    }
    Ok(role)
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Module)] supports structs only",
        ));
    };
    let (mut visit, mut visit_mut, mut training, mut counters) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let fields: Vec<(Tokens, String, &syn::Field)> = match &data.fields {
        Fields::Named(f) => f
            .named
            .iter()
            .map(|f| {
                let id = f.ident.clone().unwrap_or_else(|| format_ident!("_"));
                let name = id.to_string();
                let name = name.strip_prefix("r#").unwrap_or(&name).to_string();
                (quote!(#id), name, f)
            })
            .collect(),
        Fields::Unnamed(f) => f
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let idx = Index::from(i);
                (quote!(#idx), i.to_string(), f)
            })
            .collect(),
        Fields::Unit => Vec::new(),
    };
    let m = quote!(::kiln_core::nn::Module);
    for (access, name, field) in &fields {
        match role(field)? {
            Role::Skip => {}
            Role::Training => training.push(quote!(self.#access = on;)),
            Role::Counter => counters.push(quote!(v(#name, &self.#access);)),
            Role::Module => {
                visit.push(quote! {
                    #m::visit(&self.#access, &mut |n, p| v(&::kiln_core::nn::join(#name, n), p));
                });
                visit_mut.push(quote! {
                    #m::visit_mut(&mut self.#access, &mut |n, p| v(&::kiln_core::nn::join(#name, n), p));
                });
                training.push(quote!(#m::set_training(&mut self.#access, on);));
                counters.push(quote! {
                    #m::visit_counters(&self.#access, &mut |n, c| v(&::kiln_core::nn::join(#name, n), c));
                });
            }
        }
    }
    let ident = &input.ident;
    let (impl_g, ty_g, where_g) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_g #m for #ident #ty_g #where_g {
            #[allow(unused_variables)]
            fn visit(&self, v: &mut dyn FnMut(&str, &::kiln_core::nn::Param)) { #(#visit)* }
            #[allow(unused_variables)]
            fn visit_mut(&mut self, v: &mut dyn FnMut(&str, &mut ::kiln_core::nn::Param)) { #(#visit_mut)* }
            #[allow(unused_variables)]
            fn set_training(&mut self, on: bool) { #(#training)* }
            #[allow(unused_variables)]
            fn visit_counters(&self, v: &mut dyn FnMut(&str, &::core::sync::atomic::AtomicUsize)) { #(#counters)* }
        }
    })
}
