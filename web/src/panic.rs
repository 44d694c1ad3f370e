//! A panic is a kiln bug, but it must still reach JavaScript as a readable `Error` rather than
//! wasm's bare `RuntimeError: unreachable`. The hook throws a JS exception carrying the panic
//! message, which unwinds out of wasm to the caller before Rust's abort runs.

/// Installs the hook (idempotent).
pub fn install_hook() {
    #[cfg(target_arch = "wasm32")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                let msg = format!(
                    "kiln: internal error (a bug; please report it, and reload the page): {info}"
                );
                web_sys::console::error_1(&msg.as_str().into());
                // A worker's panic would leave the page's thread waiting for its task.
                #[cfg(feature = "threads")]
                kiln_core::cpu::panicked();
                wasm_bindgen::throw_str(&msg);
            }));
        });
    }
}
