//! The ROCm libraries, opened at run time: the HIP runtime (`libamdhip64.so`), hipRTC
//! (`libhiprtc.so`, or inside `libamdhip64.so` before ROCm 6) and rocBLAS (`librocblas.so`).
//! Only the calls kiln makes are declared, with the signatures of ROCm's C headers; a library or
//! symbol that is missing is an error naming it.

use kiln_core::{Error, Result};
use libloading::Library;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::Arc;

/// Where to look for a library beyond the loader's path: ROCm's default install.
const ROCM_LIB: &str = "/opt/rocm/lib";

/// Opens the first of `names` that loads, from the loader's path or [`ROCM_LIB`].
pub(crate) fn open(names: &[&str]) -> std::result::Result<(Arc<Library>, String), String> {
    let mut last = String::new();
    for name in names {
        for path in [name.to_string(), format!("{ROCM_LIB}/{name}")] {
            // SAFETY: ROCm's libraries run no unsound initialisers.
            match unsafe { Library::new(&path) } {
                Ok(lib) => return Ok((Arc::new(lib), path)),
                Err(e) => last = e.to_string(),
            }
        }
    }
    Err(last)
}

/// Declares a table of C functions loaded from one library.
macro_rules! api {
    ($(#[$doc:meta])* $name:ident { $($field:ident = $sym:literal: fn($($arg:ty),*) $(-> $ret:ty)?;)* }) => {
        $(#[$doc])*
        pub(crate) struct $name {
            $(pub(crate) $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
            /// The library the functions live in, open while they may be called.
            _lib: Arc<Library>,
        }
        impl $name {
            /// Every function from `lib` (called `file` in errors).
            pub(crate) fn load(lib: Arc<Library>, file: &str) -> Result<Self> {
                // SAFETY: the types are those of ROCm's headers for these symbols.
                unsafe {
                    Ok($name {
                        $($field: *lib
                            .get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(concat!($sym, "\0").as_bytes())
                            .map_err(|e| missing(file, $sym, e))?,)*
                        _lib: lib,
                    })
                }
            }
        }
    };
}

fn missing(file: &str, symbol: &str, e: libloading::Error) -> Error {
    Error::device(
        "rocm",
        format!("{file} has no {symbol} (a ROCm too old or broken?): {e}"),
    )
}

/// `hipError_t`, `hiprtcResult` and `rocblas_status`: 0 is success.
pub(crate) type Status = c_int;
/// `hipDeviceptr_t`, `hipModule_t`, `hipFunction_t`, `hipStream_t`, `hiprtcProgram` and
/// `rocblas_handle` are all opaque pointers.
pub(crate) type Handle = *mut c_void;

api! {
    /// The HIP runtime calls the backend makes.
    Hip {
        init = "hipInit": fn(u32) -> Status;
        get_device_count = "hipGetDeviceCount": fn(*mut c_int) -> Status;
        set_device = "hipSetDevice": fn(c_int) -> Status;
        device_get = "hipDeviceGet": fn(*mut c_int, c_int) -> Status;
        device_get_name = "hipDeviceGetName": fn(*mut c_char, c_int, c_int) -> Status;
        malloc = "hipMalloc": fn(*mut Handle, usize) -> Status;
        free = "hipFree": fn(Handle) -> Status;
        memcpy_htod = "hipMemcpyHtoD": fn(Handle, *const c_void, usize) -> Status;
        memcpy_dtoh = "hipMemcpyDtoH": fn(*mut c_void, Handle, usize) -> Status;
        device_synchronize = "hipDeviceSynchronize": fn() -> Status;
        module_load_data = "hipModuleLoadData": fn(*mut Handle, *const c_void) -> Status;
        module_get_function = "hipModuleGetFunction": fn(*mut Handle, Handle, *const c_char) -> Status;
        module_unload = "hipModuleUnload": fn(Handle) -> Status;
        module_launch_kernel = "hipModuleLaunchKernel": fn(
            Handle, u32, u32, u32, u32, u32, u32, u32, Handle, *mut *mut c_void, *mut *mut c_void
        ) -> Status;
        get_error_string = "hipGetErrorString": fn(Status) -> *const c_char;
    }
}

api! {
    /// hipRTC: HIP C++ to an AMD GPU code object, at run time.
    Rtc {
        create_program = "hiprtcCreateProgram": fn(
            *mut Handle, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char
        ) -> Status;
        compile_program = "hiprtcCompileProgram": fn(Handle, c_int, *const *const c_char) -> Status;
        get_program_log_size = "hiprtcGetProgramLogSize": fn(Handle, *mut usize) -> Status;
        get_program_log = "hiprtcGetProgramLog": fn(Handle, *mut c_char) -> Status;
        get_code_size = "hiprtcGetCodeSize": fn(Handle, *mut usize) -> Status;
        get_code = "hiprtcGetCode": fn(Handle, *mut c_char) -> Status;
        destroy_program = "hiprtcDestroyProgram": fn(*mut Handle) -> Status;
        get_error_string = "hiprtcGetErrorString": fn(Status) -> *const c_char;
    }
}

api! {
    /// The rocBLAS calls of f32 matmul.
    Rocblas {
        create_handle = "rocblas_create_handle": fn(*mut Handle) -> Status;
        destroy_handle = "rocblas_destroy_handle": fn(Handle) -> Status;
        sgemm_strided_batched = "rocblas_sgemm_strided_batched": fn(
            Handle, c_int, c_int, c_int, c_int, c_int, *const f32, *const f32, c_int, i64,
            *const f32, c_int, i64, *const f32, *mut f32, c_int, i64, c_int
        ) -> Status;
    }
}

const HIP_LIBS: &[&str] = &["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"];

impl Hip {
    /// The HIP runtime, or an error saying that ROCm is missing.
    pub(crate) fn open() -> Result<Hip> {
        Hip::open_from(HIP_LIBS)
    }

    /// The HIP runtime from the first of `names` that loads.
    pub(crate) fn open_from(names: &[&str]) -> Result<Hip> {
        let (lib, file) = open(names).map_err(|e| {
            Error::device(
                "rocm",
                format!(
                    "could not load libamdhip64.so (is ROCm installed? its lib folder must be on \
                     LD_LIBRARY_PATH or in {ROCM_LIB}): {e}"
                ),
            )
        })?;
        Hip::load(lib, &file)
    }

    /// `Ok` for `hipSuccess`, else an error naming `what` and HIP's description of the status.
    pub(crate) fn check(&self, status: Status, what: &str) -> Result<()> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: hipGetErrorString returns a static string for any status.
        let text = unsafe { describe((self.get_error_string)(status)) };
        Err(Error::device("rocm", format!("{what}: {text} ({status})")))
    }
}

/// The text of a C string from ROCm, or a placeholder for a null pointer.
///
/// # Safety
/// `p` is null or a NUL-terminated string that lives long enough.
unsafe fn describe(p: *const c_char) -> String {
    if p.is_null() {
        return "unknown error".into();
    }
    // SAFETY: as the caller promises.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl Rtc {
    /// hipRTC: `libhiprtc.so` (ROCm 6 and later) or the HIP runtime itself (ROCm 5).
    pub(crate) fn open() -> Result<Rtc> {
        match open(&["libhiprtc.so", "libhiprtc.so.6", "libhiprtc.so.5"]) {
            Ok((lib, file)) => Rtc::load(lib, &file),
            Err(own) => {
                let (lib, file) = open(HIP_LIBS).map_err(|e| {
                    Error::device(
                        "rocm",
                        format!("hipRTC not found: could not load libhiprtc.so ({own}) nor libamdhip64.so ({e})"),
                    )
                })?;
                Rtc::load(lib, &file).map_err(|e| {
                    Error::device(
                        "rocm",
                        format!("hipRTC not found: could not load libhiprtc.so ({own}), and {e}"),
                    )
                })
            }
        }
    }

    fn check(&self, status: Status, what: &str, label: &str) -> Result<()> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: hiprtcGetErrorString returns a static string for any status.
        let text = unsafe { describe((self.get_error_string)(status)) };
        Err(Error::device(
            "rocm",
            format!("{label}: {what}: {text} ({status})"),
        ))
    }

    /// Compiles HIP C++ `source` to a code object; `arch` (`gfx90a`) picks the GPU, `None` the
    /// current device's. The compiler's log is in the error when it rejects the source.
    pub(crate) fn compile(&self, source: &str, label: &str, arch: Option<&str>) -> Result<Vec<u8>> {
        let nul = |s: &str| {
            CString::new(s)
                .map_err(|_| Error::invalid("rocm", format!("{label}: a NUL byte in the source")))
        };
        let (src, name) = (nul(source)?, nul("kernel.hip")?);
        let options: Vec<CString> = ["-O3".to_string(), "-std=c++17".to_string()]
            .into_iter()
            .chain(arch.map(|a| format!("--offload-arch={a}")))
            .map(|o| nul(&o))
            .collect::<Result<_>>()?;
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Handle = std::ptr::null_mut();
        // SAFETY: every string is NUL-terminated and outlives the program; no headers are passed.
        unsafe {
            self.check(
                (self.create_program)(
                    &mut prog,
                    src.as_ptr(),
                    name.as_ptr(),
                    0,
                    std::ptr::null(),
                    std::ptr::null(),
                ),
                "hiprtcCreateProgram",
                label,
            )?;
        }
        let program = Program { rtc: self, prog };
        // SAFETY: `program` is live; the option pointers outlive the call; the buffers have the
        // sizes hipRTC reported.
        unsafe {
            let status = (self.compile_program)(
                program.prog,
                option_ptrs.len() as c_int,
                option_ptrs.as_ptr(),
            );
            if status != 0 {
                let mut size = 0usize;
                let mut log = String::new();
                if (self.get_program_log_size)(program.prog, &mut size) == 0 && size > 0 {
                    let mut buf = vec![0u8; size];
                    if (self.get_program_log)(program.prog, buf.as_mut_ptr().cast()) == 0 {
                        log = String::from_utf8_lossy(&buf)
                            .trim_end_matches('\0')
                            .to_string();
                    }
                }
                let err = self
                    .check(status, "hipRTC rejected the kernel", label)
                    .unwrap_err();
                return Err(Error::device("rocm", format!("{}\n{log}", err.message())));
            }
            let mut size = 0usize;
            self.check(
                (self.get_code_size)(program.prog, &mut size),
                "hiprtcGetCodeSize",
                label,
            )?;
            let mut code = vec![0u8; size];
            self.check(
                (self.get_code)(program.prog, code.as_mut_ptr().cast()),
                "hiprtcGetCode",
                label,
            )?;
            Ok(code)
        }
    }
}

/// A hipRTC program, destroyed when dropped.
struct Program<'a> {
    rtc: &'a Rtc,
    prog: Handle,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: created by hiprtcCreateProgram and destroyed only here.
        unsafe {
            (self.rtc.destroy_program)(&mut self.prog);
        }
    }
}

impl Rocblas {
    /// rocBLAS, or `None` when it is not installed (matmul then runs the translated GEMM).
    pub(crate) fn open() -> Option<Result<Rocblas>> {
        let (lib, file) = open(&["librocblas.so", "librocblas.so.4", "librocblas.so.3"]).ok()?;
        Some(Rocblas::load(lib, &file))
    }
}
