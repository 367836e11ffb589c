//! TCOW's fallback when userfaultfd is unavailable: `mprotect(PROT_READ)` plus a `SIGSEGV`
//! handler. A write into a protected range of private anonymous memory gets the range copied:
//! the handler copies the whole range into fresh pages and `mremap`s them over it, so the writer
//! goes on at once on its own copy while the output keeps the original pages (TCOW by copy, one
//! copy per range and output). A write into any other memory (a shared or file mapping, whose
//! pages cannot be replaced without losing the file) *sleeps on write* (paper 000, §2.3) until
//! the output that protects the page completes, as does a write when the copy cannot be made
//! (no memory). The handler is async-signal-safe: it reads a fixed table of atomics, makes raw
//! system calls (`mmap`, `mremap`, `munmap`, futex) and copies memory; faults that are not
//! zcio's go to the previously installed action.
//!
//! Limits, compared with the userfaultfd path: the first write copies the whole range, not one
//! page; the copy is an ordinary mapping (a `madvise` or `mlock` the application made on the
//! range does not carry over); a sleeping write waits for the output's completion, which a
//! single-threaded application must reap from another thread; a system call that writes into a
//! protected buffer gets `EFAULT` instead of waiting; each protected range splits the
//! application's mapping (merged back on release).
//!
//! The release gives the pages back the access they had before (read-only memory stays
//! read-only), and only where `/proc/self/maps` shows the same memory still there and still
//! protected: a buffer the application unmapped under its output, and whatever it mapped in
//! its place, are left alone. Anonymous memory cannot be told apart from anonymous memory
//! mapped again at the same address with the same protection; that is the limit of this
//! tracking (userfaultfd reports unmaps; this mode has no such report).

use crate::error::{Result, VmError};
use crate::page::RawRange;
use std::cell::Cell;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

const ENTRIES: usize = 1024;

struct Entry {
    start: AtomicUsize,
    end: AtomicUsize,
    id: AtomicU64,
    /// [`FREE`], [`PROTECTED`], [`CLAIMED`], [`COPYING`] or [`COPIED`].
    state: AtomicU32,
    /// The range is private anonymous memory: a write may replace it with a copy.
    private: AtomicBool,
}

/// A free slot.
const FREE: u32 = 0;
/// Protected: a write copies the range (private memory) or sleeps until release.
const PROTECTED: u32 = 1;
/// Claimed by [`protect`], being filled.
const CLAIMED: u32 = 2;
/// A writer is copying the range; other writers wait for it.
const COPYING: u32 = 3;
/// The range was replaced by a copy: writable, nothing to wait for; freed on release.
const COPIED: u32 = 4;

/// Ranges copied by the handler, their pages, and writes that slept.
static COPIES: AtomicU64 = AtomicU64::new(0);
static COPIED_BYTES: AtomicU64 = AtomicU64::new(0);
static SLEPT: AtomicU64 = AtomicU64::new(0);

/// What the handler did so far: (writes that got a copy of their range, bytes copied, writes
/// that slept until the output completed).
pub(crate) fn counts() -> (u64, u64, u64) {
    (
        COPIES.load(Ordering::Relaxed),
        COPIED_BYTES.load(Ordering::Relaxed),
        SLEPT.load(Ordering::Relaxed),
    )
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Entry = Entry {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    id: AtomicU64::new(0),
    state: AtomicU32::new(FREE),
    private: AtomicBool::new(false),
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
    let within =
        |e: &Entry| addr >= e.start.load(Ordering::Relaxed) && addr < e.end.load(Ordering::Relaxed);
    for e in TABLE.iter() {
        let state = e.state.load(Ordering::Acquire);
        if !(state == PROTECTED || state == COPYING) || !within(e) {
            continue;
        }
        // Ours. Private memory: the first writer copies the range, the others wait for it.
        if e.private.load(Ordering::Relaxed)
            && e.state
                .compare_exchange(PROTECTED, COPYING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let (start, end) = (
                e.start.load(Ordering::Relaxed),
                e.end.load(Ordering::Relaxed),
            );
            if copy_over(start, end - start) {
                COPIES.fetch_add(1, Ordering::Relaxed);
                COPIED_BYTES.fetch_add((end - start) as u64, Ordering::Relaxed);
                // A release meanwhile freed the slot: leave it to whoever holds it now.
                let _ =
                    e.state
                        .compare_exchange(COPYING, COPIED, Ordering::AcqRel, Ordering::Relaxed);
                wake(e);
                LAST_UNKNOWN.with(|c| c.set(0));
                return;
            }
            // No memory for the copy: sleep like any other write.
            let _ =
                e.state
                    .compare_exchange(COPYING, PROTECTED, Ordering::AcqRel, Ordering::Relaxed);
            wake(e);
        }
        if e.state.load(Ordering::Acquire) == PROTECTED {
            SLEPT.fetch_add(1, Ordering::Relaxed);
        }
        // Sleep until the output completes (or the copy is made), then let the write retry.
        loop {
            let s = e.state.load(Ordering::Acquire);
            if !(s == PROTECTED || s == COPYING) || !within(e) {
                break;
            }
            // SAFETY: futex wait on a static atomic; async-signal-safe system call.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    e.state.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    s,
                    std::ptr::null::<libc::timespec>(),
                );
            }
        }
        LAST_UNKNOWN.with(|c| c.set(0));
        return;
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

/// Replace `len` bytes at `addr` (whole pages, readable) with a writable copy of them: fresh
/// anonymous pages, filled, then moved over the range in one `mremap` (readers never see the
/// range empty). What referenced the old pages (the output) keeps them. Async-signal-safe.
/// False if the copy could not be made (the range is left as it was).
fn copy_over(addr: usize, len: usize) -> bool {
    // SAFETY: a fresh private anonymous mapping, ours alone.
    let fresh = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    crate::protect::layout_changed();
    if fresh == libc::MAP_FAILED {
        return false;
    }
    // SAFETY: the range is mapped and readable (write-protected for an output; a release
    // meanwhile only restores write access, and the application cannot unmap a buffer it is
    // writing to); `fresh` is `len` bytes of our own, disjoint from it.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, fresh.cast::<u8>(), len) };
    // SAFETY: moves our fresh mapping over the application's range, which the application
    // handed to zcio for this output and is writing to right now (so it is still its buffer);
    // the old pages stay alive for the references the output holds.
    let moved = unsafe {
        libc::mremap(
            fresh,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            addr as *mut libc::c_void,
        )
    };
    crate::protect::layout_changed();
    if moved == libc::MAP_FAILED {
        // SAFETY: our own mapping, still where mmap put it.
        unsafe { libc::munmap(fresh, len) };
        crate::protect::layout_changed();
        return false;
    }
    true
}

/// Wake the writers waiting on `e`.
fn wake(e: &Entry) {
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

/// One mapping of `/proc/self/maps` within a range, clipped to it.
#[derive(Clone, Debug)]
struct Span {
    start: usize,
    end: usize,
    writable: bool,
    private: bool,
    anonymous: bool,
    /// What it maps: device, inode and path.
    what: String,
}

impl Span {
    fn range(&self) -> RawRange {
        RawRange {
            addr: self.start,
            len: self.end - self.start,
        }
    }
}

/// The mappings of `/proc/self/maps` that overlap `r`, clipped to it, in address order.
fn spans_in(r: RawRange) -> Option<Vec<Span>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (span, perms, _off, dev, inode) =
            (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        let path = f.collect::<Vec<_>>().join(" ");
        let (a, b) = span.split_once('-')?;
        let (a, b) = (
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        );
        if b <= r.addr || a >= r.end() {
            continue;
        }
        let p = perms.as_bytes();
        out.push(Span {
            start: a.max(r.addr),
            end: b.min(r.end()),
            writable: p.get(1) == Some(&b'w'),
            private: p.get(3) == Some(&b'p'),
            anonymous: inode == "0" && !path.starts_with('/'),
            what: format!("{dev} {inode} {path}"),
        });
    }
    Some(out)
}

/// Whether `spans` cover all of `r`, without a hole.
fn covers(spans: &[Span], r: RawRange) -> bool {
    let mut covered = r.addr;
    for s in spans {
        if s.start > covered {
            return false;
        }
        covered = covered.max(s.end);
    }
    covered >= r.end()
}

/// Each protected output's mappings as they were before zcio protected them (writable or
/// not), by output: what its release restores, and only where the same memory is still there.
/// Not read by the signal handler.
static ORIGINALS: std::sync::Mutex<Vec<(u64, Vec<Span>)>> = std::sync::Mutex::new(Vec::new());

fn originals() -> std::sync::MutexGuard<'static, Vec<(u64, Vec<Span>)>> {
    ORIGINALS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pieces of `r` that no span of `others` mapping the same memory covers.
fn outside(r: RawRange, what: &str, others: &[&Span]) -> Vec<RawRange> {
    let mut pieces = vec![r];
    for o in others.iter().filter(|o| o.what == what) {
        let mut next = Vec::new();
        for p in pieces {
            match p.intersect(&o.range()) {
                None => next.push(p),
                Some(i) => {
                    if i.addr > p.addr {
                        next.push(RawRange {
                            addr: p.addr,
                            len: i.addr - p.addr,
                        });
                    }
                    if i.end() < p.end() {
                        next.push(RawRange {
                            addr: i.end(),
                            len: p.end() - i.end(),
                        });
                    }
                }
            }
        }
        pieces = next;
    }
    pieces
}

/// Write-protect the full pages `r` of output `id` with `mprotect`, registering them for TCOW by
/// copy (private anonymous memory) or sleep-on-write (any other), and record what the range's
/// mappings allowed before, for [`unprotect`].
pub(crate) fn protect(id: u64, r: RawRange) -> Result<()> {
    install();
    let mut spans = spans_in(r).unwrap_or_default();
    let private = covers(&spans, r) && spans.iter().all(|s| s.private && s.anonymous);
    let slot = TABLE
        .iter()
        .find(|e| {
            e.state
                .compare_exchange(FREE, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
        .ok_or(VmError::TooLarge {
            what: "outputs protected with mprotect",
            value: ENTRIES + 1,
            limit: ENTRIES,
        })?;
    {
        let mut orig = originals();
        // A piece another output protects now is read-only because of it: what it was before
        // is in that output's record.
        for s in spans.iter_mut().filter(|s| !s.writable) {
            if let Some(o) = orig
                .iter()
                .flat_map(|(_, v)| v)
                .find(|o| o.what == s.what && o.range().intersect(&s.range()).is_some())
            {
                s.writable = o.writable;
            }
        }
        orig.push((id, spans));
    }
    slot.start.store(r.addr, Ordering::Relaxed);
    slot.end.store(r.end(), Ordering::Relaxed);
    slot.id.store(id, Ordering::Relaxed);
    slot.private.store(private, Ordering::Relaxed);
    slot.state.store(PROTECTED, Ordering::Release);
    // SAFETY: the range is the full pages of a buffer the caller handed over for output;
    // read-only access is the point (a write faults into the handler, which copies or sleeps).
    if let Err(e) = unsafe { crate::protect::set_access(r, crate::protect::Access::ReadOnly) } {
        originals().retain(|(o, _)| *o != id);
        slot.state.store(FREE, Ordering::Release);
        return Err(e);
    }
    Ok(())
}

/// Give `runs` of output `id` back the write access they had before it was protected, and wake
/// writers sleeping on it. Only what is still the memory the output protected, and still
/// read-only, is touched: a range the application unmapped (and maybe mapped again with other
/// memory), one the handler replaced by a writable copy, one that was read-only before, and a
/// piece another pending output protects are left as they are.
pub(crate) fn unprotect(id: u64, runs: &[RawRange]) {
    {
        let mut orig = originals();
        let mine = orig
            .iter()
            .position(|(o, _)| *o == id)
            .map(|i| orig.swap_remove(i).1)
            .unwrap_or_default();
        let others: Vec<&Span> = orig.iter().flat_map(|(_, v)| v).collect();
        // One reading of `/proc/self/maps` for all the runs.
        let lo = runs.iter().map(|r| r.addr).min().unwrap_or(0);
        let hi = runs.iter().map(|r| r.end()).max().unwrap_or(0);
        let now_all = match hi > lo {
            true => spans_in(RawRange {
                addr: lo,
                len: hi - lo,
            })
            .unwrap_or_default(),
            false => Vec::new(),
        };
        for r in runs {
            for now in now_all.iter().filter(|s| !s.writable) {
                let Some(now_in_run) = now.range().intersect(r) else {
                    continue;
                };
                for o in mine
                    .iter()
                    .filter(|o| o.writable && o.what == now.what && o.private == now.private)
                {
                    let Some(piece) = o.range().intersect(&now_in_run) else {
                        continue;
                    };
                    for p in outside(piece, &now.what, &others) {
                        // SAFETY: restoring the write access these pages had before this
                        // output protected them; they are still the same memory, as
                        // `/proc/self/maps` says, and no other output protects them.
                        let _ = unsafe {
                            crate::protect::set_access(p, crate::protect::Access::ReadWrite)
                        };
                    }
                }
            }
        }
    }
    for e in TABLE.iter() {
        let state = e.state.load(Ordering::Acquire);
        if matches!(state, PROTECTED | COPYING | COPIED) && e.id.load(Ordering::Relaxed) == id {
            e.state.store(FREE, Ordering::Release);
            wake(e);
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
