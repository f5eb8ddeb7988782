//! libibverbs, opened at run time with `dlopen` (the plugin never links
//! against it, so it loads and declines cleanly where the library is
//! missing): the table of the exported functions the plugin calls.
//!
//! A library is opened once per path for the life of the process and never
//! closed, as the host never unloads plugins: device contexts and the
//! provider libraries libibverbs loads hold code of it.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use libloading::Library;

use super::types::*;

/// Why libibverbs could not be used.
#[derive(Debug, Clone)]
pub enum LoadError {
    /// `dlopen` found no such library.
    NotFound {
        /// The path or name given.
        path: String,
        /// What the dynamic loader said.
        detail: String,
    },
    /// The file exists but the loader refused it.
    Unloadable {
        /// The path or name given.
        path: String,
        /// What the dynamic loader said.
        detail: String,
    },
    /// A function the plugin calls is not exported.
    MissingSymbol {
        /// The function.
        name: &'static str,
        /// What the dynamic loader said.
        detail: String,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound { path, detail } => write!(f, "{path} not found: {detail}"),
            Self::Unloadable { path, detail } => write!(f, "{path} cannot be loaded: {detail}"),
            Self::MissingSymbol { name, detail } => {
                write!(f, "libibverbs has no {name}: {detail}")
            }
        }
    }
}

impl std::error::Error for LoadError {}

macro_rules! verbs_table {
    ($($name:ident : fn($($arg:ty),*) -> $ret:ty;)+) => {
        /// The exported libibverbs functions the plugin calls, resolved
        /// once. Calling any of them is unsafe: each has the contract of
        /// its C declaration in `<infiniband/verbs.h>`.
        #[allow(missing_docs)]
        pub struct Verbs {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> $ret,)+
            _library: Library,
        }

        impl Verbs {
            fn resolve(library: Library) -> Result<Self, LoadError> {
                $(
                    // SAFETY: the symbol is declared in <infiniband/verbs.h>
                    // with exactly this signature; the pointer is copied
                    // out and stays valid while `_library` is held.
                    let $name = unsafe {
                        *library
                            .get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                            .map_err(|e| LoadError::MissingSymbol {
                                name: stringify!($name),
                                detail: e.to_string(),
                            })?
                    };
                )+
                Ok(Self { $($name,)+ _library: library })
            }
        }
    };
}

verbs_table! {
    ibv_get_device_list: fn(*mut c_int) -> *mut *mut ibv_device;
    ibv_free_device_list: fn(*mut *mut ibv_device) -> ();
    ibv_open_device: fn(*mut ibv_device) -> *mut ibv_context;
    ibv_close_device: fn(*mut ibv_context) -> c_int;
    ibv_query_device: fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
    ibv_query_port: fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
    ibv_query_gid: fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    ibv_alloc_pd: fn(*mut ibv_context) -> *mut ibv_pd;
    ibv_dealloc_pd: fn(*mut ibv_pd) -> c_int;
    ibv_reg_mr: fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
    ibv_dereg_mr: fn(*mut ibv_mr) -> c_int;
    ibv_create_cq: fn(*mut ibv_context, c_int, *mut c_void, *mut c_void, c_int) -> *mut ibv_cq;
    ibv_destroy_cq: fn(*mut ibv_cq) -> c_int;
    ibv_create_srq: fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq;
    ibv_destroy_srq: fn(*mut ibv_srq) -> c_int;
    ibv_create_qp: fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    ibv_modify_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    ibv_destroy_qp: fn(*mut ibv_qp) -> c_int;
    ibv_create_ah: fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
    ibv_destroy_ah: fn(*mut ibv_ah) -> c_int;
    ibv_wc_status_str: fn(c_int) -> *const c_char;
}

impl fmt::Debug for Verbs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Verbs")
    }
}

impl Verbs {
    /// The library at `path` (a file name is searched as `dlopen` does),
    /// opened on first use and shared after.
    pub fn load(path: &str) -> Result<Arc<Self>, LoadError> {
        static OPENED: Mutex<Vec<(String, Arc<Verbs>)>> = Mutex::new(Vec::new());
        let mut opened = OPENED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, v)) = opened.iter().find(|(p, _)| p == path) {
            return Ok(Arc::clone(v));
        }
        // SAFETY: libibverbs's initialisers only set up its own state
        // (they read its configuration directory on the first device
        // query, not at load).
        let library = unsafe { Library::new(path) }.map_err(|e| {
            let detail = e.to_string();
            let missing = if path.contains('/') {
                !Path::new(path).exists()
            } else {
                detail.contains("No such file")
            };
            let path = path.to_owned();
            if missing {
                LoadError::NotFound { path, detail }
            } else {
                LoadError::Unloadable { path, detail }
            }
        })?;
        let verbs = Arc::new(Self::resolve(library)?);
        opened.push((path.to_owned(), Arc::clone(&verbs)));
        Ok(verbs)
    }

    /// The library's name of a work-completion status.
    pub fn status_str(&self, status: u32) -> String {
        let Ok(code) = c_int::try_from(status) else {
            return format!("status {status}");
        };
        // SAFETY: ibv_wc_status_str accepts any value and returns a
        // static string (or "unknown").
        let p = unsafe { (self.ibv_wc_status_str)(code) };
        if p.is_null() {
            return format!("status {status}");
        }
        // SAFETY: a non-null answer is a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}
