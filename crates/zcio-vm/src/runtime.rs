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
//! Without userfaultfd the runtime falls back to `mprotect` + `SIGSEGV` sleep-on-write for
//! protection and to copying for swaps ([`crate::fallback`]); [`VmRuntime::capabilities`] says
//! which path is in force and why.

use crate::error::{Result, VmError};
use crate::mapping::{MapOptions, Mapping};
use crate::page::{HUGE_PAGE_SIZE, RawRange, complement_into, page_size};
use crate::uffd::{Event, Features, RegisterMode, Userfaultfd};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

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
/// Run `op` again while it fails with `EAGAIN` (the address space is changing: an event awaits
/// the handler thread), at most [`EAGAIN_RETRIES`] times. Not for the handler thread, nor with
/// the state lock held: only the handler's next read of its events ends the `EAGAIN`.
fn retry_eagain<T, E>(
    errno: impl Fn(&E) -> Option<i32>,
    mut op: impl FnMut() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let mut busy = 0;
    loop {
        match op() {
            Err(e) if errno(&e) == Some(libc::EAGAIN) && busy < EAGAIN_RETRIES => {
                busy += 1;
                std::thread::yield_now();
            }
            r => return r,
        }
    }
}

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
    /// `mprotect` + `SIGSEGV`: a write waits for the output (sleep-on-write).
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
    /// Pages moved by swaps and region fills.
    pub pages_moved: u64,
    /// Move calls (ioctls) issued.
    pub move_calls: u64,
    /// Pages that could not be moved and were copied instead.
    pub move_fallback_copies: u64,
    /// Ranges registered with the userfaultfd.
    pub registrations: u64,
    /// Unmap events observed on registered ranges.
    pub unmaps: u64,
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
    registrations: AtomicU64,
    unmaps: AtomicU64,
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

impl std::fmt::Debug for VmRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmRuntime")
            .field("caps", &self.caps)
            .finish()
    }
}

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

/// Environment variable that disables mechanisms, for comparing paths and testing fallbacks:
/// a comma-separated list of `uffd` (no userfaultfd at all), `move` (no `UFFDIO_MOVE`) and
/// `huge` (no 2 MiB paths: as where transparent huge pages are off).
pub const DISABLE_ENV: &str = "ZCIO_VM_DISABLE";

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
        static AT_FORK: Once = Once::new();
        AT_FORK.call_once(|| {
            // SAFETY: registers a child handler that only increments an atomic counter
            // (async-signal-safe); the handler stays valid for the life of the program.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(count_fork_in_child)) };
            assert_eq!(rc, 0, "pthread_atfork failed");
        });
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
        let disabled = std::env::var(DISABLE_ENV).unwrap_or_default();
        let no_uffd = disabled.split(',').any(|s| s.trim() == "uffd");
        let no_move = disabled.split(',').any(|s| s.trim() == "move");
        let mut reasons = Vec::new();
        let wanted = Features::WP | Features::MOVE | Features::EVENT_UNMAP | Features::EVENT_REMAP;
        let uffd = if no_uffd {
            reasons.push(format!("userfaultfd disabled by {DISABLE_ENV}"));
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
                format!("UFFDIO_MOVE disabled by {DISABLE_ENV}")
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
                let opts = MapOptions {
                    no_huge: true,
                    ..Default::default()
                };
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
                let opts = MapOptions {
                    huge: true,
                    ..Default::default()
                };
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
        let zero = Mapping::anonymous(
            page_size(),
            MapOptions {
                populate: true,
                ..Default::default()
            },
        )
        .expect("one page for the zero page");
        let state = State {
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
        };
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
        VmStats {
            tcow_faults: c.tcow_faults.load(Ordering::Relaxed),
            tcow_copies: c.tcow_copies.load(Ordering::Relaxed),
            tcow_huge_copies: c.tcow_huge_copies.load(Ordering::Relaxed),
            tcow_copied_bytes: c.tcow_copied_bytes.load(Ordering::Relaxed),
            tcow_bounced: c.tcow_bounced.load(Ordering::Relaxed),
            tcow_discards: c.tcow_discards.load(Ordering::Relaxed),
            sleep_on_write: c.sleep_on_write.load(Ordering::Relaxed),
            wp_lifted: c.wp_lifted.load(Ordering::Relaxed),
            missing_faults: c.missing_faults.load(Ordering::Relaxed),
            pages_moved: c.pages_moved.load(Ordering::Relaxed),
            move_calls: c.move_calls.load(Ordering::Relaxed),
            move_fallback_copies: c.move_fallback_copies.load(Ordering::Relaxed),
            registrations: c.registrations.load(Ordering::Relaxed),
            unmaps: c.unmaps.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ----------------------------------------------------------------------------------------
    // Registration

    /// Make sure the full pages of `r` are registered for missing and write-protect faults.
    /// Called with the state lock held; issues only ioctls, touches no user memory.
    fn ensure_registered_locked(&self, st: &mut State, r: RawRange) -> Result<()> {
        let u = self.uffd.as_ref().expect("only with userfaultfd");
        st.clock += 1;
        let now = st.clock;
        // Already covered by one registration? (Registrations merge in the kernel; we keep them as
        // registered so that lookups stay exact.)
        if let Some(reg) = st.registered.iter_mut().find(|g| g.range.contains(&r)) {
            reg.last_use = now;
            return Ok(());
        }
        if st.registered.len() == MAX_REGISTRATIONS {
            self.evict_registration_locked(st)?;
        }
        u.register(
            r,
            RegisterMode {
                missing: true,
                wp: true,
            },
        )?;
        self.counters.registrations.fetch_add(1, Ordering::Relaxed);
        // Drop registrations that this one subsumes.
        st.registered.retain(|g| !r.contains(&g.range));
        st.registered.push(Registration {
            range: r,
            last_use: now,
        });
        Ok(())
    }

    fn evict_registration_locked(&self, st: &mut State) -> Result<()> {
        let u = self.uffd.as_ref().expect("only with userfaultfd");
        // The least recently used registration with no pending output or transition over it.
        let mut best: Option<usize> = None;
        for (i, g) in st.registered.iter().enumerate() {
            let busy = st
                .outputs
                .iter()
                .any(|o| o.range.intersect(&g.range).is_some())
                || st.transient.iter().any(|t| t.intersect(&g.range).is_some());
            if !busy && best.is_none_or(|b| st.registered[b].last_use > g.last_use) {
                best = Some(i);
            }
        }
        let Some(i) = best else {
            return Err(VmError::TooLarge {
                what: "registered ranges with pending I/O",
                value: st.registered.len() + 1,
                limit: MAX_REGISTRATIONS,
            });
        };
        let g = st.registered.swap_remove(i);
        // The range may have been unmapped meanwhile; that is fine.
        let _ = u.unregister(g.range);
        // The kernel keeps one registration per page: the pages this one shared with others
        // went with it. Register them again, or forget the others where that fails.
        let mut k = 0;
        while k < st.registered.len() {
            let lost = st.registered[k].range.intersect(&g.range);
            let mode = RegisterMode {
                missing: true,
                wp: true,
            };
            if lost.is_some_and(|l| u.register(l, mode).is_err()) {
                st.registered.swap_remove(k);
            } else {
                k += 1;
            }
        }
        Ok(())
    }

    /// Register the full pages of an application range so that pages can be moved into it and
    /// protected in it. Returns the registered (full-page) range, possibly empty.
    pub fn register_app(&self, r: RawRange) -> Result<RawRange> {
        self.check_live()?;
        let full = r.full_pages();
        if full.is_empty() || self.uffd.is_none() {
            return Ok(full);
        }
        let mut st = self.lock();
        self.ensure_registered_locked(&mut st, full)?;
        Ok(full)
    }

    /// A new private mapping registered for write-protect (not missing) faults: staging, scratch
    /// and region memory that pages are moved into.
    pub fn registered_mapping(&self, len: usize, opts: MapOptions) -> Result<Mapping> {
        self.check_live()?;
        let m = Mapping::anonymous(len, opts)?;
        match &self.uffd {
            Some(u) => register_wp(u, m),
            None => Ok(m),
        }
    }

    // ----------------------------------------------------------------------------------------
    // Page referencing for output (TCOW)

    /// Reference the pages of an output buffer for the duration of an output (Genie's *reference
    /// application pages*). With `protect`, also remove write access to its full pages (*read
    /// only*): the output then keeps the data of this moment whatever the application writes.
    ///
    /// Only full pages are protected; the caller copies the partial head and tail pages.
    ///
    /// A caller that queues the pages itself may reference them unprotected, queue them, and
    /// then [`OutputRef::protect`] them before returning to the application: the queueing then
    /// does not wait for the page-table work.
    pub fn reference_output(&'static self, buf: RawRange, protect: bool) -> Result<OutputRef> {
        let mut r = self.reference_unprotected(buf)?;
        if protect {
            r.protect()?;
        }
        Ok(r)
    }

    fn reference_unprotected(&'static self, buf: RawRange) -> Result<OutputRef> {
        self.check_live()?;
        let full = buf.full_pages();
        // Let the handler finish the events it has read: an unmap that returned before this
        // call (perhaps of an old mapping at this very address) must be on the books before
        // this output starts, or it would be taken for an unmap during this output.
        drop(self.batch.lock().unwrap_or_else(|p| p.into_inner()));
        let mut st = self.lock();
        if st.outputs.len() == MAX_OUTPUTS {
            return Err(VmError::TooLarge {
                what: "pending outputs",
                value: MAX_OUTPUTS + 1,
                limit: MAX_OUTPUTS,
            });
        }
        let id = st.next_id;
        st.next_id += 1;
        let since = st.unmap_gen;
        st.outputs.push(ActiveOutput {
            id,
            range: full,
            protected: false,
            since,
        });
        Ok(OutputRef {
            rt: self,
            id,
            range: full,
            protected: false,
            released: false,
        })
    }

    /// Write-protect the full pages of output `id` (see [`OutputRef::protect`]). The output is
    /// marked protected under the same lock hold as the `UFFDIO_WRITEPROTECT`, so that a write
    /// fault that follows finds it and resolves by TCOW.
    fn protect_output(&self, id: u64, full: RawRange) -> Result<()> {
        if full.is_empty() {
            return Ok(());
        }
        let mut st = self.lock();
        if !st.outputs.iter().any(|o| o.id == id) {
            return Err(VmError::Misuse {
                what: "protecting an output already released",
            });
        }
        match &self.uffd {
            Some(u) => {
                let (mut stale, mut busy) = (false, 0);
                loop {
                    self.ensure_registered_locked(&mut st, full)?;
                    match u.writeprotect(full, true, false) {
                        Ok(()) => break,
                        // Our record was stale: the old mapping was unmapped and its unmap
                        // event is not yet processed. Register the new mapping and retry.
                        Err(e) if e.errno() == Some(libc::ENOENT) && !stale => {
                            stale = true;
                            st.registered.retain(|g| g.range.intersect(&full).is_none());
                        }
                        // The address space is changing: an event awaits the handler
                        // thread, which may need the state lock to get to it.
                        Err(e) if e.errno() == Some(libc::EAGAIN) && busy < EAGAIN_RETRIES => {
                            busy += 1;
                            drop(st);
                            std::thread::yield_now();
                            st = self.lock();
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            None => crate::fallback::protect(id, full)?,
        }
        // The lock may have been given up above, but only `release_output` removes outputs
        // and the caller's `OutputRef` holds this one.
        if let Some(o) = st.outputs.iter_mut().find(|o| o.id == id) {
            o.protected = true;
        }
        Ok(())
    }

    fn release_output(&self, id: u64) {
        if !self.is_live() {
            return; // inherited through fork: the output is the parent's
        }
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(i) = st.outputs.iter().position(|o| o.id == id) else {
            return;
        };
        let out = st.outputs.swap_remove(i);
        // Pages this output had stashed: drop its reference to each slot.
        let mut k = 0;
        while k < st.stashed.len() {
            if st.stashed[k].output == id {
                let s = st.stashed.swap_remove(k);
                if s.huge {
                    st.hslot_refs[s.slot] -= 1;
                    if st.hslot_refs[s.slot] == 0 {
                        self.free_hslot_locked(st, s.slot);
                    }
                    continue;
                }
                st.slot_refs[s.slot] -= 1;
                if st.slot_refs[s.slot] == 0 {
                    self.free_slot_locked(st, s.slot);
                }
            } else {
                k += 1;
            }
        }
        drop(guard);
        if out.protected {
            self.unprotect_unless_needed(id, out.range, out.since);
        }
        let mut guard = self.lock();
        let st = &mut *guard;
        // Forget gone ranges no pending output overlaps any more.
        let State { gone, outputs, .. } = st;
        gone.retain(|(g, r)| {
            outputs
                .iter()
                .any(|o| o.since < *g && o.range.intersect(r).is_some())
        });
    }

    /// Lift the write protection of `range` (the pages of an output that is no longer listed)
    /// from the pages no listed protected output covers and that were not unmapped after
    /// generation `since` (those may hold other memory now, whose protection, if any, belongs to
    /// outputs that started after the unmap). Waking is what releases writers that slept on
    /// write. `EAGAIN` (an event awaits the handler thread, which may need the state lock) is
    /// retried with the lock given up, recomputing what to lift.
    fn unprotect_unless_needed(&self, id: u64, range: RawRange, since: u64) {
        let mut busy = 0;
        'again: loop {
            let mut guard = self.lock();
            let st = &mut *guard;
            let holes = st
                .outputs
                .iter()
                .filter(|o| o.protected)
                .map(|o| o.range)
                .chain(st.gone.iter().filter(|(g, _)| *g > since).map(|(_, r)| *r));
            let complete = complement_into(range, holes, &mut st.scratch);
            debug_assert!(complete, "scratch has room for every output plus one");
            match &self.uffd {
                Some(u) => {
                    for i in 0..st.scratch.len() {
                        let r = st.scratch[i];
                        if let Err(e) = u.writeprotect(r, false, false) {
                            if e.errno() == Some(libc::EAGAIN) && busy < EAGAIN_RETRIES {
                                busy += 1;
                                drop(guard);
                                std::thread::yield_now();
                                continue 'again;
                            }
                        }
                    }
                }
                None => crate::fallback::unprotect(id, &st.scratch),
            }
            return;
        }
    }

    fn free_slot_locked(&self, st: &mut State, slot: usize) {
        if let Some(stash) = &self.stash {
            let r = RawRange {
                addr: stash.addr() + slot * page_size(),
                len: page_size(),
            };
            // SAFETY-free: MADV_DONTNEED on our own stash page drops the moved original, which
            // no pending output references any more.
            let _ = stash.advise_range(r, libc::MADV_DONTNEED, "madvise(stash)");
        }
        st.free_slots.push(slot);
    }

    /// A huge stash slot whose original no output needs any more: kept populated as a spare for
    /// the next PMD TCOW (no zeroing, no first touch), or released beyond [`HSPARES_KEPT`].
    fn free_hslot_locked(&self, st: &mut State, slot: usize) {
        if st.hspare.len() < HSPARES_KEPT {
            st.hspare.push(slot);
            return;
        }
        if let Some(h) = &self.hstash {
            let r = RawRange {
                addr: h.addr() + slot * HUGE_PAGE_SIZE,
                len: HUGE_PAGE_SIZE,
            };
            let _ = h.advise_range(r, libc::MADV_DONTNEED, "madvise(huge stash)");
        }
        st.hfree.push(slot);
    }

    /// Whether TCOW at 2 MiB is available (a huge stash, `UFFDIO_MOVE`, THP and `PAGEMAP_SCAN`).
    pub fn huge_tcow(&self) -> bool {
        self.hstash.is_some() && self.caps.swap
    }

    /// Whether any pending output references a page of `r`.
    pub fn output_pending_over(&self, r: RawRange) -> bool {
        let st = self.lock();
        st.outputs.iter().any(|o| o.range.intersect(&r).is_some())
    }

    // ----------------------------------------------------------------------------------------
    // Page swapping and moving

    /// Move the pages of `src` into the empty, registered range `dst` (equal page-aligned
    /// lengths). Pages that cannot be moved are copied; returns the bytes copied that way.
    ///
    /// # Safety
    ///
    /// `dst` must be memory the caller owns for writing (a zcio mapping or an application buffer
    /// borrowed mutably for this call) and must currently be empty (its pages moved away);
    /// `src` must be memory the caller owns, which is left empty.
    pub unsafe fn move_range(&self, dst: RawRange, src: RawRange) -> Result<usize> {
        self.check_live()?;
        if dst.len != src.len {
            return Err(VmError::LengthMismatch {
                what: "move",
                left: dst.len,
                right: src.len,
            });
        }
        dst.check_pages("move destination")?;
        src.check_pages("move source")?;
        let Some(u) = self.uffd.as_ref().filter(|_| self.caps.swap) else {
            // SAFETY: the caller owns both ranges (contract above); copying preserves the bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(src.addr as *const u8, dst.addr as *mut u8, src.len)
            };
            return Ok(src.len);
        };
        let mut copied = 0;
        let mut off = 0;
        let mut retries = 0;
        while off < src.len {
            self.counters.move_calls.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the caller's contract covers exactly these ranges.
            let r =
                unsafe { u.move_pages(dst.addr + off, src.addr + off, src.len - off, true, false) };
            match r {
                Ok(n) => {
                    self.counters
                        .pages_moved
                        .fetch_add((n / page_size()) as u64, Ordering::Relaxed);
                    off += n;
                }
                Err(e) => {
                    self.counters
                        .pages_moved
                        .fetch_add((e.moved / page_size()) as u64, Ordering::Relaxed);
                    off += e.moved;
                    match e.errno {
                        // The page is pinned or shared (fork), or the address space is
                        // changing: copy this one page, leave the source as it is (the caller
                        // treats the source as free memory).
                        libc::EAGAIN if retries < EAGAIN_RETRIES => {
                            retries += 1;
                            std::thread::yield_now();
                            continue;
                        }
                        libc::EBUSY | libc::EAGAIN => {
                            // SAFETY: one page of the caller's ranges, content-preserving copy.
                            unsafe { self.fill_page(u, dst.addr + off, src.addr + off) };
                            self.counters
                                .move_fallback_copies
                                .fetch_add(1, Ordering::Relaxed);
                            copied += page_size();
                            off += page_size();
                        }
                        errno => {
                            return Err(VmError::sys(
                                "UFFDIO_MOVE",
                                std::io::Error::from_raw_os_error(errno),
                            ));
                        }
                    }
                }
            }
        }
        Ok(copied)
    }

    /// Swap the pages of an application range with those of a staging range, through an empty
    /// scratch range (all three page-aligned and of equal length). Afterwards `app` shows what
    /// `staging` showed, `scratch` holds the application's old pages, and `staging` is empty.
    /// Pages under a pending output are not swapped but copied (the output must keep them).
    ///
    /// Returns the bytes copied instead of moved.
    ///
    /// # Safety
    ///
    /// `app` must be the full pages of an application buffer borrowed mutably by the caller for
    /// this call and registered with [`VmRuntime::register_app`]; `staging` and `scratch` must be
    /// runtime-registered mappings the caller owns, `scratch` empty.
    pub unsafe fn swap(
        &self,
        app: RawRange,
        staging: RawRange,
        scratch: RawRange,
    ) -> Result<usize> {
        self.check_live()?;
        if app.len != staging.len || app.len != scratch.len {
            return Err(VmError::LengthMismatch {
                what: "swap",
                left: app.len,
                right: staging.len,
            });
        }
        if app.is_empty() {
            return Ok(0);
        }
        app.check_pages("swapped application range")?;
        if !self.caps.swap {
            // SAFETY: caller owns app for writing and staging for reading.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    staging.addr as *const u8,
                    app.addr as *mut u8,
                    app.len,
                )
            };
            return Ok(app.len);
        }
        // Which runs of the application range are free of pending outputs? Computed into
        // vectors allocated before taking the lock (allocation under it could fault).
        let mut cap = 8;
        let (runs, busy) = loop {
            let mut runs = Vec::with_capacity(cap);
            let mut busy = Vec::with_capacity(cap);
            let mut st = self.lock();
            if st.outputs.len() + 2 > cap {
                cap = 2 * (st.outputs.len() + 2);
                continue;
            }
            let outs = st.outputs.iter().map(|o| o.range);
            complement_into(app, outs, &mut runs);
            complement_into(app, runs.iter().copied(), &mut busy);
            if st.transient.len() + runs.len() > MAX_TRANSIENT {
                return Err(VmError::TooLarge {
                    what: "concurrent swaps",
                    value: st.transient.len() + runs.len(),
                    limit: MAX_TRANSIENT,
                });
            }
            st.transient.extend(runs.iter().copied());
            break (runs, busy);
        };
        let mut copied = 0;
        let result = (|| -> Result<()> {
            for r in &runs {
                let off = r.addr - app.addr;
                let scr = RawRange {
                    addr: scratch.addr + off,
                    len: r.len,
                };
                let stg = RawRange {
                    addr: staging.addr + off,
                    len: r.len,
                };
                // SAFETY: the caller's contract covers app, staging and scratch.
                copied += unsafe { self.swap_run(*r, stg, scr)? };
            }
            Ok(())
        })();
        {
            let mut st = self.lock();
            st.transient.retain(|t| !runs.contains(t));
        }
        result?;
        for b in busy {
            let off = b.addr - app.addr;
            // SAFETY: the caller owns app for writing; the write may take TCOW faults, which the
            // handler resolves (this thread holds no lock).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (staging.addr + off) as *const u8,
                    b.addr as *mut u8,
                    b.len,
                )
            };
            copied += b.len;
        }
        Ok(copied)
    }

    /// Put a copy of the page at `src` at `dst`, whether `dst` is populated or empty. An empty
    /// page is filled with `UFFDIO_COPY` (a plain write to it could fault into the handler, which
    /// leaves pages in transition alone: the writer would wait for itself); `EAGAIN` (the
    /// address space is changing, an event awaits the handler thread) is retried.
    ///
    /// # Safety
    /// `dst` is one page the caller owns for writing, in a range registered with this runtime's
    /// userfaultfd; `src` is one readable page.
    unsafe fn fill_page(&self, u: &Userfaultfd, dst: usize, src: usize) {
        let ps = page_size();
        // SAFETY: the caller's contract.
        if retry_eagain(VmError::errno, || unsafe { u.copy(dst, src, ps, false) }).is_ok() {
            return;
        }
        // EEXIST: the page is populated, so a plain write cannot fault.
        // SAFETY: the caller's contract; the page is populated.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, ps) };
    }

    /// One run of [`VmRuntime::swap`]: app pages out to scratch, staging pages in. A page that
    /// cannot be moved out (pinned, or shared with a forked child) stays where it is and gets the
    /// staging bytes by copy; writing it breaks the sharing, so a child never sees the input.
    ///
    /// # Safety
    /// As for [`VmRuntime::swap`].
    unsafe fn swap_run(
        &self,
        app: RawRange,
        staging: RawRange,
        scratch: RawRange,
    ) -> Result<usize> {
        let u = self.uffd.as_ref().expect("swap_run only with UFFDIO_MOVE");
        let ps = page_size();
        let mut copied = 0;
        // Phase 1: application pages out. `stay` marks pages that could not be moved.
        let mut off = 0;
        let mut stay_from = Vec::new();
        let mut retries = 0;
        while off < app.len {
            self.counters.move_calls.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the caller owns app for writing and scratch (empty) for writing.
            match unsafe {
                u.move_pages(
                    scratch.addr + off,
                    app.addr + off,
                    app.len - off,
                    true,
                    true,
                )
            } {
                Ok(n) => {
                    self.counters
                        .pages_moved
                        .fetch_add((n / ps) as u64, Ordering::Relaxed);
                    off += n;
                }
                Err(e) => {
                    self.counters
                        .pages_moved
                        .fetch_add((e.moved / ps) as u64, Ordering::Relaxed);
                    off += e.moved;
                    match e.errno {
                        // The address space is changing: an event awaits the handler thread.
                        libc::EAGAIN if retries < EAGAIN_RETRIES => {
                            retries += 1;
                            std::thread::yield_now();
                        }
                        libc::EBUSY | libc::EAGAIN => {
                            stay_from.push(off);
                            off += ps;
                        }
                        errno => {
                            // Put back what moved out: the application keeps its bytes.
                            // SAFETY: the pages of [0, off) that moved are in scratch, their
                            // places in app empty; both ranges are the caller's.
                            unsafe { self.unswap_out(u, app, scratch, off, &stay_from) };
                            return Err(VmError::sys(
                                "UFFDIO_MOVE(app out)",
                                std::io::Error::from_raw_os_error(errno),
                            ));
                        }
                    }
                }
            }
        }
        // Phase 2: staging pages in, run by run between the pages that stayed.
        let mut start = 0;
        for end in stay_from.iter().copied().chain(std::iter::once(app.len)) {
            let mut off = start;
            while off < end {
                self.counters.move_calls.fetch_add(1, Ordering::Relaxed);
                // SAFETY: the app pages of [start, end) are empty after phase 1; staging is the caller's.
                match unsafe {
                    u.move_pages(app.addr + off, staging.addr + off, end - off, true, false)
                } {
                    Ok(n) => {
                        self.counters
                            .pages_moved
                            .fetch_add((n / ps) as u64, Ordering::Relaxed);
                        off += n;
                    }
                    Err(e) => {
                        self.counters
                            .pages_moved
                            .fetch_add((e.moved / ps) as u64, Ordering::Relaxed);
                        off += e.moved;
                        if e.errno == libc::EAGAIN && retries < EAGAIN_RETRIES {
                            retries += 1;
                            std::thread::yield_now();
                            continue;
                        }
                        // The app page got populated meanwhile (a concurrent touch) or the staging
                        // page is pinned: copy this page.
                        // UFFDIO_COPY fills an empty page atomically and wakes anyone waiting on
                        // it (a plain write would fault into the handler, which leaves transient
                        // pages alone); a page populated meanwhile takes a plain copy.
                        // SAFETY: one page of the caller's ranges.
                        unsafe { self.fill_page(u, app.addr + off, staging.addr + off) };
                        self.counters
                            .move_fallback_copies
                            .fetch_add(1, Ordering::Relaxed);
                        copied += ps;
                        off += ps;
                    }
                }
            }
            if end < app.len {
                // SAFETY: the page that stayed is the caller's; copying into it breaks COW sharing.
                unsafe { self.fill_page(u, app.addr + end, staging.addr + end) };
                self.counters
                    .move_fallback_copies
                    .fetch_add(1, Ordering::Relaxed);
                copied += ps;
            }
            start = end + ps;
        }
        Ok(copied)
    }

    /// Undo phase 1 of [`VmRuntime::swap_run`] up to `upto`: the application pages that moved
    /// out to scratch (all of `[0, upto)` but the pages at `stayed`) move back, or are copied
    /// back where the move fails.
    ///
    /// # Safety
    /// As for [`VmRuntime::swap`]; the pages of `app` that moved are empty, their scratch
    /// counterparts hold them.
    unsafe fn unswap_out(
        &self,
        u: &Userfaultfd,
        app: RawRange,
        scratch: RawRange,
        upto: usize,
        stayed: &[usize],
    ) {
        let ps = page_size();
        let mut off = 0;
        while off < upto {
            if stayed.contains(&off) {
                off += ps;
                continue;
            }
            // SAFETY: the caller's contract: this app page is empty, its scratch page holds it.
            let back =
                unsafe { u.move_pages(app.addr + off, scratch.addr + off, ps, false, false) };
            if back.is_err() {
                // SAFETY: as above; a copy where the page cannot move.
                unsafe { self.fill_page(u, app.addr + off, scratch.addr + off) };
                self.counters
                    .move_fallback_copies
                    .fetch_add(1, Ordering::Relaxed);
            }
            off += ps;
        }
    }

    /// Reverse copyout of one partially filled page (paper 000, §5.2, Figure 2): complete the
    /// staging page with the application's bytes outside `data` (offsets within the page), then
    /// swap it into the application's page. The application page is write-protected and marked
    /// in transition meanwhile, so a write by another thread to the bytes outside `data` waits
    /// and lands in the new page instead of being lost. Returns the bytes the CPU copied to do it
    /// (the application's bytes that complete the page, and the whole page where the staging
    /// page could not be moved in and was copied instead), or `None`, having changed nothing,
    /// where the page cannot be swapped (under a pending output, pinned or shared with a forked
    /// child, no `UFFDIO_MOVE`): the caller then copies `data` out.
    ///
    /// # Safety
    ///
    /// `app_page` is a page of this process whose bytes at `data` belong to an application buffer
    /// borrowed mutably by the caller; `staging_page` and `scratch_page` are pages of
    /// runtime-registered mappings the caller owns, `scratch_page` empty.
    pub unsafe fn reverse_copyout(
        &self,
        app_page: usize,
        data: std::ops::Range<usize>,
        staging_page: usize,
        scratch_page: usize,
    ) -> Result<Option<usize>> {
        self.check_live()?;
        let ps = page_size();
        let Some(u) = self.uffd.as_ref().filter(|_| self.caps.swap) else {
            return Ok(None);
        };
        let pr = RawRange {
            addr: app_page,
            len: ps,
        };
        pr.check_pages("reverse copyout page")?;
        if data.start > data.end || data.end > ps {
            return Err(VmError::OutOfBounds {
                what: "reverse copyout data",
                start: data.start,
                end: data.end,
                bound_start: 0,
                bound_end: ps,
            });
        }
        // 1. Protect the page and mark it in transition.
        {
            let mut busy = 0;
            let mut st = self.lock();
            loop {
                if st.outputs.iter().any(|o| o.range.intersect(&pr).is_some())
                    || st.transient.len() == st.transient.capacity()
                {
                    return Ok(None);
                }
                self.ensure_registered_locked(&mut st, pr)?;
                match u.writeprotect(pr, true, false) {
                    Ok(()) => break,
                    Err(e) if e.errno() == Some(libc::EAGAIN) && busy < EAGAIN_RETRIES => {
                        busy += 1;
                        drop(st);
                        std::thread::yield_now();
                        st = self.lock();
                    }
                    Err(_) => return Ok(None),
                }
            }
            st.transient.push(pr);
        }
        // 2. Complete the staging page with the application's bytes around the data.
        // SAFETY: the page is write-protected, so the bytes read are stable; both pages are
        // readable (app) and writable (staging) per the contract, and the ranges lie in them.
        unsafe {
            std::ptr::copy_nonoverlapping(
                app_page as *const u8,
                staging_page as *mut u8,
                data.start,
            );
            std::ptr::copy_nonoverlapping(
                (app_page + data.end) as *const u8,
                (staging_page + data.end) as *mut u8,
                ps - data.end,
            );
        }
        // 3. Swap: the application page out to scratch (a page pinned or shared with a child
        // stays), the staging page in.
        let move_page = |dst: usize, src: usize, dontwake: bool| {
            retry_eagain(
                |e: &crate::uffd::MoveError| Some(e.errno),
                || {
                    self.counters.move_calls.fetch_add(1, Ordering::Relaxed);
                    // SAFETY: the caller's contract covers the three pages; `dst` is empty
                    // (scratch, or the app page once moved out).
                    unsafe { u.move_pages(dst, src, ps, false, dontwake) }
                },
            )
        };
        let out = move_page(scratch_page, app_page, true).is_ok();
        // The completion copy of step 2.
        let mut copied = ps - (data.end - data.start);
        if out {
            self.counters.pages_moved.fetch_add(1, Ordering::Relaxed);
            if move_page(app_page, staging_page, false).is_ok() {
                self.counters.pages_moved.fetch_add(1, Ordering::Relaxed);
            } else {
                copied += ps;
                // SAFETY: as above; fills the empty page with a copy and wakes waiters.
                unsafe { self.fill_page(u, app_page, staging_page) };
                self.counters
                    .move_fallback_copies
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        // 4. Out of transition; lift the protection (of the old page if it stayed), waking
        // writers that waited, and wake readers that met the page empty.
        self.lock().transient.retain(|t| *t != pr);
        let _ = u.wake(pr);
        let _ = retry_eagain(VmError::errno, || u.writeprotect(pr, false, false));
        Ok(out.then_some(copied))
    }

    // ----------------------------------------------------------------------------------------
    // Region checks

    /// Watch `r`, a mapping made by [`VmRuntime::registered_mapping`], for unmapping by anyone
    /// (the region check of paper 000, §6.2.1: a cached region the application removed must not
    /// be reused). Returns `None` when it cannot be watched (no userfaultfd, or too many
    /// watches): a probe of the address range could not tell a new mapping placed at the same
    /// address from the old one, so such a range must not be reused.
    pub fn watch(&self, r: RawRange) -> Option<WatchId> {
        self.uffd.as_ref().filter(|_| self.is_live())?;
        // Let the handler finish the events it has read: the unmap of an earlier mapping at
        // this very address returns once its event is read, not handled, and handled after
        // this watch it would be taken for the unmapping of this range.
        drop(self.batch.lock().unwrap_or_else(|p| p.into_inner()));
        let mut st = self.lock();
        if st.watches.len() == MAX_WATCHES {
            return None;
        }
        let id = self.next_watch.fetch_add(1, Ordering::Relaxed);
        st.watches.push(Watch {
            id,
            range: r,
            gone: false,
        });
        Some(WatchId(id))
    }

    /// Whether (part of) a watched range was unmapped since [`VmRuntime::watch`].
    pub fn watch_gone(&self, w: WatchId) -> bool {
        // An unmap whose event the handler has read is handled before this lock is ours.
        drop(self.batch.lock().unwrap_or_else(|p| p.into_inner()));
        let st = self.lock();
        st.watches
            .iter()
            .find(|x| x.id == w.0)
            .is_none_or(|x| x.gone)
    }

    /// Stop watching.
    pub fn unwatch(&self, w: WatchId) {
        self.lock().watches.retain(|x| x.id != w.0);
    }

    // ----------------------------------------------------------------------------------------
    // The handler thread

    fn handler_loop(&'static self, fd: i32) {
        let mut events: Vec<Event> = Vec::with_capacity(64);
        // Write-protect faults whose resolution said EAGAIN: retried after the next read.
        let mut deferred: Vec<Deferred> = Vec::with_capacity(256);
        loop {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let timeout = if deferred.is_empty() { -1 } else { 1 };
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, timeout) };
            if rc < 0 {
                continue;
            }
            events.clear();
            let u = self
                .uffd
                .as_ref()
                .expect("handler runs only with userfaultfd");
            let _batch = self.batch.lock().unwrap_or_else(|p| p.into_inner());
            if u.read_events(&mut events).is_err() {
                continue;
            }
            let retry = deferred.len();
            for i in 0..retry {
                let (page, held) = deferred[i];
                if let Some(d) = self.handle_wp(u, page, held) {
                    deferred.push(d);
                }
            }
            deferred.drain(..retry);
            for &ev in &events {
                if let Some(d) = self.handle(u, ev) {
                    deferred.push(d);
                }
            }
        }
    }

    /// Handle one event; returns a page whose write-protect fault must be handled again later.
    fn handle(&self, u: &Userfaultfd, ev: Event) -> Option<Deferred> {
        let ps = page_size();
        match ev {
            Event::PageFault { addr, wp: true, .. } => {
                let page = addr & !(ps - 1);
                return self.handle_wp(u, page, Held::Nothing);
            }
            Event::PageFault {
                addr,
                write,
                wp: false,
            } => {
                let page = RawRange {
                    addr: addr & !(ps - 1),
                    len: ps,
                };
                let transient = self.lock().transient.iter().any(|t| t.contains(&page));
                if transient {
                    return None; // the swap in progress fills the page and wakes the waiter
                }
                self.counters.missing_faults.fetch_add(1, Ordering::Relaxed);
                let r = if write {
                    // SAFETY: page is a registered, missing page; the zero page is ours and readable.
                    unsafe { u.copy(page.addr, self.zero.addr(), ps, false) }.map(|_| ())
                } else {
                    u.zeropage(page)
                };
                if r.is_err() {
                    let _ = u.wake(page); // populated meanwhile: just wake the waiter
                }
            }
            Event::Unmap { start, end } => self.forget(RawRange {
                addr: start,
                len: end - start,
            }),
            Event::Remap { from, len, .. } => self.forget(RawRange { addr: from, len }),
            Event::Remove { .. } | Event::Other(_) => {}
        }
        None
    }

    fn forget(&self, r: RawRange) {
        self.counters.unmaps.fetch_add(1, Ordering::Relaxed);
        let mut guard = self.lock();
        let st = &mut *guard;
        let mut i = 0;
        while i < st.registered.len() {
            let g = st.registered[i].range;
            if g.intersect(&r).is_some() {
                st.registered.swap_remove(i);
                // What remains registered in the kernel on either side stays known to us.
                let left = RawRange {
                    addr: g.addr,
                    len: r.addr.saturating_sub(g.addr).min(g.len),
                };
                let right_start = r.end().max(g.addr);
                let right = RawRange {
                    addr: right_start,
                    len: g.end().saturating_sub(right_start),
                };
                for rest in [left, right] {
                    if !rest.is_empty() && st.registered.len() < MAX_REGISTRATIONS {
                        st.registered.push(Registration {
                            range: rest,
                            last_use: 0,
                        });
                    }
                }
            } else {
                i += 1;
            }
        }
        let g = st.unmap_gen + 1;
        if st.outputs.iter().any(|o| o.range.intersect(&r).is_some())
            && st.gone.len() < st.gone.capacity()
        {
            st.gone.push((g, r));
        }
        for w in st.watches.iter_mut() {
            if w.range.intersect(&r).is_some() {
                w.gone = true;
            }
        }
        st.unmap_gen = g;
    }

    /// Resolve a write-protect fault on `page` by TCOW; `held` says how far an earlier attempt
    /// got. Returns what must be tried again after the handler has read more events or waited
    /// a little (the address space was changing: `EAGAIN`; the page cannot be moved yet).
    fn handle_wp(&self, u: &Userfaultfd, page: usize, held: Held) -> Option<Deferred> {
        let ps = page_size();
        let pr = RawRange {
            addr: page,
            len: ps,
        };
        let mut guard = self.lock();
        let st = &mut *guard;
        match held {
            Held::Slot(slot) => return self.finish_tcow(u, st, page, Some(slot)),
            Held::Bounce => return self.finish_tcow(u, st, page, None),
            Held::Nothing | Held::Waiting => {}
        }
        if st.transient.iter().any(|t| t.contains(&pr)) {
            // The page is being replaced (reverse copyout): the write waits for the new page.
            return Some((page, held));
        }
        let needing = st
            .outputs
            .iter()
            .filter(|o| needs_page(o, &st.stashed, page))
            .count();
        if needing == 0 {
            // No pending output needs this page as it is: lift the protection (wakes the writer).
            self.counters.wp_lifted.fetch_add(1, Ordering::Relaxed);
            drop(guard);
            if let Err(e) = u.writeprotect(pr, false, false) {
                if e.errno() == Some(libc::EAGAIN) {
                    return Some((page, held));
                }
            }
            return None;
        }
        if held == Held::Nothing {
            self.counters.tcow_faults.fetch_add(1, Ordering::Relaxed);
        }
        let room = st.stashed.len() + st.outputs.len() <= st.stashed.capacity();
        if room {
            match self.tcow_pmd(u, st, page) {
                PmdTcow::Done => return None,
                PmdTcow::Again => return Some((page, held)),
                PmdTcow::NotHere => {}
            }
        }
        let Some(stash) = self.stash.as_ref() else {
            // Sleep on write: the output's completion lifts the protection and wakes the writer.
            self.counters.sleep_on_write.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if !self.caps.swap {
            // No UFFDIO_MOVE: TCOW by copy.
            return self.tcow_by_discard(u, st, page, held);
        }
        // A stash slot keeps the original mapped until the output completes; without one (all
        // taken, or no room to record it), the bounce slot takes it for the copy only: the
        // outputs' own page references keep the original alive.
        let room = st.stashed.len() + needing <= st.stashed.capacity();
        let slot = if room { st.free_slots.pop() } else { None };
        if slot.is_none() && st.bounce.is_some() {
            return Some((page, held)); // the bounce slot is in use: after it
        }
        let slot_addr = stash.addr() + slot.unwrap_or(BOUNCE_SLOT) * ps;
        // SAFETY: TCOW step 1: move the original page out of the application's address space
        // into our empty, registered stash (or bounce) slot. Pending outputs reference the
        // physical page, so they keep the original. The faulting thread is blocked; other threads
        // touching the page in the window take a missing-page fault, which step 2 resolves and
        // wakes.
        if let Err(e) = unsafe { u.move_pages(slot_addr, page, ps, false, true) } {
            if let Some(slot) = slot {
                st.free_slots.push(slot);
            }
            if e.errno == libc::EAGAIN {
                return Some((page, held));
            }
            // Pinned, shared since a fork, or a page of a huge page the wire still references:
            // copy it instead of moving it.
            return self.tcow_by_discard(u, st, page, held);
        }
        if slot.is_none() {
            st.bounce = Some(Bounce::Moved);
        }
        self.finish_tcow(u, st, page, slot)
    }

    /// TCOW at 2 MiB for a write fault on `page`: where its PMD is PMD-mapped and every
    /// protected output over it covers it whole, move the huge page out to a huge stash slot
    /// (the outputs' references keep the original), copy it into a spare huge page and move that
    /// in, writable, at the PMD (which wakes the writer). One fault, one 2 MiB copy and two PMD
    /// moves, where the 4 KiB path would fail (the kernel cannot split a referenced huge page).
    fn tcow_pmd(&self, u: &Userfaultfd, st: &mut State, page: usize) -> PmdTcow {
        let Some(h) = self.hstash.as_ref().filter(|_| self.caps.swap) else {
            return PmdTcow::NotHere;
        };
        let base = page & !(HUGE_PAGE_SIZE - 1);
        let pmd = RawRange {
            addr: base,
            len: HUGE_PAGE_SIZE,
        };
        // Every protected output touching the PMD covers it whole and has stashed none of it.
        let fits = st.outputs.iter().filter(|o| o.protected).all(|o| {
            o.range.intersect(&pmd).is_none()
                || (o.range.contains(&pmd)
                    && !st
                        .stashed
                        .iter()
                        .any(|s| s.output == o.id && pmd.contains_addr(s.page)))
        });
        if !fits || st.transient.iter().any(|t| t.intersect(&pmd).is_some()) {
            return PmdTcow::NotHere;
        }
        if !crate::huge::is_pmd_mapped(base) {
            return PmdTcow::NotHere;
        }
        // A spare (populated) slot for the copy, an empty one for the original.
        let Some(orig) = st.hfree.pop() else {
            return PmdTcow::NotHere;
        };
        let slot_addr = |s: usize| h.addr() + s * HUGE_PAGE_SIZE;
        let spare = match st.hspare.pop() {
            Some(s) => s,
            None => match st.hfree.pop() {
                Some(s) => {
                    let r = RawRange {
                        addr: slot_addr(s),
                        len: HUGE_PAGE_SIZE,
                    };
                    if h.advise_range(r, libc::MADV_POPULATE_WRITE, "madvise(huge spare)")
                        .is_err()
                    {
                        st.hfree.push(s);
                        st.hfree.push(orig);
                        return PmdTcow::NotHere;
                    }
                    s
                }
                None => {
                    st.hfree.push(orig);
                    return PmdTcow::NotHere;
                }
            },
        };
        let give_back = |st: &mut State| {
            st.hfree.push(orig);
            st.hspare.push(spare);
        };
        // SAFETY: step 1, the original PMD out of the application's address space into our
        // empty huge stash slot. The faulting thread is blocked; another thread touching the PMD
        // meanwhile takes a missing fault that the handler serves after this call (by then the
        // copy is in place, so it is only woken).
        if let Err(e) = unsafe { u.move_pages(slot_addr(orig), base, HUGE_PAGE_SIZE, false, true) }
        {
            if e.moved > 0 {
                // Split under us and moved in part: put back what moved.
                // SAFETY: the pages just moved return to their (now empty) places.
                let _ = unsafe { u.move_pages(base, slot_addr(orig), e.moved, true, true) };
            }
            give_back(st);
            return if e.errno == libc::EAGAIN {
                PmdTcow::Again
            } else {
                PmdTcow::NotHere
            };
        }
        // Step 2: the copy, in the spare huge page.
        // SAFETY: both slots are ours and populated (the original moved in, the spare faulted
        // in); nobody else writes them; 2 MiB each, not overlapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                slot_addr(orig) as *const u8,
                slot_addr(spare) as *mut u8,
                HUGE_PAGE_SIZE,
            )
        };
        // Step 3: the copy in at the PMD, writable; this wakes the writer.
        // SAFETY: the PMD is empty since step 1; the spare slot is ours.
        let moved_in = retry_eagain(
            |e: &crate::uffd::MoveError| Some(e.errno),
            || unsafe { u.move_pages(base, slot_addr(spare), HUGE_PAGE_SIZE, false, false) },
        );
        if moved_in.is_ok() {
            st.hfree.push(spare);
        } else {
            // SAFETY: fill the empty PMD with a copy of the original page by page (4 KiB pages:
            // the application loses the huge page here, not its bytes), waking the writer.
            let filled = unsafe { u.copy(base, slot_addr(orig), HUGE_PAGE_SIZE, false) };
            st.hspare.push(spare);
            if filled.is_err() {
                // SAFETY: undo step 1: the original back to its empty place.
                let _ = unsafe { u.move_pages(base, slot_addr(orig), HUGE_PAGE_SIZE, true, false) };
                st.hfree.push(orig);
                return PmdTcow::NotHere;
            }
        }
        self.counters
            .tcow_huge_copies
            .fetch_add(1, Ordering::Relaxed);
        self.counters
            .tcow_copied_bytes
            .fetch_add(HUGE_PAGE_SIZE as u64, Ordering::Relaxed);
        let mut refs = 0;
        for i in 0..st.outputs.len() {
            let o = st.outputs[i];
            if o.protected && o.range.contains(&pmd) {
                st.stashed.push(Stashed {
                    output: o.id,
                    page: base,
                    slot: orig,
                    huge: true,
                });
                refs += 1;
            }
        }
        st.hslot_refs[orig] = refs;
        if refs == 0 {
            self.free_hslot_locked(st, orig);
        }
        PmdTcow::Done
    }

    /// TCOW step 1 where the original cannot be moved out (`EBUSY`: pinned, shared with a
    /// child since a fork, a 4 KiB page of a huge page the wire references): its bytes are copied
    /// to the bounce slot and the application's mapping of the page dropped. What references the
    /// physical page (the outputs, a child, a pin) keeps the original; step 2 installs the copy.
    /// The writer waits only if the bounce slot is busy, never for an output's completion. A page
    /// pinned for long (a buffer registered for I/O) keeps the original there: I/O through that
    /// pin no longer sees this process's later writes to the page.
    fn tcow_by_discard(
        &self,
        u: &Userfaultfd,
        st: &mut State,
        page: usize,
        held: Held,
    ) -> Option<Deferred> {
        let ps = page_size();
        let pr = RawRange {
            addr: page,
            len: ps,
        };
        let stash = self.stash.as_ref().expect("TCOW copies only with a stash");
        if st.bounce.is_some() || st.transient.len() == st.transient.capacity() {
            if held == Held::Nothing {
                self.counters.sleep_on_write.fetch_add(1, Ordering::Relaxed);
            }
            return Some((page, Held::Waiting));
        }
        let bounce = stash.addr() + BOUNCE_SLOT * ps;
        // SAFETY: the application page is present and write-protected, so its bytes are stable
        // and reading them cannot fault; the bounce slot is ours and empty (a plain write
        // populates it: the stash is registered for write-protect faults only).
        unsafe { std::ptr::copy_nonoverlapping(page as *const u8, bounce as *mut u8, ps) };
        // In transition: another thread touching the page before the copy is in waits for it.
        st.transient.push(pr);
        // SAFETY: drops this process's mapping of one page of a registered application range;
        // its bytes are in the bounce slot and go back in step 2, and a missing fault meanwhile
        // waits (the page is in transition). The physical page lives on for whoever references it.
        let rc = unsafe { libc::madvise(page as *mut libc::c_void, ps, libc::MADV_DONTNEED) };
        if rc != 0 {
            st.transient.retain(|t| *t != pr);
            let _ = stash.advise_range(
                RawRange {
                    addr: bounce,
                    len: ps,
                },
                libc::MADV_DONTNEED,
                "madvise(bounce)",
            );
            if held == Held::Nothing {
                self.counters.sleep_on_write.fetch_add(1, Ordering::Relaxed);
            }
            return Some((page, Held::Waiting));
        }
        self.counters
            .tcow_copied_bytes
            .fetch_add(ps as u64, Ordering::Relaxed);
        st.bounce = Some(Bounce::Discarded);
        self.finish_tcow(u, st, page, None)
    }

    /// TCOW step 2 and its bookkeeping, for a page whose original is in stash slot `slot`, or
    /// in the bounce slot (`None`), which is emptied once the copy is in.
    fn finish_tcow(
        &self,
        u: &Userfaultfd,
        st: &mut State,
        page: usize,
        slot: Option<usize>,
    ) -> Option<Deferred> {
        let ps = page_size();
        let pr = RawRange {
            addr: page,
            len: ps,
        };
        let stash = self.stash.as_ref().expect("TCOW moves only with a stash");
        let slot_addr = stash.addr() + slot.unwrap_or(BOUNCE_SLOT) * ps;
        // SAFETY: TCOW step 2: install a private, writable copy of the original at the faulting
        // address (empty since step 1); this wakes the writer.
        if let Err(e) = unsafe { u.copy(page, slot_addr, ps, false) } {
            if e.errno() == Some(libc::EAGAIN) {
                // The page stays empty until the retry: mark it in transition so that a missing
                // fault on it waits for the retry instead of getting a zero page.
                if !st.transient.contains(&pr) {
                    st.transient.push(pr);
                }
                return Some((page, slot.map_or(Held::Bounce, Held::Slot)));
            }
            if !self.caps.swap {
                // Nothing to move back with: the page stays in transition and the copy is tried
                // again (its bytes are in the bounce slot).
                if !st.transient.contains(&pr) {
                    st.transient.push(pr);
                }
                return Some((page, Held::Bounce));
            }
            // SAFETY: undo step 1, moving our stash page back to the still-empty application page.
            let _ = unsafe { u.move_pages(page, slot_addr, ps, false, true) };
            st.transient.retain(|t| *t != pr);
            match slot {
                Some(slot) => st.free_slots.push(slot),
                None => st.bounce = None,
            }
            self.counters.sleep_on_write.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        st.transient.retain(|t| *t != pr);
        self.counters.tcow_copies.fetch_add(1, Ordering::Relaxed);
        self.counters
            .tcow_copied_bytes
            .fetch_add(ps as u64, Ordering::Relaxed);
        let Some(slot) = slot else {
            // The outputs' references keep the original; our mapping of it goes.
            let r = RawRange {
                addr: slot_addr,
                len: ps,
            };
            let _ = stash.advise_range(r, libc::MADV_DONTNEED, "madvise(bounce)");
            let counter = match st.bounce.take() {
                Some(Bounce::Discarded) => &self.counters.tcow_discards,
                _ => &self.counters.tcow_bounced,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let mut refs = 0;
        for i in 0..st.outputs.len() {
            let o = st.outputs[i];
            if needs_page(&o, &st.stashed, page) {
                st.stashed.push(Stashed {
                    output: o.id,
                    page,
                    slot,
                    huge: false,
                });
                refs += 1;
            }
        }
        if refs == 0 {
            // Every output that needed the original completed while the copy was deferred.
            self.free_slot_locked(st, slot);
        } else {
            st.slot_refs[slot] = refs;
        }
        None
    }
}

/// Register `m` with `u` for write-protect faults only (not missing ones): memory of zcio's own
/// that pages are moved into and out of.
fn register_wp(u: &Userfaultfd, m: Mapping) -> Result<Mapping> {
    u.register(
        m.range(),
        RegisterMode {
            missing: false,
            wp: true,
        },
    )?;
    Ok(m)
}

/// What an attempt at TCOW on a whole PMD came to.
enum PmdTcow {
    /// The huge page is in the huge stash, a copy of it at the faulting PMD; the writer woken.
    Done,
    /// The address space was changing (`EAGAIN`): try the fault again later.
    Again,
    /// Not a case for 2 MiB (not PMD-mapped, not wholly under the outputs, no huge slot, the
    /// kernel refused the move): the 4 KiB path handles the fault.
    NotHere,
}

/// A write-protect fault to handle again: the page, and the stash slot holding its original if
/// TCOW step 1 is done.
type Deferred = (usize, Held);

/// How far a write-protect fault that must be handled again got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Nothing done: the address space was changing (`EAGAIN`); start over.
    Nothing,
    /// TCOW step 1 done: the original is in this stash slot.
    Slot(usize),
    /// TCOW step 1 done through the bounce slot (no stash slot was free).
    Bounce,
    /// The original could not be moved and the bounce slot was busy; the write waits (counted
    /// once) and TCOW is tried again about every millisecond.
    Waiting,
}

/// What the bounce slot holds between TCOW steps 1 and 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bounce {
    /// The original, moved there (every stash slot was taken).
    Moved,
    /// A copy of the original, whose page could not be moved ([`VmRuntime::tcow_by_discard`]).
    Discarded,
}

/// Whether pending output `o` still needs `page` as it is: it protects the page and has not
/// already had it moved to the stash (a page installed by TCOW is a private copy).
fn needs_page(o: &ActiveOutput, stashed: &[Stashed], page: usize) -> bool {
    o.protected
        && o.range.contains(&RawRange {
            addr: page,
            len: page_size(),
        })
        && !stashed.iter().any(|s| s.output == o.id && s.covers(page))
}

/// A range watched for unmapping ([`VmRuntime::watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchId(u64);

/// A pending output's reference to its pages. Releasing it (explicitly or by dropping) is
/// Genie's *unreference application pages*: protection is lifted from pages no other pending
/// output protects, and TCOW stash slots held for it are freed.
#[derive(Debug)]
pub struct OutputRef {
    rt: &'static VmRuntime,
    id: u64,
    range: RawRange,
    protected: bool,
    released: bool,
}

impl OutputRef {
    /// The full pages referenced.
    pub fn range(&self) -> RawRange {
        self.range
    }

    /// Whether the pages are write-protected (TCOW) while this reference lives.
    pub fn is_protected(&self) -> bool {
        self.protected
    }

    /// Remove write access to the referenced full pages (*read only*), once: from now on a
    /// write resolves by TCOW and the output keeps the bytes of this moment. On an error the
    /// pages stay writable and the reference stays (drop or release it).
    pub fn protect(&mut self) -> Result<()> {
        if !self.protected {
            self.rt.protect_output(self.id, self.range)?;
            self.protected = true;
        }
        Ok(())
    }

    /// Release now (dispose time).
    pub fn release(mut self) {
        self.released = true;
        self.rt.release_output(self.id);
    }
}

impl Drop for OutputRef {
    fn drop(&mut self) {
        if !self.released {
            self.rt.release_output(self.id);
        }
    }
}
