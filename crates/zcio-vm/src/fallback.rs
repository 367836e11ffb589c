//! TCOW's fallback when userfaultfd is unavailable: `mprotect(PROT_READ)` plus a `SIGSEGV`
//! handler that makes a writing thread *sleep on write* (paper 000, §2.3) until the output that
//! protects the page completes. The handler is async-signal-safe: it reads a fixed table of
//! atomics and waits on a futex; faults that are not zcio's go to the previously installed action.
//!
//! Limits, compared with the userfaultfd path: a write waits instead of getting a private copy;
//! a system call that writes into a protected buffer gets `EFAULT` instead of waiting; each
//! protected range splits the application's mapping (merged back on release).

use crate::error::{Result, VmError};
use crate::page::RawRange;
use std::cell::Cell;
use std::sync::Once;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

const ENTRIES: usize = 1024;

struct Entry {
    start: AtomicUsize,
    end: AtomicUsize,
    id: AtomicU64,
    /// 0 free, 1 protected, 2 claimed (being filled).
    state: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Entry = Entry {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    id: AtomicU64::new(0),
    state: AtomicU32::new(0),
};
static TABLE: [Entry; ENTRIES] = [EMPTY; ENTRIES];
static INSTALL: Once = Once::new();
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();

thread_local! {
    static LAST_UNKNOWN: Cell<usize> = const { Cell::new(0) };
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sigaction with a valid handler; PREVIOUS is written once, here, before any fault
        // can reach the handler (it is installed by this very call).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as usize;
            // SA_ONSTACK: a fault that is a stack overflow (not ours) is passed on from the
            // thread's alternate signal stack (Rust's runtime gives each thread one), not from
            // the overflowed stack.
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            let prev = &raw mut PREVIOUS;
            libc::sigaction(libc::SIGSEGV, &sa, (*prev).as_mut_ptr());
        }
    });
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    for e in TABLE.iter() {
        if e.state.load(Ordering::Acquire) == 1
            && addr >= e.start.load(Ordering::Relaxed)
            && addr < e.end.load(Ordering::Relaxed)
        {
            // Ours: sleep until the output completes, then let the write retry.
            while e.state.load(Ordering::Acquire) == 1
                && addr >= e.start.load(Ordering::Relaxed)
                && addr < e.end.load(Ordering::Relaxed)
            {
                // SAFETY: futex wait on a static atomic; async-signal-safe system call.
                unsafe {
                    libc::syscall(
                        libc::SYS_futex,
                        e.state.as_ptr(),
                        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                        1u32,
                        std::ptr::null::<libc::timespec>(),
                    );
                }
            }
            LAST_UNKNOWN.with(|c| c.set(0));
            return;
        }
    }
    // Not in the table. If this address faulted just before, it is not ours: chain. Otherwise
    // the protection may have been lifted between the fault and now: retry once.
    let again = LAST_UNKNOWN.with(|c| c.replace(addr)) == addr;
    if !again {
        return;
    }
    LAST_UNKNOWN.with(|c| c.set(0));
    // SAFETY: PREVIOUS was initialised before the handler was installed.
    unsafe {
        let prev = &*(&raw const PREVIOUS).cast::<libc::sigaction>();
        let h = prev.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            return; // the fault repeats and terminates the process as it would have without us
        }
        if prev.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
            f(sig);
        }
    }
}

/// Write-protect the full pages `r` of output `id` with `mprotect`, registering them for
/// sleep-on-write.
pub(crate) fn protect(id: u64, r: RawRange) -> Result<()> {
    install();
    let slot = TABLE
        .iter()
        .find(|e| {
            e.state
                .compare_exchange(0, 2, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
        .ok_or(VmError::TooLarge {
            what: "outputs protected with mprotect",
            value: ENTRIES + 1,
            limit: ENTRIES,
        })?;
    slot.start.store(r.addr, Ordering::Relaxed);
    slot.end.store(r.end(), Ordering::Relaxed);
    slot.id.store(id, Ordering::Relaxed);
    slot.state.store(1, Ordering::Release);
    // SAFETY: the range is the full pages of a buffer the caller handed over for output;
    // read-only access is the point (writes sleep in the handler until release).
    if let Err(e) = unsafe { crate::protect::set_access(r, crate::protect::Access::ReadOnly) } {
        slot.state.store(0, Ordering::Release);
        return Err(e);
    }
    Ok(())
}

/// Restore write access to `runs` and wake writers sleeping on output `id`.
pub(crate) fn unprotect(id: u64, runs: &[RawRange]) {
    for r in runs {
        // SAFETY: restoring read-write access to pages this output protected.
        let _ = unsafe { crate::protect::set_access(*r, crate::protect::Access::ReadWrite) };
    }
    for e in TABLE.iter() {
        if e.state.load(Ordering::Acquire) == 1 && e.id.load(Ordering::Relaxed) == id {
            e.state.store(0, Ordering::Release);
            // SAFETY: futex wake on a static atomic.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    e.state.as_ptr(),
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    i32::MAX,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_handler_runs_on_the_alternate_signal_stack() {
        super::install();
        // SAFETY: reads the current SIGSEGV disposition into a zeroed sigaction.
        let flags = unsafe {
            let mut cur: libc::sigaction = std::mem::zeroed();
            assert_eq!(
                libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut cur),
                0
            );
            assert_eq!(cur.sa_sigaction, super::handler as *const () as usize);
            cur.sa_flags
        };
        assert_ne!(flags & libc::SA_ONSTACK, 0, "SA_ONSTACK missing");
        assert_ne!(flags & libc::SA_SIGINFO, 0, "SA_SIGINFO missing");
    }
}
