//! zcio's memory across `os.fork()`: each process its own copy, as fork promises.
//!
//! Memory of `zcio.alloc` and the arrays numpy makes inside `zcio.numpy_memory()` are loans:
//! memory files mapped shared until they are sent. A child made by fork would inherit those
//! shared mappings, and parent and child would write each other's arrays. So the module
//! registers [`_before_fork`] with `os.register_at_fork(before=...)` (which `multiprocessing`'s
//! fork start method goes through too): before each fork it keeps every loan not yet sent
//! ([`zcio::Loan::keep`]), its mapping made a private one of the same file at the same
//! addresses and the file sealed. The child then inherits a private mapping of a file nobody
//! can change: both processes read the bytes of the moment of the fork, and each page either
//! writes becomes its own copy (the kernel's copy-on-write). What it costs is the first send's
//! zero-copy: a kept loan is sent by copying it once into a fresh memory file.
//!
//! The hook runs in the forking thread, with the GIL. A loan another thread is sending is held
//! under its lock by that send, which may wait for the receiver without the GIL; the hook does
//! not wait for it beyond [`BUSY_PATIENCE`] in all (the send's first step makes the loan kept
//! anyway, within microseconds of taking the lock), then leaves it (counted as `busy`). Such a
//! loan's lock stays held in the child, whose copy of the sending thread does not exist:
//! there, that array cannot be sent (as with any lock another thread holds at a fork; Python
//! warns against forking a process with threads).
//!
//! A failure never stops the fork (Python ignores what a `before` hook raises): it is counted
//! (`zcio._fork_stats()`) and said in a `RuntimeWarning`.

use super::allocated;
use pyo3::exceptions::PyRuntimeWarning;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

/// How long, in all, the hook waits for loans that sends in other threads hold.
const BUSY_PATIENCE: Duration = Duration::from_millis(50);

/// Forks the hook ran before.
static FORKS: AtomicU64 = AtomicU64::new(0);
/// Loans the hook kept (each once: a kept loan stays so).
static KEPT: AtomicU64 = AtomicU64::new(0);
/// Loans the hook left because a send in another thread held them.
static BUSY: AtomicU64 = AtomicU64::new(0);
/// Loans the hook could not keep, or kept with their file unsealed.
static FAILED: AtomicU64 = AtomicU64::new(0);

/// Register [`_before_fork`] with `os.register_at_fork` (at the module's import).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("before", wrap_pyfunction!(_before_fork, m)?)?;
    py.import("os")?
        .call_method("register_at_fork", (), Some(&kwargs))?;
    Ok(())
}

/// Every loan of the module alive now: those of [`ALLOCATED`](super::ALLOCATED), which
/// holds `zcio.alloc`'s and numpy's (`numpy_memory` registers each of its loans there too).
fn live_loans() -> Vec<Arc<Mutex<zcio::Loan>>> {
    allocated()
        .iter()
        .filter_map(|(_, _, w)| w.upgrade())
        .collect()
}

/// The loan's lock, waiting until `deadline` at most for a send in another thread to let it
/// go; `None` if it did not.
fn lock_by(
    loan: &Mutex<zcio::Loan>,
    deadline: Instant,
) -> Option<std::sync::MutexGuard<'_, zcio::Loan>> {
    loop {
        match loan.try_lock() {
            Ok(g) => return Some(g),
            // A send that panicked: the loan is in one of its states still (nothing a send does
            // under the lock can panic with the loan half changed).
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

/// The `before` hook zcio registers with `os.register_at_fork`: make every array of zcio's
/// memory not yet sent private to this process, so that the child made by the fork gets a
/// copy of its own. Raises nothing: what failed is counted (`zcio._fork_stats()`) and said in
/// a `RuntimeWarning`.
#[pyfunction]
pub(crate) fn _before_fork(py: Python<'_>) {
    FORKS.fetch_add(1, Ordering::Relaxed);
    let loans = live_loans();
    let deadline = Instant::now() + BUSY_PATIENCE;
    let mut failures = Vec::new();
    for loan in &loans {
        let Some(mut l) = lock_by(loan, deadline) else {
            BUSY.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        if l.is_kept() || l.is_volatile() {
            continue;
        }
        match l.keep() {
            Ok(()) if l.is_kept() => {
                KEPT.fetch_add(1, Ordering::Relaxed);
            }
            Ok(()) => {}
            Err(e) => {
                FAILED.fetch_add(1, Ordering::Relaxed);
                let now = if l.is_kept() {
                    "kept all the same, its file unsealed"
                } else {
                    "still shared with the child"
                };
                failures.push(format!(
                    "{} bytes at {:#x}: {e} ({now})",
                    l.len(),
                    l.as_ptr() as usize
                ));
            }
        }
    }
    drop(loans);
    if let Some(first) = failures.first() {
        let msg = format!(
            "zcio could not make {} of its arrays private before a fork, so the child may share \
             their memory with this process; the first: {first}",
            failures.len()
        );
        // A warning turned into an error would only be printed and ignored by the fork.
        let _ = py
            .import("warnings")
            .and_then(|w| w.call_method1("warn", (msg, py.get_type::<PyRuntimeWarning>())));
    }
}

/// `zcio._fork_stats()`: what the fork hook did since the process began (a child counts on
/// from its parent's): `forks` it ran before, loans it `kept` (made private: each once),
/// loans it left because a send in another thread held them (`busy`), and loans it could not
/// make private or kept with their file unsealed (`failed`, each said in a `RuntimeWarning`).
#[pyfunction]
pub(crate) fn _fork_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in [
        ("forks", &FORKS),
        ("kept", &KEPT),
        ("busy", &BUSY),
        ("failed", &FAILED),
    ] {
        d.set_item(k, v.load(Ordering::Relaxed))?;
    }
    Ok(d)
}
