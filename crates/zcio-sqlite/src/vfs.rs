//! The SQLite VFS whose main-database reads go through a [`zcio_uio::Uio`] layer: the ABI edge
//! between SQLite and the layer (the only `unsafe` of this crate).
//!
//! It wraps SQLite's own `unix` VFS: every file is opened by `unix`, and for a main database
//! opened read-only the file's method table is swapped for a copy whose `xRead` and `xClose` are
//! ours; locking, size, sync and the rest stay `unix`'s. Our per-file state lives after the
//! `unix` file in the same allocation (`szOsFile` is enlarged for it), so `unix`'s methods,
//! given our file, see exactly their own structure.
//!
//! Reads are served by [`crate::readahead::ReadAhead`]: sequential scans keep several large
//! `O_DIRECT` requests in flight. With SQLite's memory-mapped reads on (`pragma mmap_size`),
//! `xFetch` hands SQLite the page where the device put it, in the layer's buffer, pinned until
//! `xUnfetch` (the direct transfer into the application's buffer); otherwise, and for pages
//! outside the window, `xRead` copies the page into SQLite's. A page fetched from the window
//! has the bytes after it prefetched into the CPU's cache ([`UioVfs::set_prefetch`]).

use crate::pool::BufferPool;
use crate::readahead::{ReadAhead, ReadStats};
use rusqlite::ffi;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use zcio_uio::Uio;

/// What a registered VFS reads through, and what it counted.
struct VfsCtx {
    unix: *mut ffi::sqlite3_vfs,
    uio: Arc<Uio>,
    handler: zcio_uio::HandlerId,
    chunk: usize,
    depth: usize,
    /// Our copy of each `unix` method table we have seen, by its address.
    methods: Mutex<HashMap<usize, Box<ffi::sqlite3_io_methods>>>,
    stats: Arc<Mutex<ReadStats>>,
    pool: Option<Arc<BufferPool>>,
    /// Bytes prefetched after each page fetched, for files opened from now on.
    prefetch: Arc<AtomicUsize>,
}

/// A VFS registered with SQLite under a name, reading main databases through a layer.
/// Unregistered when dropped (no connection may use it then).
pub struct UioVfs {
    name: CString,
    vfs: *mut ffi::sqlite3_vfs,
    ctx: *mut VfsCtx,
    stats: Arc<Mutex<ReadStats>>,
    pool: Option<Arc<BufferPool>>,
    prefetch: Arc<AtomicUsize>,
}

// SAFETY: the registered structures are only read by SQLite (which is thread-safe in its
// default serialized mode) and freed in `drop` after unregistering; the context's mutable
// parts are behind mutexes.
unsafe impl Send for UioVfs {}
// SAFETY: as above.
unsafe impl Sync for UioVfs {}

zcio_vm::debug_summary!(UioVfs, |s| name: s.name);

/// Why a VFS could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum VfsError {
    /// SQLite has no `unix` VFS to wrap.
    #[error("SQLite has no unix VFS to wrap")]
    NoUnix,
    /// A name with a NUL byte.
    #[error("a VFS name with a NUL byte")]
    BadName,
    /// SQLite refused the registration.
    #[error("sqlite3_vfs_register failed ({0})")]
    Register(c_int),
}

impl UioVfs {
    /// Register `name`, reading main databases through `uio` in requests of `chunk` bytes
    /// (a multiple of 4 KiB), `depth` of them in flight per file.
    pub fn register(
        name: &str,
        uio: Arc<Uio>,
        chunk: usize,
        depth: usize,
    ) -> Result<UioVfs, VfsError> {
        Self::register_with(name, uio, chunk, depth, None)
    }

    /// [`UioVfs::register`], the files' chunks kept in `pool` across reads and connections:
    /// a chunk the pool holds is read from it, without a request. The pool's chunks occupy
    /// the layer's buffers, so the layer needs `pool.capacity()` of them beside those the reads
    /// in flight use.
    pub fn register_pooled(
        name: &str,
        uio: Arc<Uio>,
        chunk: usize,
        depth: usize,
        pool: Arc<BufferPool>,
    ) -> Result<UioVfs, VfsError> {
        Self::register_with(name, uio, chunk, depth, Some(pool))
    }

    fn register_with(
        name: &str,
        uio: Arc<Uio>,
        chunk: usize,
        depth: usize,
        pool: Option<Arc<BufferPool>>,
    ) -> Result<UioVfs, VfsError> {
        let name = CString::new(name).map_err(|_| VfsError::BadName)?;
        // SAFETY: a lookup by a valid C string; SQLite initializes itself if needed.
        let unix = unsafe { ffi::sqlite3_vfs_find(c"unix".as_ptr()) };
        if unix.is_null() {
            return Err(VfsError::NoUnix);
        }
        // SAFETY: `unix` is SQLite's registered VFS, alive for the process.
        let base = unsafe { std::ptr::read(unix) };
        let state_at = *STATE_AT.get_or_init(|| (base.szOsFile as usize).next_multiple_of(8));
        let stats = Arc::new(Mutex::new(ReadStats::default()));
        let prefetch = Arc::new(AtomicUsize::new(crate::readahead::PREFETCH));
        let handler = crate::readahead::handler(&uio);
        let ctx = Box::into_raw(Box::new(VfsCtx {
            unix,
            uio,
            handler,
            chunk,
            depth: depth.max(1),
            methods: Mutex::new(HashMap::new()),
            stats: stats.clone(),
            pool: pool.clone(),
            prefetch: prefetch.clone(),
        }));
        let vfs = Box::into_raw(Box::new(ffi::sqlite3_vfs {
            szOsFile: (state_at + std::mem::size_of::<*mut FileState>()) as c_int,
            pNext: std::ptr::null_mut(),
            zName: name.as_ptr(),
            pAppData: ctx as *mut c_void,
            xOpen: Some(x_open),
            ..base
        }));
        // SAFETY: `vfs` is a complete VFS structure that lives until `drop` unregisters it.
        let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
        if rc != ffi::SQLITE_OK {
            // SAFETY: never registered: ours to free.
            unsafe {
                drop(Box::from_raw(vfs));
                drop(Box::from_raw(ctx));
            }
            return Err(VfsError::Register(rc));
        }
        Ok(UioVfs {
            name,
            vfs,
            ctx,
            stats,
            pool,
            prefetch,
        })
    }

    /// The name to open connections with.
    pub fn name(&self) -> &str {
        self.name.to_str().expect("made from a str")
    }

    /// Make it SQLite's default VFS, the one databases opened without naming a VFS use.
    pub fn make_default(&self) -> Result<(), VfsError> {
        // SAFETY: registering again a VFS registered in `register_with`, alive until `drop`
        // unregisters it; SQLite only moves it to the head of its list.
        let rc = unsafe { ffi::sqlite3_vfs_register(self.vfs, 1) };
        if rc != ffi::SQLITE_OK {
            return Err(VfsError::Register(rc));
        }
        Ok(())
    }

    /// The buffer pool its reads go through, if any.
    pub fn pool(&self) -> Option<&BufferPool> {
        self.pool.as_deref()
    }

    /// Prefetch the `bytes` after each page SQLite reads in place into the CPU's cache, in
    /// files opened from now on (0: none; [`crate::readahead::PREFETCH`] at first).
    pub fn set_prefetch(&self, bytes: usize) {
        self.prefetch.store(bytes, Ordering::Relaxed);
    }

    /// Bytes prefetched after each page read in place, in files opened from now on.
    pub fn prefetch(&self) -> usize {
        self.prefetch.load(Ordering::Relaxed)
    }

    /// What the reads through this VFS did so far.
    pub fn stats(&self) -> ReadStats {
        *self.stats.lock().expect("stats")
    }
}

impl Drop for UioVfs {
    fn drop(&mut self) {
        // SAFETY: registered in `register`; after unregistering SQLite no longer reaches the
        // structures (connections using the VFS must be closed first: the caller's contract,
        // kept by the bench, which closes every connection before).
        unsafe {
            ffi::sqlite3_vfs_unregister(self.vfs);
            drop(Box::from_raw(self.vfs));
            drop(Box::from_raw(self.ctx));
        }
    }
}

/// Our state for one main database file.
struct FileState {
    ra: ReadAhead,
    close: unsafe extern "C" fn(*mut ffi::sqlite3_file) -> c_int,
    file_control: unsafe extern "C" fn(*mut ffi::sqlite3_file, c_int, *mut c_void) -> c_int,
    stats: Arc<Mutex<ReadStats>>,
    pool: Option<Arc<BufferPool>>,
}

impl FileState {
    /// What [`STATS_PRAGMA`] answers: the VFS's counts so far (this file's included) and its
    /// pool's, as one JSON object.
    fn stats_json(&self) -> String {
        let mut st = *self.stats.lock().expect("stats");
        st.add(&self.ra.stats());
        let p = self.pool.as_ref().map(|p| p.stats()).unwrap_or_default();
        format!(
            "{{\"files\":{},\"fallback_files\":{},\"reads\":{},\"requests\":{},\
             \"bytes_transferred\":{},\"bytes_copied\":{},\"bytes_fetched\":{},\
             \"pool_hits\":{},\"bytes_pooled\":{},\"pool_chunks\":{},\"pool_bytes\":{}}}",
            st.files,
            st.fallback_files,
            st.reads,
            st.requests,
            st.bytes_transferred,
            st.bytes_copied,
            st.bytes_fetched,
            st.pool_hits,
            st.bytes_pooled,
            p.chunks,
            p.bytes,
        )
    }
}

/// The pragma a connection whose main database the layer reads answers with what the VFS did
/// so far (`pragma zcio_stats`: one row, a JSON object of [`ReadStats`]' counts and the pool's
/// chunks and bytes); through any other file, SQLite ignores it as an unknown pragma.
pub const STATS_PRAGMA: &str = "zcio_stats";

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    // `sqlite3_filename` in SQLite's headers from 3.41; a plain C string in those before.
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite passes our VFS, whose `pAppData` is the context that lives as long.
    let ctx = unsafe { &*((*vfs).pAppData as *const VfsCtx) };
    // SAFETY: the same arguments, to the VFS we wrap; `file` has room for its structure.
    let rc = unsafe {
        let open = (*ctx.unix).xOpen.expect("unix opens files");
        open(ctx.unix, name, file, flags, out_flags)
    };
    // SAFETY: `file` is an allocation of our `szOsFile`, which holds the slot.
    unsafe { *slot(file) = std::ptr::null_mut() };
    let read_only = flags & ffi::SQLITE_OPEN_READONLY != 0;
    if rc != ffi::SQLITE_OK || flags & ffi::SQLITE_OPEN_MAIN_DB == 0 || !read_only || name.is_null()
    {
        return rc;
    }
    // SAFETY: SQLite's file name is a NUL-terminated string while the file is open.
    let path = unsafe { CStr::from_ptr(name) };
    let Ok(path) = path.to_str() else {
        return rc;
    };
    // SAFETY: the unix VFS set the method table of the file it opened.
    let real = unsafe { (*file).pMethods };
    if real.is_null() {
        return rc;
    }
    let ra = match ReadAhead::open(
        ctx.uio.clone(),
        ctx.handler,
        Path::new(path),
        ctx.chunk,
        ctx.depth,
    )
    .map(|ra| ra.with_prefetch(ctx.prefetch.load(Ordering::Relaxed)))
    .and_then(|ra| match &ctx.pool {
        Some(p) => ra.with_pool(p.clone(), Path::new(path)),
        None => Ok(ra),
    }) {
        Ok(ra) => ra,
        // Not through the layer: the file stays unix's, whole (the stats count it).
        Err(_) => {
            ctx.stats.lock().expect("stats").fallback_files += 1;
            return rc;
        }
    };
    // SAFETY: `real` is unix's method table, static in SQLite.
    let real_methods = unsafe { &*real };
    let (Some(close), Some(file_control)) = (real_methods.xClose, real_methods.xFileControl) else {
        return rc;
    };
    let mut methods = ctx.methods.lock().expect("methods");
    let ours = methods.entry(real as usize).or_insert_with(|| {
        let mut m = ffi::sqlite3_io_methods {
            xClose: Some(x_close),
            xRead: Some(x_read),
            xFileControl: Some(x_file_control),
            ..*real_methods
        };
        if m.iVersion >= 3 {
            m.xFetch = Some(x_fetch);
            m.xUnfetch = Some(x_unfetch);
        }
        Box::new(m)
    });
    let state = Box::into_raw(Box::new(FileState {
        ra,
        close,
        file_control,
        stats: ctx.stats.clone(),
        pool: ctx.pool.clone(),
    }));
    // SAFETY: `file` is ours; the method table lives in the context, as long as the VFS.
    unsafe {
        *slot(file) = state;
        (*file).pMethods = &**ours;
    }
    rc
}

/// Where our state pointer sits in a file: after unix's structure (the same for every VFS
/// here, since all wrap the one `unix`).
static STATE_AT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Our state slot in a file we took over.
///
/// # Safety
/// `file` was opened by one of our VFSs (its allocation holds the slot).
unsafe fn slot(file: *mut ffi::sqlite3_file) -> *mut *mut FileState {
    let at = *STATE_AT.get().expect("set when a VFS was registered");
    // SAFETY: the caller's contract.
    unsafe { (file as *mut u8).add(at) as *mut *mut FileState }
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite calls our xClose only on files we took over, whose slot holds the state
    // made by `Box::into_raw` in `x_open`; it is taken out once.
    let state = unsafe { std::mem::replace(&mut *slot(file), std::ptr::null_mut()) };
    if state.is_null() {
        return ffi::SQLITE_IOERR_CLOSE;
    }
    // SAFETY: as above.
    let state = unsafe { Box::from_raw(state) };
    let close = state.close;
    state.stats.lock().expect("stats").add(&state.ra.stats());
    // Every request in flight completes before the state (and its buffers) go.
    drop(state);
    // SAFETY: unix's close, on the file unix opened.
    unsafe { close(file) }
}

unsafe extern "C" fn x_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: as in `x_read`.
    let Some(state) = (unsafe { (*slot(file)).as_ref() }) else {
        return ffi::SQLITE_NOTFOUND;
    };
    if op == ffi::SQLITE_FCNTL_PRAGMA {
        // SAFETY: for a pragma SQLite passes three C strings: the slot for the result, the
        // pragma's name and its argument (or null).
        let args = arg as *mut *mut c_char;
        // SAFETY: as above: the name is a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(*args.add(1)) };
        if name
            .to_bytes()
            .eq_ignore_ascii_case(STATS_PRAGMA.as_bytes())
        {
            let text = state.stats_json();
            // SAFETY: SQLite's allocator, whose memory SQLite frees after the pragma.
            let out = unsafe { ffi::sqlite3_malloc(text.len() as c_int + 1) } as *mut u8;
            if out.is_null() {
                return ffi::SQLITE_NOMEM;
            }
            // SAFETY: `out` holds the text and its NUL; the result slot is SQLite's.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), out, text.len());
                *out.add(text.len()) = 0;
                *args = out as *mut c_char;
            }
            return ffi::SQLITE_OK;
        }
    }
    // SAFETY: unix's file control, on the file unix opened, with SQLite's arguments.
    unsafe { (state.file_control)(file, op, arg) }
}

unsafe extern "C" fn x_fetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: SQLite hands a place for the pointer.
    unsafe { *out = std::ptr::null_mut() };
    // SAFETY: as in `x_read`: a file we took over, used by one thread at a time.
    let Some(state) = (unsafe { (*slot(file)).as_mut() }) else {
        return ffi::SQLITE_OK;
    };
    if amount <= 0 || offset < 0 {
        return ffi::SQLITE_OK;
    }
    match state.ra.fetch(offset as u64, amount as usize) {
        // SAFETY: the address of `amount` bytes in a buffer the read-ahead keeps, unchanged,
        // until SQLite releases the page with xUnfetch; SQLite only reads through it.
        Ok(Some(addr)) => unsafe { *out = addr as *mut c_void },
        // Not in place: SQLite reads the page with xRead.
        Ok(None) => {}
        Err(_) => return ffi::SQLITE_IOERR_READ,
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_unfetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    page: *mut c_void,
) -> c_int {
    // SAFETY: as in `x_read`.
    let Some(state) = (unsafe { (*slot(file)).as_mut() }) else {
        return ffi::SQLITE_OK;
    };
    // A null page asks to drop every mapping: nothing of ours is a mapping.
    if !page.is_null() && offset >= 0 {
        state.ra.unfetch(offset as u64, page as usize);
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: SQLite calls our xRead only on files we took over, whose slot holds their
    // live state; SQLite never uses one file from two threads at once.
    let Some(state) = (unsafe { (*slot(file)).as_mut() }) else {
        return ffi::SQLITE_IOERR_READ;
    };
    if amount < 0 || offset < 0 {
        return ffi::SQLITE_IOERR_READ;
    }
    // SAFETY: SQLite hands a buffer of `amount` writable bytes for the call's duration.
    let dst = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, amount as usize) };
    match state.ra.read(dst, offset as u64) {
        Ok(n) if n == dst.len() => ffi::SQLITE_OK,
        Ok(n) => {
            dst[n..].fill(0);
            ffi::SQLITE_IOERR_SHORT_READ
        }
        Err(_) => ffi::SQLITE_IOERR_READ,
    }
}
