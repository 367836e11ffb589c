//! zcio for Python: the extension module `zcio`.
//!
//! Two Python processes find each other by a name and pass large buffers (`bytes`,
//! `bytearray`, `memoryview`, `array.array`, `mmap`, numpy arrays: anything with the buffer
//! protocol, C-contiguous) under Genie's emulated copy: `Channel.send` returns once the
//! message is queued and the caller may change its object at once; the receiver gets the bytes
//! as they were at the call, in a `zcio.Buffer` of its own that numpy views without a copy.
//!
//! ```python
//! import zcio, numpy as np
//! # one process
//! with zcio.listen("frames") as l, l.accept() as ch:
//!     a = np.frombuffer(ch.recv(), dtype=np.float32)   # writable, no copy
//! # another
//! with zcio.connect("frames", timeout=5) as ch:
//!     ch.send(np.ones(1 << 28, dtype=np.float32))
//! ```
//!
//! Inside `with zcio.numpy_memory():` numpy makes its large arrays in zcio's memory (a NumPy
//! memory handler, NEP 49: the module `numpy_memory`), so that their sends ship memory files
//! without a copy, as those of `zcio.alloc`'s memory do.
//!
//! That memory keeps fork's promise: before `os.fork()` (and `multiprocessing`'s fork start
//! method) the module makes every such array not yet sent private to the process (the module
//! `fork`), so that after the fork each process has its own copy, the bytes of the moment of
//! the fork; the first send of such an array after the fork copies it once.
//!
//! Every blocking call releases the GIL ([`Python::detach`]) and ends at a signal whose handler
//! raises (Ctrl-C: `KeyboardInterrupt`), at its timeout (`TimeoutError`), or when the peer is
//! gone (`zcio.PeerGone`, a `ConnectionError`). The module is a thin layer over `zcio`'s
//! [`zcio::Channel`]: this file is the ABI edge, and its `unsafe` is the buffer protocol's
//! (`numpy_memory`'s is numpy's C API and allocator functions).

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyConnectionError, PyException, PyTimeoutError};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use pyo3::{create_exception, ffi};
use std::ffi::{CString, c_int, c_void};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use zcio::genie::memnet::LinkParts;
use zcio::vm::arena::SharedArena;
use zcio::{ErrorKind, GenieError, InputBuffering, Received, Semantics, Waits};

mod fork;
mod numpy_memory;

create_exception!(
    zcio,
    Error,
    PyException,
    "A zcio call failed; the message says what was wrong."
);
create_exception!(
    zcio,
    PeerGone,
    PyConnectionError,
    "The process at the other end of the channel is gone."
);
create_exception!(
    zcio,
    TooSmall,
    PyValueError,
    "The buffer is smaller than the next message, which stays queued; `needed` is its length."
);

/// "zcioPKL5": the first word of `send_obj`'s header message.
const OBJ_MAGIC: u64 = 0x7a63_696f_504b_4c35;

/// From this length up, an emulated-copy send on this host goes as a loan, a sealed memory
/// file (in 2 MiB pages from 2 MiB) that the receiver maps without a copy, and which returns
/// whatever the receiver does, with no window to wait for:
///
/// - memory of `zcio.alloc` is such a file already: it is sealed and shipped without a copy,
///   and the sender's pages become copy-on-write ([`zcio::Channel::send_loan_copy`]);
/// - any other object's bytes are copied into a fresh file once: a Python object's memory is
///   rarely page-aligned (numpy's is 16 bytes past a page), which the page-protection path
///   pays for in faults at every later write.
///
/// `zcio.alloc` makes files from this length up too.
const LOAN_FROM: usize = 1 << 20;

/// The memory `zcio.alloc` made as loans, and that of numpy's arrays made inside
/// `zcio.numpy_memory()` ([`numpy_memory`]), by address, so that a send of any object viewing
/// it (a numpy array over a `zcio.Buffer`, a slice of one, an array numpy made there) finds
/// its file. Entries whose buffer is gone are dropped as they are met.
static ALLOCATED: Mutex<Vec<Allocated>> = Mutex::new(Vec::new());

/// One entry of [`ALLOCATED`]: where the memory starts and ends, and its loan.
type Allocated = (usize, usize, Weak<Mutex<zcio::Loan>>);

/// [`ALLOCATED`], locked, its entries whose loan is gone dropped.
fn allocated() -> std::sync::MutexGuard<'static, Vec<Allocated>> {
    let mut all = ALLOCATED.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|(_, _, w)| w.strong_count() > 0);
    all
}

/// Register `len` bytes from `ptr`, a loan's memory (of `zcio.alloc`, or an array numpy made
/// inside `zcio.numpy_memory()`), for sends to find; entries whose loan is gone are dropped.
fn register_allocated(ptr: usize, len: usize, loan: &Arc<Mutex<zcio::Loan>>) {
    allocated().push((ptr, ptr + len, Arc::downgrade(loan)));
}

/// The loan of `zcio.alloc` (or `zcio.numpy_memory()`) that holds all of `bytes`, and where
/// they start in it.
fn allocated_holding(bytes: &[u8]) -> Option<(Arc<Mutex<zcio::Loan>>, usize)> {
    let (start, end) = (
        bytes.as_ptr() as usize,
        bytes.as_ptr() as usize + bytes.len(),
    );
    allocated()
        .iter()
        .find(|(a, e, _)| *a <= start && end <= *e)
        .and_then(|(a, _, w)| Some((w.upgrade()?, start - a)))
}

/// The Python exception for a zcio error.
fn to_py(e: GenieError) -> PyErr {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::PeerGone => PeerGone::new_err(msg),
        ErrorKind::TimedOut => PyTimeoutError::new_err(msg),
        ErrorKind::InvalidArgument => PyValueError::new_err(msg),
        ErrorKind::TooSmall { needed } => Python::attach(|py| {
            let err = TooSmall::new_err(msg);
            // The length needed, as an attribute the caller can read.
            let _ = err.value(py).setattr("needed", needed);
            err
        }),
        _ => Error::new_err(msg),
    }
}

/// A semantics by its name (`"emulated-copy"` or `"emulated_copy"`); the channel's buffer calls
/// take those whose application owns the buffers.
fn semantics(name: &str) -> PyResult<Semantics> {
    let s: Semantics = name
        .replace('_', "-")
        .parse()
        .map_err(|e: String| PyValueError::new_err(e))?;
    if s.allocation() == zcio::genie::semantics::Allocation::System {
        return Err(PyValueError::new_err(format!(
            "semantics {name:?}: a channel's send takes copy, emulated-copy, share or \
             emulated-share (the others pass the system's regions, not your buffer)"
        )));
    }
    Ok(s)
}

/// A timeout in seconds (`None`: none), checked.
fn timeout_of(t: Option<f64>) -> PyResult<Option<Duration>> {
    match t {
        None => Ok(None),
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(PyValueError::new_err(format!(
            "timeout {s}: seconds, 0 or more, or None"
        ))),
    }
}

/// Run `call` without the GIL, within `timeout`, ending at a signal whose Python handler
/// raises (the handler runs with the GIL back, then the call goes on for what is left of its
/// time).
fn blocking<T: Send>(
    py: Python<'_>,
    timeout: Option<Duration>,
    mut call: impl FnMut(Waits) -> Result<T, GenieError> + Send,
) -> PyResult<T> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let waits = Waits {
            timeout: deadline.map(|d| d.saturating_duration_since(Instant::now())),
            interruptible: true,
        };
        match py.detach(|| call(waits)) {
            Err(e) if e.kind() == ErrorKind::Interrupted => py.check_signals()?,
            r => return r.map_err(to_py),
        }
    }
}

/// A C-contiguous buffer of `obj`'s bytes, for reading (or writing: `writable`), with a clear
/// error for what cannot be one. The buffer is untyped: an exporter whose items are not bytes
/// (a numpy array of floats, an `array.array('d')`) is taken as its bytes, with no view made
/// to cast it.
fn buffer_of(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<PyUntypedBuffer> {
    let buf = PyUntypedBuffer::get(obj).map_err(|e| {
        PyTypeError::new_err(format!(
            "{}: zcio takes an object with the buffer protocol (bytes, bytearray, memoryview, \
             array.array, mmap, a numpy array): {e}",
            type_name(obj)
        ))
    })?;
    if !buf.is_c_contiguous() {
        return Err(PyBufferError::new_err(format!(
            "{}: not C-contiguous (a strided view or a transposed array); pass a contiguous \
             copy, numpy.ascontiguousarray(a)",
            type_name(obj)
        )));
    }
    if writable && buf.readonly() {
        return Err(PyBufferError::new_err(format!(
            "{}: read-only; receive into a writable object (a bytearray, a writable numpy \
             array) or use recv()",
            type_name(obj)
        )));
    }
    Ok(buf)
}

/// The bytes of `buf`, to read without the GIL.
fn bytes_of(buf: &PyUntypedBuffer) -> &[u8] {
    if buf.len_bytes() == 0 {
        return &[];
    }
    // SAFETY: `buf` holds the exporter's buffer (PEP 3118: its memory stays and is not resized
    // while a view exists) and is C-contiguous (checked by `buffer_of`), so `len_bytes` bytes
    // from `buf_ptr` are its memory, alive as long as the borrow of `buf`. Other Python threads
    // may write it meanwhile, as with any C extension that releases the GIL over a buffer.
    unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) }
}

/// The bytes of `buf`, to write without the GIL (the memory is the exporter's, not the
/// buffer handle's: a shared borrow of the handle gives writable bytes, as the C API does).
#[expect(
    clippy::mut_from_ref,
    reason = "the bytes belong to the exporter, not the handle"
)]
fn bytes_of_mut(buf: &PyUntypedBuffer) -> &mut [u8] {
    if buf.len_bytes() == 0 {
        return &mut [];
    }
    // SAFETY: as `bytes_of`; the buffer is writable (checked by `buffer_of`), and this call is
    // its only writer in this extension while the slice lives.
    unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr() as *mut u8, buf.len_bytes()) }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".into(), |n| n.to_string())
}

/// Send `bytes` under `sem` ([`LOAN_FROM`] says when an emulated copy goes as a loan).
fn send_one(
    ch: &mut zcio::Channel,
    sem: Semantics,
    bytes: &[u8],
) -> Result<(zcio::Ticket, zcio::Accounting), GenieError> {
    if sem == Semantics::EmulatedCopy && bytes.len() >= LOAN_FROM && ch.transport() == "memnet" {
        if let Some((loan, at)) = allocated_holding(bytes) {
            // Memory of `zcio.alloc`: its file shipped, its pages made copy-on-write here.
            let len = bytes.len();
            let mut loan = loan.lock().unwrap_or_else(|e| e.into_inner());
            return ch.send_loan_copy(&mut loan, at..at + len);
        }
        let mut loan = ch.loan(bytes.len())?;
        loan.copy_from_slice(bytes);
        let (t, mut acc) = ch.send_loan(loan)?;
        acc.cpu_copied_bytes = bytes.len() as u64;
        return Ok((t, acc));
    }
    ch.send(sem, bytes)
}

/// Listens on a name: `zcio.listen(name)`; each `accept()` is a channel to one client.
#[pyclass(module = "zcio")]
struct Listener {
    inner: Mutex<Option<zcio::ChannelListener>>,
    name: String,
}

#[pymethods]
impl Listener {
    /// Wait for the next client (at most `timeout` seconds) and return its channel.
    #[pyo3(signature = (timeout=None))]
    fn accept(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Channel> {
        let timeout = timeout_of(timeout)?;
        let ch = blocking(py, timeout, |w| {
            let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            match g.as_ref() {
                Some(l) => l.accept(w.timeout),
                None => Err(closed()),
            }
        })?;
        Ok(Channel::new(ch))
    }

    /// The name clients connect to.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// Stop listening (the name is free again).
    fn close(&self) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: &Bound<'_, PyAny>,
        _v: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        format!("zcio.Listener({:?})", self.name)
    }
}

/// What a call on a closed channel or listener gets (`ValueError`, as a closed file's calls).
fn closed() -> GenieError {
    GenieError::InvalidArgument {
        arg: "self",
        rule: "the channel (or listener) is closed".into(),
    }
}

/// One end of a channel (`zcio.connect`, `Listener.accept`, `zcio.Pipe`).
#[pyclass(module = "zcio")]
struct Channel {
    inner: Mutex<End>,
    /// The path the last call's data took, as the library said.
    last_path: Mutex<String>,
}

/// What a channel object holds.
enum End {
    Open(Box<zcio::Channel>),
    /// An end of `zcio.Pipe()` not used yet: its link's parts, and the link's arena where it
    /// is mapped in this process (a child made by fork has the mapping too). Joined at its
    /// first use, in whichever process that is.
    Parts(Box<LinkParts>, Option<Arc<SharedArena>>),
    /// An end pickled to another process: the socket its parts wait on, kept until the child
    /// has it.
    Given(#[allow(dead_code)] UnixStream),
    Closed,
}

impl End {
    /// The channel, joining a pipe's end at its first use.
    fn open(&mut self) -> Result<&mut zcio::Channel, GenieError> {
        if let End::Parts(..) = self {
            let End::Parts(parts, arena) = std::mem::replace(self, End::Closed) else {
                unreachable!("matched above")
            };
            *self = End::Open(Box::new(zcio::Channel::local(zcio::MemnetEndpoint::join(
                *parts, arena,
            )?)));
        }
        match self {
            End::Open(ch) => Ok(ch),
            End::Given(_) => Err(GenieError::InvalidArgument {
                arg: "self",
                rule: "this end of the pipe was sent to another process".into(),
            }),
            _ => Err(closed()),
        }
    }
}

impl Channel {
    fn new(ch: zcio::Channel) -> Channel {
        Channel::of(End::Open(Box::new(ch)))
    }

    fn of(end: End) -> Channel {
        Channel {
            inner: Mutex::new(end),
            last_path: Mutex::new(String::new()),
        }
    }

    fn said(&self, acc: &zcio::Accounting) {
        *self.last_path.lock().unwrap_or_else(|e| e.into_inner()) = acc.path.to_string();
    }

    /// Run `f` on the channel, without the GIL ([`blocking`]).
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
        mut f: impl FnMut(&mut zcio::Channel) -> Result<T, GenieError> + Send,
    ) -> PyResult<T> {
        blocking(py, timeout, |w| {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let ch = g.open()?;
            ch.set_waits(w);
            f(ch)
        })
    }

    fn send_bytes(&self, py: Python<'_>, sem: Semantics, buf: &PyUntypedBuffer) -> PyResult<u64> {
        let bytes = bytes_of(buf);
        let (t, acc) = self.call(py, None, |ch| send_one(ch, sem, bytes))?;
        self.said(&acc);
        Ok(t.0)
    }

    fn recv_buffer(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<Buffer> {
        let (data, acc) = self.call(py, timeout, |ch| ch.recv_loan())?;
        self.said(&acc);
        Ok(Buffer {
            data: Bytes::Received(data),
        })
    }
}

#[pymethods]
impl Channel {
    /// Send the bytes of `obj` (any C-contiguous object with the buffer protocol) under
    /// `semantics` (default emulated copy: the call returns once the message is queued, and
    /// `obj` may be changed at once; the receiver gets its bytes as they were at the call).
    /// Returns a ticket for `wait`. With "share" or "emulated-share", `obj` must not change
    /// until `wait(ticket)` returns.
    #[pyo3(signature = (obj, semantics="emulated-copy"))]
    fn send(&self, py: Python<'_>, obj: &Bound<'_, PyAny>, semantics: &str) -> PyResult<u64> {
        let sem = self::semantics(semantics)?;
        let buf = buffer_of(obj, false)?;
        self.send_bytes(py, sem, &buf)
    }

    /// Receive the next message into a `zcio.Buffer` of its own length: writable, with the
    /// buffer protocol (`numpy.frombuffer(buf, dtype)` views it without a copy), freed when
    /// the last view of it is gone.
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Buffer> {
        let timeout = timeout_of(timeout)?;
        self.recv_buffer(py, timeout)
    }

    /// Receive the next message into `obj` (writable, C-contiguous); returns its length. A
    /// message longer than `obj` stays queued, and `zcio.TooSmall` says its length (`needed`).
    #[pyo3(signature = (obj, timeout=None))]
    fn recv_into(
        &self,
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let timeout = timeout_of(timeout)?;
        let buf = buffer_of(obj, true)?;
        let out = bytes_of_mut(&buf);
        let (n, acc) = self.call(py, timeout, |ch| {
            ch.recv(Semantics::EmulatedCopy, out, InputBuffering::EarlyDemux)
        })?;
        self.said(&acc);
        Ok(n)
    }

    /// Trust the peer with volatile loans, or stop (both ends must say so): the memory files
    /// large sends are copied into are then reused from message to message, lent to the
    /// receiver and given back when its `Buffer` is freed, so a send costs one copy into pages
    /// already there; but nothing stops the peer's process from writing a file it lent while
    /// this end holds it, so say so only for a peer you trust like your own process.
    fn set_volatile_loans(&self, py: Python<'_>, yes: bool) -> PyResult<()> {
        self.call(py, None, |ch| {
            ch.set_volatile_loans(yes);
            Ok(())
        })
    }

    /// The path the last send or receive's data took, as zcio reported it (which mechanism,
    /// or which fallback and why).
    #[getter]
    fn last_path(&self) -> String {
        self.last_path
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The length of the next message, waiting for it; the message stays queued.
    #[pyo3(signature = (timeout=None))]
    fn peek_len(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        let timeout = timeout_of(timeout)?;
        self.call(py, timeout, |ch| ch.peek_len())
    }

    /// Wait until the output `ticket` has reached the receiver.
    #[pyo3(signature = (ticket, timeout=None))]
    fn wait(&self, py: Python<'_>, ticket: u64, timeout: Option<f64>) -> PyResult<()> {
        let timeout = timeout_of(timeout)?;
        self.call(py, timeout, |ch| ch.wait(zcio::Ticket(ticket)))
    }

    /// Wait until every output has reached the receiver.
    #[pyo3(signature = (timeout=None))]
    fn flush(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let timeout = timeout_of(timeout)?;
        self.call(py, timeout, |ch| ch.flush())
    }

    /// Send any picklable object (pickle protocol 5): the large buffers it holds (numpy
    /// arrays, `bytearray`, `pickle.PickleBuffer`) go out of band, each a message of its own
    /// under emulated copy, so their bytes are never pickled.
    fn send_obj(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        let pickle = py.import("pickle")?;
        let bufs = PyList::empty(py);
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("protocol", 5)?;
        kwargs.set_item("buffer_callback", bufs.getattr("append")?)?;
        let data = pickle.getattr("dumps")?.call((obj,), Some(&kwargs))?;
        let data = data.cast::<PyBytes>()?;
        let mut views = Vec::with_capacity(bufs.len());
        for b in bufs.iter() {
            let raw = b.call_method0("raw")?;
            views.push(buffer_of(&raw, false)?);
        }
        // Header: magic, the pickle's length, then each buffer's length (empty ones are not
        // sent: a message holds one byte at least).
        let mut head = Vec::with_capacity(8 * (3 + views.len()));
        head.extend_from_slice(&OBJ_MAGIC.to_le_bytes());
        head.extend_from_slice(&(views.len() as u64).to_le_bytes());
        head.extend_from_slice(&(data.as_bytes().len() as u64).to_le_bytes());
        for v in &views {
            head.extend_from_slice(&(v.len_bytes() as u64).to_le_bytes());
        }
        let pickled = data.as_bytes();
        self.call(py, None, |ch| {
            ch.send(Semantics::Copy, &head)?;
            ch.send(Semantics::EmulatedCopy, pickled)?;
            for v in &views {
                if v.len_bytes() > 0 {
                    send_one(ch, Semantics::EmulatedCopy, bytes_of(v))?;
                }
            }
            Ok(())
        })
    }

    /// Receive an object sent by `send_obj`; its out-of-band buffers are `zcio.Buffer`s
    /// (numpy arrays built on them are writable).
    #[pyo3(signature = (timeout=None))]
    fn recv_obj<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let timeout = timeout_of(timeout)?;
        let head = self.recv_buffer(py, timeout)?;
        let header = head.data.to_vec();
        let word = |i: usize| -> Option<u64> {
            let b = header.get(i * 8..i * 8 + 8)?;
            Some(u64::from_le_bytes(b.try_into().ok()?))
        };
        let n = match (word(0), word(1)) {
            (Some(OBJ_MAGIC), Some(n)) if head.data.len() as u64 == 8 * (3 + n) => n as usize,
            _ => {
                return Err(Error::new_err(format!(
                    "recv_obj: the next message ({} bytes) is not a send_obj header; it was \
                     taken off the channel",
                    head.data.len()
                )));
            }
        };
        let data = self.recv_buffer(py, None)?;
        if Some(data.data.len() as u64) != word(2) {
            return Err(Error::new_err(format!(
                "recv_obj: a pickle of {} bytes where the header said {:?}",
                data.data.len(),
                word(2)
            )));
        }
        let mut bufs: Vec<Bound<'py, PyAny>> = Vec::with_capacity(n);
        for i in 0..n {
            let len = word(3 + i).unwrap_or(0) as usize;
            if len == 0 {
                bufs.push(pyo3::types::PyByteArray::new(py, &[]).into_any());
                continue;
            }
            let b = self.recv_buffer(py, None)?;
            if b.data.len() != len {
                return Err(Error::new_err(format!(
                    "recv_obj: buffer {i} of {} bytes where the header said {len}",
                    b.data.len()
                )));
            }
            bufs.push(Bound::new(py, b)?.into_any());
        }
        let data = Bound::new(py, data)?;
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("buffers", PyTuple::new(py, bufs)?)?;
        py.import("pickle")?
            .getattr("loads")?
            .call((data,), Some(&kwargs))
    }

    /// The channel's file descriptor, readable when a message is ready (for `select`,
    /// `selectors`, `asyncio`'s `add_reader`).
    fn fileno(&self) -> PyResult<i32> {
        use std::os::fd::AsRawFd;
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.open().map(|ch| ch.as_raw_fd()).map_err(to_py)
    }

    /// Close this end (the peer's next call fails with `zcio.PeerGone`).
    fn close(&self) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = End::Closed;
    }

    /// Whether this end is closed.
    #[getter]
    fn closed(&self) -> bool {
        matches!(
            *self.inner.lock().unwrap_or_else(|e| e.into_inner()),
            End::Closed
        )
    }

    /// Pickle an end of `zcio.Pipe()` not used yet, for another process (`multiprocessing`
    /// does this when it starts a child with spawn or forkserver): its link's parts travel by
    /// descriptor passing (`multiprocessing.reduction.DupFd`), and this object is done.
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(*g, End::Parts(..)) {
            return Err(PyTypeError::new_err(
                "a zcio channel in use cannot be pickled: only an end of zcio.Pipe() not used \
                 yet goes to another process (or connect there by name)",
            ));
        }
        let End::Parts(parts, _) = std::mem::replace(&mut *g, End::Closed) else {
            unreachable!("matched above")
        };
        let (mine, theirs) = UnixStream::pair()?;
        parts.send_over(&mine).map_err(to_py)?;
        use std::os::fd::AsRawFd;
        let dup = py
            .import("multiprocessing.reduction")?
            .getattr("DupFd")?
            .call1((theirs.as_raw_fd(),))?;
        *g = End::Given(theirs);
        let rebuild = py.import("zcio")?.getattr("_rebuild_pipe_end")?;
        Ok((rebuild, PyTuple::new(py, [dup])?))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: &Bound<'_, PyAny>,
        _v: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match &*g {
            End::Open(ch) => format!("zcio.Channel(transport={:?})", ch.transport()),
            End::Parts(..) => "zcio.Channel(a pipe's end, not used yet)".into(),
            End::Given(_) => "zcio.Channel(sent to another process)".into(),
            End::Closed => "zcio.Channel(closed)".into(),
        }
    }
}

/// A received message: bytes of this process's own, writable, with the buffer protocol.
#[pyclass(module = "zcio", weakref)]
struct Buffer {
    data: Bytes,
}

/// A [`Buffer`]'s bytes: a message received, or memory `zcio.alloc` made.
enum Bytes {
    Received(Received),
    Made(zcio::AppBuffer),
    /// Memory of `zcio.alloc` from [`LOAN_FROM`]: a loan, found by address at a send
    /// ([`ALLOCATED`]); its bytes stay where they are, sent or not.
    ///
    /// Where its bytes are is kept apart from the loan, so that exporting them never waits for
    /// a send holding the loan (which may wait for a receiver that needs the GIL).
    Allocated {
        loan: Arc<Mutex<zcio::Loan>>,
        ptr: usize,
        len: usize,
    },
}

impl Bytes {
    /// Where the bytes are and how many (they do not move while the `Buffer` lives).
    fn place(&mut self) -> (*mut u8, usize) {
        match self {
            Bytes::Received(r) => (r.as_mut_ptr(), r.len()),
            Bytes::Made(b) => (b.as_mut_ptr(), b.len()),
            Bytes::Allocated { ptr, len, .. } => (*ptr as *mut u8, *len),
        }
    }

    fn len(&self) -> usize {
        match self {
            Bytes::Received(r) => r.len(),
            Bytes::Made(b) => b.len(),
            Bytes::Allocated { len, .. } => *len,
        }
    }

    /// A copy of the bytes.
    fn to_vec(&self) -> Vec<u8> {
        match self {
            Bytes::Received(r) => r.to_vec(),
            Bytes::Made(b) => b.to_vec(),
            Bytes::Allocated { loan, .. } => {
                loan.lock().unwrap_or_else(|e| e.into_inner()).to_vec()
            }
        }
    }
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.data.len()
    }

    /// Export the bytes, writable, one dimension of unsigned bytes (`"B"`).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("a null Py_buffer"));
        }
        let (ptr, len) = slf.borrow_mut().data.place();
        // SAFETY: `view` is the caller's Py_buffer (not null, checked); the bytes are the
        // received message's (its pages do not move while it lives), which lives as long as
        // the Buffer object, and `view.obj` holds a strong
        // reference to that object until the view is released. `shape` and `strides` point
        // into the view itself, as CPython's own exporters do for one dimension.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = ptr as *mut c_void;
            (*view).len = len as isize;
            (*view).readonly = 0;
            (*view).itemsize = 1;
            (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                CString::new("B").expect("no nul").into_raw()
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                &mut (*view).len
            } else {
                std::ptr::null_mut()
            };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                &mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: `view` is a view `__getbuffer__` filled; its format is null or the CString
        // made there, freed once here.
        unsafe {
            if !(*view).format.is_null() {
                drop(CString::from_raw((*view).format));
            }
        }
    }

    fn __repr__(&self) -> String {
        format!("zcio.Buffer({} bytes)", self.data.len())
    }
}

/// `zcio.listen(name, window=None)`: listen on `name` (a plain name on this host;
/// `tcp://address:port` for peers on other hosts). Only this user's processes may connect on
/// this host. `window`: the bytes of messages each end of a channel may have in flight before
/// `send` waits for the receiver (16 MiB unless given).
#[pyfunction]
#[pyo3(signature = (name, window=None))]
fn listen(name: &str, window: Option<usize>) -> PyResult<Listener> {
    let mut l = zcio::Channel::listen(name).map_err(to_py)?;
    if let Some(w) = window {
        if w == 0 {
            return Err(PyValueError::new_err(
                "window 0: a window holds one byte at least",
            ));
        }
        l.set_link_options(zcio::LinkOptions { window: w });
    }
    let name = l.name().map_err(to_py)?;
    Ok(Listener {
        inner: Mutex::new(Some(l)),
        name,
    })
}

/// `zcio.connect(name, timeout=None)`: connect to the listener of `name`, waiting up to
/// `timeout` seconds (None: a minute) for it to be there.
#[pyfunction]
#[pyo3(signature = (name, timeout=None))]
fn connect(py: Python<'_>, name: &str, timeout: Option<f64>) -> PyResult<Channel> {
    let t = timeout_of(timeout)?.unwrap_or(Duration::from_secs(60));
    let name = name.to_string();
    let ch = py
        .detach(|| zcio::Channel::connect(&name, t))
        .map_err(to_py)?;
    Ok(Channel::new(ch))
}

/// `zcio.alloc(n)`: `n` bytes of zcio's (zeroed; in 2 MiB pages from 2 MiB where the kernel
/// gives them), for an array to fill and send. From 1 MiB they are a memory file: the first
/// emulated-copy send of them (or of any part of them) ships the file without copying a byte
/// and makes the pages here copy-on-write, so the send returns in well under a millisecond
/// whatever the length, and each page written afterwards is copied by the kernel at the
/// write. A later send of the same memory copies it once, as a send of any other object does.
/// After a fork each process has its own copy, its bytes of the moment of the fork; the first
/// send of it after the fork, in either process, copies it once.
#[pyfunction]
fn alloc(n: usize) -> PyResult<Buffer> {
    if n < LOAN_FROM {
        let b = zcio::AppBuffer::for_message(n).map_err(to_py)?;
        return Ok(Buffer {
            data: Bytes::Made(b),
        });
    }
    let mut loan = zcio::Loan::new(n).map_err(to_py)?;
    // The loan's bytes stay where they are for its life, sent (kept) or not.
    let ptr = loan.as_mut_ptr() as usize;
    let loan = Arc::new(Mutex::new(loan));
    register_allocated(ptr, n, &loan);
    Ok(Buffer {
        data: Bytes::Allocated { loan, ptr, len: n },
    })
}

/// `zcio.Pipe()`: two connected ends, like `multiprocessing.Pipe()`: either may go to a child
/// process (`multiprocessing` with spawn, forkserver or fork) before its first use.
#[pyfunction]
#[pyo3(name = "Pipe")]
fn pipe() -> PyResult<(Channel, Channel)> {
    let (a, b, arena) = zcio::genie::memnet::link_parts().map_err(to_py)?;
    Ok((
        Channel::of(End::Parts(Box::new(a), Some(arena.clone()))),
        Channel::of(End::Parts(Box::new(b), Some(arena))),
    ))
}

/// Rebuild a pipe's end pickled by `Channel.__reduce__` (its parts wait on the socket `dup`
/// hands over).
#[pyfunction]
fn _rebuild_pipe_end(dup: &Bound<'_, PyAny>) -> PyResult<Channel> {
    let fd: i32 = dup.call_method0("detach")?.extract()?;
    if fd < 0 {
        return Err(PyValueError::new_err(format!(
            "a pipe's end: descriptor {fd}"
        )));
    }
    // SAFETY: `DupFd.detach()` hands this process a descriptor of its own (a duplicate made for
    // it), which nothing else owns or closes; it is a Unix socket (the pickled end's).
    let sock = unsafe { <UnixStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let parts = LinkParts::recv_from(&sock).map_err(to_py)?;
    Ok(Channel::of(End::Parts(Box::new(parts), None)))
}

/// The extension module.
#[pymodule]
#[pyo3(name = "zcio")]
fn zcio_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(listen, m)?)?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(pipe, m)?)?;
    m.add_function(wrap_pyfunction!(alloc, m)?)?;
    m.add_function(wrap_pyfunction!(numpy_memory::numpy_memory, m)?)?;
    m.add_function(wrap_pyfunction!(numpy_memory::numpy_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(_rebuild_pipe_end, m)?)?;
    m.add_function(wrap_pyfunction!(fork::_fork_stats, m)?)?;
    m.add_class::<Listener>()?;
    m.add_class::<Channel>()?;
    m.add_class::<Buffer>()?;
    m.add_class::<numpy_memory::NumpyMemory>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("PeerGone", py.get_type::<PeerGone>())?;
    m.add("TooSmall", py.get_type::<TooSmall>())?;
    fork::register(m)?;
    Ok(())
}
