//! numpy's own arrays in zcio's memory: `zcio.numpy_memory()`, a NumPy memory handler
//! (NEP 49, numpy 1.22 and later).
//!
//! Inside `with zcio.numpy_memory():` numpy asks zcio for the data of every array it makes;
//! an array of `min_bytes` or more (1 MiB unless said) gets a loan of its own, a memory file
//! registered in [`ALLOCATED`](super::ALLOCATED) as `zcio.alloc`'s memory is, so that a send
//! of it (or of any part of it) ships the file without a copy and keeps the sender's pages
//! copy-on-write. Smaller arrays go to the handler that was current when the block began:
//! each handler chains to that one through its allocator functions and context.
//!
//! numpy keeps the handler in each array and frees the array's data through it, whenever that
//! is: the handlers (a capsule and its allocator) live as long as the process, one per
//! threshold and previous handler, made at the first block that needs it. The allocator
//! functions may run without the GIL and on any thread: they touch no Python object, only
//! [`LOANS`] and `ALLOCATED` under their locks, and never unwind into numpy.

use super::{LOAN_FROM, register_allocated};
use pyo3::exceptions::{PyImportError, PyModuleNotFoundError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};
use pyo3::{PyErr, ffi};
use std::collections::BTreeMap;
use std::ffi::{CStr, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use zcio::genie::memnet::MAX_MESSAGE;

/// The name numpy requires of a handler's capsule.
const MEM_HANDLER: &CStr = c"mem_handler";

/// numpy's `PyDataMemAllocator` (version 1 of `PyDataMem_Handler`).
#[repr(C)]
#[derive(Clone, Copy)]
struct Allocator {
    ctx: *mut c_void,
    malloc: Option<unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void>,
    calloc: Option<unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void>,
    realloc: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void>,
    free: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize)>,
}

/// numpy's `PyDataMem_Handler`: a name, the version (1), the allocator.
#[repr(C)]
struct Handler {
    name: [u8; 127],
    version: u8,
    allocator: Allocator,
}

/// What one of zcio's handlers knows: from how many bytes an array is zcio's, and the
/// allocator of the handler it chains to (copied from that handler, whose capsule is held
/// for good in [`Ctx::_chained_capsule`]).
struct Ctx {
    min_bytes: usize,
    chained: Allocator,
    /// The chained handler's capsule, a strong reference never given back: its allocator and
    /// context stay valid as long as arrays of this handler may ask for them.
    _chained_capsule: *mut ffi::PyObject,
}

/// One block of zcio's memory made for numpy: its loan (kept alive here), and its length.
struct Held {
    loan: Arc<Mutex<zcio::Loan>>,
    len: usize,
}

/// The loans numpy's arrays hold, by the address of their data: whichever of zcio's handlers
/// made one, any of them frees it.
static LOANS: Mutex<BTreeMap<usize, Held>> = Mutex::new(BTreeMap::new());
/// Arrays of `min_bytes` or more that went to the chained handler because no loan could be
/// made (longer than zcio's largest message, or the kernel refused the file).
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// The handlers made so far: (threshold, the chained handler's capsule, this handler's
/// capsule), addresses of objects that live for good.
static HANDLERS: Mutex<Vec<(usize, usize, usize)>> = Mutex::new(Vec::new());

fn loans() -> std::sync::MutexGuard<'static, BTreeMap<usize, Held>> {
    LOANS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A loan of `size` bytes for numpy, registered; `None` if none could be made (counted).
fn take_loan(size: usize) -> Option<*mut c_void> {
    let mut loan = match zcio::Loan::new(size) {
        Ok(l) => l,
        Err(_) => {
            FALLBACKS.fetch_add(1, Ordering::Relaxed);
            return None;
        }
    };
    // The loan's bytes stay where they are for its life, sent (kept) or not.
    let ptr = loan.as_mut_ptr() as usize;
    let loan = Arc::new(Mutex::new(loan));
    register_allocated(ptr, size, &loan);
    loans().insert(ptr, Held { loan, len: size });
    Some(ptr as *mut c_void)
}

/// Drop the loan at `ptr`, if it is one of [`LOANS`]; whether it was.
fn give_back(ptr: *mut c_void) -> bool {
    let held = loans().remove(&(ptr as usize));
    match held {
        Some(h) => {
            // Unmapped here, outside the lock (a send holding the loan keeps it until it ends).
            drop(h);
            true
        }
        None => false,
    }
}

/// Run `f`, turning a panic into `fallback` (a panic must not cross into numpy's C).
fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The handler's context.
///
/// # Safety
///
/// `ctx` is the context of one of zcio's handlers: a leaked [`Ctx`].
unsafe fn ctx_of<'a>(ctx: *mut c_void) -> &'a Ctx {
    // SAFETY: by the caller's promise, a `Ctx` leaked by `handler_for`, never freed or
    // changed.
    unsafe { &*(ctx as *const Ctx) }
}

/// `malloc` of the chained handler.
fn chained_malloc(c: &Ctx, size: usize) -> *mut c_void {
    match c.chained.malloc {
        // SAFETY: the chained handler's own function with its own context, as numpy calls it;
        // its capsule is held for good (`Ctx::_chained_capsule`).
        Some(f) => unsafe { f(c.chained.ctx, size) },
        None => null_mut(),
    }
}

unsafe extern "C" fn zcio_malloc(ctx: *mut c_void, size: usize) -> *mut c_void {
    guarded(null_mut(), || {
        // SAFETY: numpy passes the context of the handler it calls, one of zcio's.
        let c = unsafe { ctx_of(ctx) };
        if size >= c.min_bytes {
            if let Some(p) = take_loan(size) {
                return p;
            }
        }
        chained_malloc(c, size)
    })
}

unsafe extern "C" fn zcio_calloc(ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    guarded(null_mut(), || {
        // SAFETY: as in `zcio_malloc`.
        let c = unsafe { ctx_of(ctx) };
        let Some(size) = nelem.checked_mul(elsize) else {
            return null_mut();
        };
        // A fresh memory file is zero-filled: nothing to clear.
        if size >= c.min_bytes {
            if let Some(p) = take_loan(size) {
                return p;
            }
        }
        match c.chained.calloc {
            // SAFETY: as in `chained_malloc`.
            Some(f) => unsafe { f(c.chained.ctx, nelem, elsize) },
            None => null_mut(),
        }
    })
}

unsafe extern "C" fn zcio_realloc(
    ctx: *mut c_void,
    ptr: *mut c_void,
    new_size: usize,
) -> *mut c_void {
    guarded(null_mut(), || {
        // SAFETY: as in `zcio_malloc`.
        let c = unsafe { ctx_of(ctx) };
        if ptr.is_null() {
            // As realloc(NULL, n): a new block, zcio's or the chained handler's by its size.
            // SAFETY: `ctx` is this handler's.
            return unsafe { zcio_malloc(ctx, new_size) };
        }
        let old = loans()
            .get(&(ptr as usize))
            .map(|h| (h.loan.clone(), h.len));
        let Some((loan, old_len)) = old else {
            // Not zcio's: the chained handler's block, whose length only it knows.
            return match c.chained.realloc {
                // SAFETY: as in `chained_malloc`; `ptr` is a block of that handler's.
                Some(f) => unsafe { f(c.chained.ctx, ptr, new_size) },
                None => null_mut(),
            };
        };
        // A loan's length is fixed: a new block, the bytes copied, the loan dropped.
        // SAFETY: `ctx` is this handler's.
        let new = unsafe { zcio_malloc(ctx, new_size) };
        if new.is_null() {
            // The old block stays valid, as realloc leaves it on failure.
            return null_mut();
        }
        // SAFETY: `ptr` is the loan's memory, `old_len` bytes, mapped while `loan` (a strong
        // reference) lives; `new` is a fresh block of `new_size` bytes, another mapping or
        // allocation, so they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(ptr as *const u8, new as *mut u8, old_len.min(new_size));
        }
        drop(loan);
        give_back(ptr);
        new
    })
}

unsafe extern "C" fn zcio_free(ctx: *mut c_void, ptr: *mut c_void, size: usize) {
    guarded((), || {
        if !ptr.is_null() && give_back(ptr) {
            return;
        }
        // SAFETY: as in `zcio_malloc`.
        let c = unsafe { ctx_of(ctx) };
        if let Some(f) = c.chained.free {
            // SAFETY: as in `chained_malloc`; `ptr` is a block of that handler's (or null,
            // which numpy's default handler takes).
            unsafe { f(c.chained.ctx, ptr, size) }
        }
    })
}

/// The two calls of numpy's C API this module makes (`_ARRAY_API`, slots 304 and 305 since
/// numpy 1.22).
struct Api {
    set_handler: unsafe extern "C" fn(*mut ffi::PyObject) -> *mut ffi::PyObject,
    get_handler: unsafe extern "C" fn() -> *mut ffi::PyObject,
}

static API: OnceLock<Api> = OnceLock::new();

/// numpy's C-API version from which memory handlers exist (`NPY_1_22_API_VERSION`).
const NPY_1_22_API_VERSION: u32 = 0x0f;

/// numpy's C API, imported at the first call; an `ImportError` where numpy is not importable
/// or has no memory handlers.
fn api(py: Python<'_>) -> PyResult<&'static Api> {
    if let Some(a) = API.get() {
        return Ok(a);
    }
    let no_numpy = |e: PyErr| {
        PyImportError::new_err(format!(
            "zcio.numpy_memory needs numpy (1.22 or later), which is not importable here: {e}"
        ))
    };
    let module = match py.import("numpy._core._multiarray_umath") {
        Ok(m) => m,
        Err(e) if e.is_instance_of::<PyModuleNotFoundError>(py) => py
            .import("numpy.core._multiarray_umath")
            .map_err(no_numpy)?,
        Err(e) => return Err(no_numpy(e)),
    };
    let table = module.getattr("_ARRAY_API").map_err(no_numpy)?;
    let table = table.cast::<PyCapsule>().map_err(|e| no_numpy(e.into()))?;
    // SAFETY: `table` is a capsule (checked), alive while borrowed; numpy's table capsule has
    // no name (`import_array` asks for it with NULL, as here).
    let slots = unsafe { ffi::PyCapsule_GetPointer(table.as_ptr(), std::ptr::null()) }
        as *const *const c_void;
    if slots.is_null() {
        return Err(no_numpy(PyErr::take(py).unwrap_or_else(|| {
            PyImportError::new_err("numpy's _ARRAY_API holds no table")
        })));
    }
    // SAFETY: numpy's C-API table, which lives as long as numpy's module (for good: an
    // extension module is never unloaded); slot 211 is `PyArray_GetNDArrayCFeatureVersion`
    // in every numpy, `unsigned int (*)(void)`.
    let feature = unsafe {
        let f: unsafe extern "C" fn() -> u32 = std::mem::transmute(*slots.add(211));
        f()
    };
    if feature < NPY_1_22_API_VERSION {
        let version: String = py
            .import("numpy")
            .and_then(|n| n.getattr("__version__")?.extract())
            .unwrap_or_else(|_| "this".into());
        return Err(PyImportError::new_err(format!(
            "zcio.numpy_memory needs numpy 1.22 or later (memory handlers, NEP 49); numpy \
             {version} has none"
        )));
    }
    // SAFETY: the table as above, of a numpy with memory handlers (C-API version 1.22 or
    // later, checked): slot 304 is `PyObject *PyDataMem_SetHandler(PyObject *)`, slot 305
    // `PyObject *PyDataMem_GetHandler(void)` (numpy's `numpy_api.py`, `__multiarray_api.h`).
    let api = unsafe {
        let set = *slots.add(304);
        let get = *slots.add(305);
        if set.is_null() || get.is_null() {
            return Err(no_numpy(PyImportError::new_err(
                "numpy's C API has no PyDataMem_SetHandler",
            )));
        }
        Api {
            set_handler: std::mem::transmute::<
                *const c_void,
                unsafe extern "C" fn(*mut ffi::PyObject) -> *mut ffi::PyObject,
            >(set),
            get_handler: std::mem::transmute::<
                *const c_void,
                unsafe extern "C" fn() -> *mut ffi::PyObject,
            >(get),
        }
    };
    let _ = API.set(api);
    Ok(API.get().expect("set above"))
}

impl Api {
    /// The handler numpy gives new arrays in this context.
    fn current<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: numpy's `PyDataMem_GetHandler`, called with the GIL: a new reference, or
        // NULL with an exception set.
        unsafe { Bound::from_owned_ptr_or_err(py, (self.get_handler)()) }
    }

    /// Make `handler` (a "mem_handler" capsule) current in this context; the one before.
    fn set<'py>(&self, handler: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = handler.py();
        // SAFETY: numpy's `PyDataMem_SetHandler`, called with the GIL on a live object (numpy
        // checks it is a "mem_handler" capsule and takes its own reference): the previous
        // handler, a new reference, or NULL with an exception set.
        unsafe { Bound::from_owned_ptr_or_err(py, (self.set_handler)(handler.as_ptr())) }
    }
}

/// zcio's handler for arrays from `min_bytes`, chaining to `prev` (a "mem_handler" capsule):
/// made once for each pair, kept for good (numpy's arrays hold it).
fn handler_for<'py>(min_bytes: usize, prev: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = prev.py();
    let mut all = HANDLERS.lock().unwrap_or_else(|e| e.into_inner());
    let key = prev.as_ptr() as usize;
    if let Some(&(_, _, h)) = all.iter().find(|(m, p, _)| *m == min_bytes && *p == key) {
        // SAFETY: a capsule of ours, whose reference in `HANDLERS` is never given back.
        return Ok(unsafe { Bound::from_borrowed_ptr(py, h as *mut ffi::PyObject) });
    }
    // SAFETY: `prev` is alive (borrowed); the name is numpy's for handlers. NULL (with an
    // exception set) unless it is such a capsule.
    let chained =
        unsafe { ffi::PyCapsule_GetPointer(prev.as_ptr(), MEM_HANDLER.as_ptr()) } as *const Handler;
    if chained.is_null() {
        return Err(PyErr::take(py).unwrap_or_else(|| {
            PyValueError::new_err("numpy's current memory handler is not a mem_handler capsule")
        }));
    }
    // SAFETY: a `PyDataMem_Handler` of numpy's layout, alive while its capsule is (held for
    // good below); version 1 and later begin with the allocator read here.
    let (version, chained) = unsafe { ((*chained).version, (*chained).allocator) };
    if version < 1 {
        return Err(PyValueError::new_err(format!(
            "numpy's current memory handler has version {version}; zcio chains to version 1"
        )));
    }
    let ctx = Box::leak(Box::new(Ctx {
        min_bytes,
        chained,
        // The reference given up here is the one held for good.
        _chained_capsule: prev.clone().into_ptr(),
    }));
    let mut name = [0u8; 127];
    name[..4].copy_from_slice(b"zcio");
    let handler = Box::leak(Box::new(Handler {
        name,
        version: 1,
        allocator: Allocator {
            ctx: ctx as *mut Ctx as *mut c_void,
            malloc: Some(zcio_malloc),
            calloc: Some(zcio_calloc),
            realloc: Some(zcio_realloc),
            free: Some(zcio_free),
        },
    }));
    // SAFETY: a capsule of a leaked handler (it never moves or goes) under numpy's name, a
    // 'static string, with no destructor: the capsule is never freed either (its reference
    // is kept in `HANDLERS`).
    let capsule = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyCapsule_New(
                handler as *mut Handler as *mut c_void,
                MEM_HANDLER.as_ptr(),
                None,
            ),
        )?
    };
    all.push((min_bytes, key, capsule.clone().into_ptr() as usize));
    Ok(capsule)
}

/// What `zcio.numpy_memory(min_bytes)` returns: the context manager that has numpy make its
/// arrays of `min_bytes` or more in zcio's memory; at its exit, the handler before it is back.
#[pyclass(module = "zcio", name = "NumpyMemory")]
pub(crate) struct NumpyMemory {
    min_bytes: usize,
    /// The handlers to give back at each exit (a stack: the same object may be entered again
    /// inside its own block).
    before: Mutex<Vec<Py<PyAny>>>,
}

#[pymethods]
impl NumpyMemory {
    /// From how many bytes numpy's arrays are zcio's.
    #[getter]
    fn min_bytes(&self) -> usize {
        self.min_bytes
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let py = slf.py();
        let api = api(py)?;
        let prev = api.current(py)?;
        let min_bytes = slf.borrow().min_bytes;
        let ours = handler_for(min_bytes, &prev)?;
        let before = api.set(&ours)?;
        slf.borrow()
            .before
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(before.unbind());
        Ok(slf)
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: &Bound<'_, PyAny>,
        _v: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let before = self.before.lock().unwrap_or_else(|e| e.into_inner()).pop();
        if let Some(before) = before {
            api(py)?.set(before.bind(py))?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("zcio.numpy_memory(min_bytes={})", self.min_bytes)
    }
}

/// `zcio.numpy_memory(min_bytes=1 << 20)`: a context manager; inside its `with` block, numpy
/// makes every array whose data is `min_bytes` or more (1 MiB to 1 GiB, zcio's largest
/// message) in zcio's memory, as `zcio.alloc`'s: a memory file in 2 MiB pages, whose first
/// emulated-copy send ships it without a copy and makes the sender's pages copy-on-write.
/// Smaller arrays go to the memory handler that was current at the block's start.
///
/// Each such array costs a memory file of its own, its pages allocated and zeroed when numpy
/// asks (well under a millisecond for a few MiB, milliseconds for tens of MiB), and a
/// descriptor until it is sent (or the process forks): keep small and short-lived arrays
/// outside. Arrays made inside keep their memory after the block and are freed as usual
/// (`numpy_memory_stats()` counts them). numpy's handler is per context (`contextvars`): a
/// thread started inside the block does not use it, and an asyncio task uses the one current
/// where it was created. After a fork (`os.fork()`, `multiprocessing`'s fork start method)
/// each process has its own copy of such an array, its bytes of the moment of the fork, as
/// with numpy's own memory; the first send of it after the fork, in either process, copies
/// it once. `ImportError` where numpy (1.22 or later) is not importable.
#[pyfunction]
#[pyo3(signature = (min_bytes = LOAN_FROM as i64), text_signature = "(min_bytes=1 << 20)")]
pub(crate) fn numpy_memory(py: Python<'_>, min_bytes: i64) -> PyResult<NumpyMemory> {
    if min_bytes < LOAN_FROM as i64 || min_bytes > MAX_MESSAGE as i64 {
        return Err(PyValueError::new_err(format!(
            "min_bytes {min_bytes}: zcio puts arrays in its memory from {LOAN_FROM} bytes \
             (1 MiB) up to {MAX_MESSAGE} (1 GiB, its largest message); smaller arrays cost \
             less in numpy's own memory"
        )));
    }
    api(py)?;
    Ok(NumpyMemory {
        min_bytes: min_bytes as usize,
        before: Mutex::new(Vec::new()),
    })
}

/// `zcio.numpy_memory_stats()`: how many arrays numpy holds in zcio's memory now (`arrays`),
/// their bytes (`bytes`), and how many arrays large enough went to numpy's memory because no
/// memory file could be made for them (`fallbacks`, since the process began).
#[pyfunction]
pub(crate) fn numpy_memory_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let (arrays, bytes) = {
        let all = loans();
        (all.len(), all.values().map(|h| h.len).sum::<usize>())
    };
    let d = PyDict::new(py);
    d.set_item("arrays", arrays)?;
    d.set_item("bytes", bytes)?;
    d.set_item("fallbacks", FALLBACKS.load(Ordering::Relaxed))?;
    Ok(d)
}
