//! The per-process VM runtime: page referencing, TCOW and page swapping (paper 000, §3 and §5).
//!
//! One userfaultfd per process, one handler thread. The runtime keeps, for every pending output,
//! the range of pages it references ([`OutputRef`]); while an output that asked for protection is
//! pending, its pages are write-protected, and a write to one of them takes a fault that the
//! handler resolves by **TCOW**: it moves the original page out of the application's address
//! space into a stash slot (the pending output still references that physical page, so it keeps
//! the original) and installs a private copy, writable, at the faulting address. When the output
//! completes, write access to the pages nobody wrote returns without a copy, and stash slots are
//! released. When every stash slot is taken, the original goes through a bounce slot instead
//! (moved there, copied back, the slot emptied: the outputs' own page references keep it). If a
//! page cannot be moved (pinned, shared with a child since a fork, a 4 KiB page of a huge page
//! that the wire references) its bytes are copied to the bounce slot, this process's mapping of
//! it is dropped (whatever references the physical page keeps it) and the copy installed. So a
//! writer never waits for an output's completion, which may be its own to reap. Without
//! `UFFDIO_MOVE` (Linux 5.7 to 6.7) every TCOW fault is resolved that way, by copy.
//!
//! **Page swapping** exchanges the pages of an application range with those of a staging
//! range through an empty scratch range, with batched `UFFDIO_MOVE` calls over contiguous runs;
//! 2 MiB-aligned runs of transparent huge pages move as whole PMDs.
//!
//! Invariants that keep the handler from ever waiting on itself:
//! - only pages *entirely* inside a caller's buffer are registered or protected, so zcio's own
//!   bookkeeping never lies on a protected page;
//! - the bookkeeping has fixed capacity, allocated at start, and the handler never allocates;
//! - no thread touches application memory while holding the state lock (except the handler
//!   reading a present, write-protected page it copies, which cannot fault).
//!
//! Without userfaultfd the runtime falls back to `mprotect` + `SIGSEGV` (a write copies the
//! protected range, or sleeps on write in shared memory) for protection and to copying for swaps ([`crate::fallback`]); [`VmRuntime::capabilities`] says

mod handler;
mod moves;
mod output;
mod registration;
mod reverse_copyout;
mod swap;
mod tcow;

pub use handler::WatchId;
pub use moves::MoveStep;
pub use output::OutputRef;

use crate::error::{Result, VmError};
use crate::mapping::{MapOptions, Mapping};
use crate::page::{HUGE_PAGE_SIZE, RawRange, page_size};
use crate::uffd::{Features, Userfaultfd};
use registration::register_wp;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use tcow::Bounce;

/// Maximum outputs pending at once in one process.
pub const MAX_OUTPUTS: usize = 4096;
/// Maximum application ranges kept registered with the userfaultfd.
pub const MAX_REGISTRATIONS: usize = 64;
/// Pages in the TCOW stash (virtual; populated only by moved originals).
pub const STASH_PAGES: usize = 8192;
/// The stash's last page: the bounce slot, through which TCOW copies a page when every other
/// slot holds an original (the original is moved there, copied back, and the slot emptied).
const BOUNCE_SLOT: usize = STASH_PAGES - 1;
/// Huge-page (2 MiB) slots in the TCOW stash: originals of PMDs moved out by TCOW at 2 MiB,
/// and spare huge pages the copies are made in (virtual; populated only when used). A write to
/// a huge page under output when every slot is taken falls to the 4 KiB path, which copies the
/// page where the kernel cannot move a page of a referenced huge page.
pub const HSTASH_SLOTS: usize = 64;
/// Populated huge stash slots kept as spares for the next PMD TCOW (the rest are released).
const HSPARES_KEPT: usize = 16;
/// Ranges in transition (being swapped) at once.
const MAX_TRANSIENT: usize = 256;
/// How often an ioctl that says `EAGAIN` (the address space is changing) is retried.
const EAGAIN_RETRIES: u32 = 100_000;

/// Ranges watched for unmapping at once (cached regions).
pub const MAX_WATCHES: usize = 4096;

/// How write protection during output (TCOW) is implemented in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TcowMode {
    /// userfaultfd write-protect faults; the original page is moved out with `UFFDIO_MOVE` and a
    /// copy installed (the output keeps the original).
    UffdMove,
    /// userfaultfd write-protect faults, no `UFFDIO_MOVE` (Linux 5.7 to 6.7): the original's
    /// bytes are copied aside, this process's mapping of the page dropped (the output keeps the
    /// original) and the copy installed with `UFFDIO_COPY`.
    UffdCopy,
    /// `mprotect` + `SIGSEGV`: a write into private memory gets a copy of the protected range;
    /// one into shared memory waits for the output (sleep-on-write). The name is kept for the
    /// JSON that reports it.
    MprotectSleepOnWrite,
}

/// What the runtime can do on this machine, and why not when it cannot.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Capabilities {
    /// TCOW implementation in force.
    pub tcow: TcowMode,
    /// Whether page swapping (`UFFDIO_MOVE`) is available; otherwise swaps become copies.
    pub swap: bool,
    /// Why a better mechanism is not in use (empty when everything is available).
    pub reasons: Vec<String>,
}

/// Counters of what the runtime did (monotonic, process-wide).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VmStats {
    /// Write-protect faults taken on pages under output.
    pub tcow_faults: u64,
    /// Pages copied by TCOW (one per fault resolved by move + copy).
    pub tcow_copies: u64,
    /// Faults resolved by TCOW on a whole PMD (2 MiB): the huge page moved out, a copy moved in.
    #[serde(default)]
    pub tcow_huge_copies: u64,
    /// Bytes TCOW copied, 4 KiB and 2 MiB faults together.
    #[serde(default)]
    pub tcow_copied_bytes: u64,
    /// Of `tcow_copies`, those made through the bounce slot because every stash slot was taken.
    #[serde(default)]
    pub tcow_bounced: u64,
    /// Of `tcow_copies`, those made where the original could not be moved out (a page pinned,
    /// shared since a fork, or of a huge page the wire references): its bytes copied to the
    /// bounce slot, the application's mapping of it dropped (what references it keeps it), the
    /// copy installed. Two page copies each in `tcow_copied_bytes`.
    #[serde(default)]
    pub tcow_discards: u64,
    /// Faults whose write had to wait: until the output completed, or until the original could
    /// be moved (a page of a huge page the wire references, a pinned page).
    pub sleep_on_write: u64,
    /// Write-protect faults on pages no longer under output (protection simply lifted).
    pub wp_lifted: u64,
    /// Missing-page faults served with zero pages.
    pub missing_faults: u64,
    /// Pages moved by swaps, region moves and reverse copyout (not TCOW's moves, which
    /// `tcow_copies` and `tcow_huge_copies` count).
    pub pages_moved: u64,
    /// `UFFDIO_MOVE` calls issued for the moves `pages_moved` counts, retries included.
    pub move_calls: u64,
    /// Pages that could not be moved and were copied instead.
    pub move_fallback_copies: u64,
    /// Moves the kernel refused for a reason other than a pinned or shared page or a changing
    /// address space (mappings it finds incompatible for a move): the pages were copied.
    #[serde(default)]
    pub refused_moves: u64,
    /// Ranges registered with the userfaultfd.
    pub registrations: u64,
    /// Unmap events observed on registered ranges.
    pub unmaps: u64,
    /// Application registrations dropped at a missing-page fault outside any swap, with no
    /// output pending: their memory was given back (a freed heap buffer, most often) and is
    /// in use again.
    #[serde(default)]
    pub released_registrations: u64,
}

#[derive(Default)]
struct Counters {
    tcow_faults: AtomicU64,
    tcow_copies: AtomicU64,
    tcow_huge_copies: AtomicU64,
    tcow_copied_bytes: AtomicU64,
    tcow_bounced: AtomicU64,
    tcow_discards: AtomicU64,
    sleep_on_write: AtomicU64,
    wp_lifted: AtomicU64,
    missing_faults: AtomicU64,
    pages_moved: AtomicU64,
    move_calls: AtomicU64,
    move_fallback_copies: AtomicU64,
    refused_moves: AtomicU64,
    registrations: AtomicU64,
    unmaps: AtomicU64,
    released_registrations: AtomicU64,
}

#[derive(Clone, Copy)]
struct ActiveOutput {
    id: u64,
    range: RawRange,
    protected: bool,
    /// Unmap generation when the output started: only unmaps after it concern this output.
    since: u64,
}

/// A range whose unmapping the runtime watches for (a cached region; the region check).
#[derive(Clone, Copy)]
struct Watch {
    id: u64,
    range: RawRange,
    gone: bool,
}

#[derive(Clone, Copy)]
struct Stashed {
    output: u64,
    page: usize,
    slot: usize,
    /// A whole PMD in a huge stash slot (`page` is then 2 MiB-aligned and `slot` a huge slot).
    huge: bool,
}

impl Stashed {
    fn covers(&self, page: usize) -> bool {
        let len = if self.huge {
            HUGE_PAGE_SIZE
        } else {
            page_size()
        };
        self.page <= page && page < self.page + len
    }
}

#[derive(Clone, Copy)]
struct Registration {
    range: RawRange,
    last_use: u64,
}

struct State {
    outputs: Vec<ActiveOutput>,
    stashed: Vec<Stashed>,
    slot_refs: Vec<u32>,
    free_slots: Vec<usize>,
    /// What the bounce slot holds between TCOW steps 1 and 2, if anything.
    bounce: Option<Bounce>,
    hslot_refs: Vec<u32>,
    /// Empty huge stash slots.
    hfree: Vec<usize>,
    /// Populated huge stash slots whose bytes nobody needs: the copies of PMD TCOW go there.
    hspare: Vec<usize>,
    registered: Vec<Registration>,
    transient: Vec<RawRange>,
    /// Ranges unmapped while an output over them was pending, with the unmap generation.
    gone: Vec<(u64, RawRange)>,
    watches: Vec<Watch>,
    unmap_gen: u64,
    clock: u64,
    next_id: u64,
    /// Preallocated room for range computations under the lock (never grows).
    scratch: Vec<RawRange>,
}

impl State {
    /// The bookkeeping, at its fixed capacity: the handler never allocates.
    fn new() -> State {
        State {
            outputs: Vec::with_capacity(MAX_OUTPUTS),
            stashed: Vec::with_capacity(STASH_PAGES),
            slot_refs: vec![0; STASH_PAGES],
            free_slots: (0..BOUNCE_SLOT).rev().collect(),
            bounce: None,
            hslot_refs: vec![0; HSTASH_SLOTS],
            hfree: (0..HSTASH_SLOTS).rev().collect(),
            hspare: Vec::with_capacity(HSTASH_SLOTS),
            registered: Vec::with_capacity(MAX_REGISTRATIONS),
            transient: Vec::with_capacity(MAX_TRANSIENT),
            gone: Vec::with_capacity(MAX_OUTPUTS),
            watches: Vec::with_capacity(MAX_WATCHES),
            unmap_gen: 0,
            clock: 0,
            next_id: 1,
            scratch: Vec::with_capacity(2 * MAX_OUTPUTS + 2),
        }
    }
}

/// The process-wide VM runtime.
pub struct VmRuntime {
    /// The process that started this runtime, and the number of forks its line of processes
    /// had seen then ([`FORKS`]): a runtime inherited through `fork` is another process's.
    pid: u32,
    forks: u64,
    uffd: Option<Userfaultfd>,
    caps: Capabilities,
    state: Mutex<State>,
    /// Held by the handler from reading a batch of events until it has handled them, so that a
    /// region check made after `munmap` returned (the kernel returns once the unmap event is
    /// read) sees the event's effect.
    batch: Mutex<()>,
    next_watch: AtomicU64,
    stash: Option<Mapping>,
    /// The huge-page stash ([`HSTASH_SLOTS`] slots of 2 MiB), where transparent huge pages can be had.
    hstash: Option<Mapping>,
    zero: Mapping,
    counters: Counters,
}

crate::debug_summary!(VmRuntime, |s| caps: s.caps);

/// The runtime of this process (leaked: it lives as long as the process).
static RUNTIME: AtomicPtr<VmRuntime> = AtomicPtr::new(std::ptr::null_mut());
/// Serializes starting a runtime.
static STARTING: Mutex<()> = Mutex::new(());
/// Forks this process and its ancestors went through since zcio was first used (counted in the
/// child by a `pthread_atfork` handler). A child inherits its parent's runtime as memory: its
/// userfaultfd acts on the parent's address space and its handler thread did not survive the
/// fork, so the child starts a runtime of its own and the inherited one refuses to act.
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_fork_in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Count forks from now on (once per process; a child inherits the registration).
fn count_forks() {
    static AT_FORK: Once = Once::new();
    AT_FORK.call_once(|| {
        // SAFETY: registers a child handler that only increments an atomic counter
        // (async-signal-safe); the handler stays valid for the life of the program.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(count_fork_in_child)) };
        assert_eq!(rc, 0, "pthread_atfork failed");
    });
}

/// The forks this process and its ancestors went through since zcio first asked: a value
/// that changes in a child, read without a system call (what `getpid` would tell, per call).
pub(crate) fn fork_generation() -> u64 {
    count_forks();
    FORKS.load(Ordering::Relaxed)
}

pub use crate::config::DISABLE_ENV;

impl VmRuntime {
    /// The runtime of this process, started on first use. Never fails: a missing kernel feature
    /// selects a fallback, recorded in [`VmRuntime::capabilities`].
    ///
    /// After `fork`, the child gets a runtime of its own on first use (its own userfaultfd and
    /// handler thread); what it inherited from the parent's runtime (references of pending
    /// outputs, registrations) is inert there.
    pub fn get() -> &'static VmRuntime {
        let p = RUNTIME.load(Ordering::Acquire);
        // SAFETY: a non-null pointer in RUNTIME comes from Box::leak below and is never freed.
        if let Some(rt) = unsafe { p.as_ref() } {
            if rt.is_live() {
                return rt;
            }
        }
        Self::start_here()
    }

    #[cold]
    fn start_here() -> &'static VmRuntime {
        count_forks();
        let _g = STARTING.lock().unwrap_or_else(|p| p.into_inner());
        let p = RUNTIME.load(Ordering::Acquire);
        // SAFETY: as in `get`.
        if let Some(rt) = unsafe { p.as_ref() } {
            if rt.is_live() {
                return rt;
            }
        }
        let rt: &'static VmRuntime = Box::leak(Box::new(VmRuntime::start()));
        if let Some(u) = &rt.uffd {
            let fd = u.raw_fd();
            std::thread::Builder::new()
                .name("zcio-uffd".into())
                .spawn(move || rt.handler_loop(fd))
                .expect("spawn the userfaultfd handler thread");
        }
        RUNTIME.store(std::ptr::from_ref(rt).cast_mut(), Ordering::Release);
        rt
    }

    /// Whether this runtime belongs to this process (it was not inherited through `fork`).
    fn is_live(&self) -> bool {
        self.forks == FORKS.load(Ordering::Relaxed)
    }

    /// Refuse to act for another process (this runtime was inherited through `fork`).
    fn check_live(&self) -> Result<()> {
        if self.is_live() {
            return Ok(());
        }
        Err(VmError::RuntimeDown(format!(
            "it was started by process {} before a fork; this process ({}) has its own \
             (VmRuntime::get), and pages referenced, registered or staged before the fork \
             cannot be used here",
            self.pid,
            std::process::id()
        )))
    }

    fn start() -> VmRuntime {
        let cfg = crate::config::current();
        let by = crate::config::said_by();
        let (no_uffd, no_move) = (cfg.disabled.userfaultfd, cfg.disabled.page_moves);
        let mut reasons = Vec::new();
        let wanted = Features::WP | Features::MOVE | Features::EVENT_UNMAP | Features::EVENT_REMAP;
        let uffd = if no_uffd {
            reasons.push(format!("userfaultfd disabled by {by}"));
            None
        } else {
            match Userfaultfd::open(wanted) {
                Ok(u) if u.features().contains(Features::WP) => Some(u),
                Ok(_) => {
                    reasons.push("userfaultfd lacks write-protect (Linux < 5.7)".into());
                    None
                }
                Err(e) => {
                    reasons.push(format!("userfaultfd unavailable: {e}"));
                    None
                }
            }
        };
        let can_move = uffd
            .as_ref()
            .is_some_and(|u| u.features().contains(Features::MOVE))
            && !no_move;
        if uffd.is_some() && !can_move {
            reasons.push(if no_move {
                format!("UFFDIO_MOVE disabled by {by}")
            } else {
                "UFFDIO_MOVE unavailable (Linux < 6.8): swaps become copies, TCOW copies pages \
                 instead of moving them"
                    .into()
            });
        }
        let tcow = match (&uffd, can_move) {
            (Some(_), true) => TcowMode::UffdMove,
            (Some(_), false) => TcowMode::UffdCopy,
            (None, _) => TcowMode::MprotectSleepOnWrite,
        };
        // A stash: where TCOW keeps the originals it moves out (without UFFDIO_MOVE, only its
        // bounce slot is used, for the copies).
        let stash_of = |u: &Userfaultfd, len: usize, opts: MapOptions| {
            Mapping::anonymous(len, opts).and_then(|m| register_wp(u, m))
        };
        let stash = match &uffd {
            Some(u) => {
                let opts = MapOptions::NO_HUGE;
                match stash_of(u, STASH_PAGES * page_size(), opts) {
                    Ok(m) => Some(m),
                    Err(e) => {
                        reasons.push(format!("TCOW stash unavailable: {e}"));
                        None
                    }
                }
            }
            _ => None,
        };
        let hstash = match (&uffd, &stash, crate::huge::unavailable_reason()) {
            (Some(u), Some(_), None) if can_move => {
                let opts = MapOptions::HUGE;
                match stash_of(u, HSTASH_SLOTS * HUGE_PAGE_SIZE, opts) {
                    Ok(m) => Some(m),
                    Err(e) => {
                        reasons.push(format!("TCOW at 2 MiB unavailable (huge stash): {e}"));
                        None
                    }
                }
            }
            (Some(_), Some(_), Some(why)) => {
                reasons.push(format!("TCOW at 2 MiB unavailable: {why}"));
                None
            }
            _ => None,
        };
        let zero = Mapping::anonymous(page_size(), MapOptions::POPULATED)
            .expect("one page for the zero page");
        let state = State::new();
        VmRuntime {
            pid: std::process::id(),
            forks: FORKS.load(Ordering::Relaxed),
            caps: Capabilities {
                tcow,
                swap: can_move,
                reasons,
            },
            uffd,
            state: Mutex::new(state),
            batch: Mutex::new(()),
            next_watch: AtomicU64::new(1),
            stash,
            hstash,
            zero,
            counters: Counters::default(),
        }
    }

    /// What this runtime can do, and why not.
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// Counters so far.
    pub fn stats(&self) -> VmStats {
        let c = &self.counters;
        // The mprotect fallback's handler counts apart (it cannot reach the runtime): each
        // write it served is a fault, each range it copied that many page copies.
        let (range_copies, bytes, slept) = crate::fallback::counts();
        let pages = bytes / page_size() as u64;
        VmStats {
            tcow_faults: c.tcow_faults.load(Ordering::Relaxed) + range_copies + slept,
            tcow_copies: c.tcow_copies.load(Ordering::Relaxed) + pages,
            tcow_huge_copies: c.tcow_huge_copies.load(Ordering::Relaxed),
            tcow_copied_bytes: c.tcow_copied_bytes.load(Ordering::Relaxed) + bytes,
            tcow_bounced: c.tcow_bounced.load(Ordering::Relaxed),
            tcow_discards: c.tcow_discards.load(Ordering::Relaxed),
            sleep_on_write: c.sleep_on_write.load(Ordering::Relaxed) + slept,
            wp_lifted: c.wp_lifted.load(Ordering::Relaxed),
            missing_faults: c.missing_faults.load(Ordering::Relaxed),
            pages_moved: c.pages_moved.load(Ordering::Relaxed),
            move_calls: c.move_calls.load(Ordering::Relaxed),
            move_fallback_copies: c.move_fallback_copies.load(Ordering::Relaxed),
            refused_moves: c.refused_moves.load(Ordering::Relaxed),
            registrations: c.registrations.load(Ordering::Relaxed),
            unmaps: c.unmaps.load(Ordering::Relaxed),
            released_registrations: c.released_registrations.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Give the state lock up for a moment (the handler thread may need it to get to the event
    /// the kernel waits on), then take it again.
    fn relock<'a>(&'a self, st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        drop(st);
        std::thread::yield_now();
        self.lock()
    }
}
