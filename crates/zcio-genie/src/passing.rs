//! The semantics-specific steps shared by every module: prepare an output of an application
//! buffer onto a page-referencing wire, and place input into an application buffer.

use crate::breakdown::{Op, time};
use crate::error::{GenieError, Result};
use crate::path::{CopyFallback, DataPath, StagingVia, Wiring, Write};
use crate::profile::Profile;
use crate::semantics::{Accounting, InputBuffering, Semantics};
use zcio_vm::huge::Granule;
use zcio_vm::runtime::OutputRef;
use zcio_vm::staging::Staging;
use zcio_vm::wire::Striped;
use zcio_vm::{MapOptions, Mapping, RawRange, VmRuntime, page_size};

/// Refuse an input buffer the process may not write (read-only or inaccessible memory) with
/// an error naming it, before anything is read: Genie's access check at page referencing.
pub(crate) fn check_writable(buf: &mut [u8]) -> Result<()> {
    time(Op::AccessCheck, || zcio_vm::protect::check_writable(buf)).map_err(not_writable)
}

/// A refused writable check as the error of the call's `buf`.
fn not_writable(e: zcio_vm::VmError) -> GenieError {
    match e {
        zcio_vm::VmError::NotWritable { .. } => GenieError::arg("buf", e.to_string()),
        e => GenieError::Vm(e),
    }
}

/// How a system buffer of `len` bytes is mapped: in transparent huge pages from 2 MiB up,
/// where they can be had. Copying into or out of 4 KiB pages costs here several times what
/// it costs in huge pages (the kernel's pipe copy most), and the copy semantics deserve the
/// system's best buffers as the emulated ones get them.
pub(crate) fn system_buffer_options(len: usize) -> MapOptions {
    MapOptions {
        huge: len >= zcio_vm::page::HUGE_PAGE_SIZE && zcio_vm::huge::unavailable_reason().is_none(),
        ..MapOptions::default()
    }
}

/// Page-aligned bounce buffers (Genie's system buffers), reused across transfers.
#[derive(Debug, Default)]
pub(crate) struct BouncePool {
    free: Vec<Mapping>,
}

impl BouncePool {
    /// A buffer of at least `len` bytes.
    pub(crate) fn get(&mut self, len: usize) -> Result<Mapping> {
        if let Some(i) = self
            .free
            .iter()
            .position(|m| m.len() >= len && m.len() <= 4 * len.max(page_size()))
        {
            return Ok(self.free.swap_remove(i));
        }
        Ok(Mapping::anonymous(len.max(1), system_buffer_options(len))?)
    }

    pub(crate) fn put(&mut self, m: Mapping) {
        if self.free.len() < 16 {
            self.free.push(m);
        }
    }
}

/// What a pending output holds until its completion (Genie's dispose-time work).
#[derive(Debug, Default)]
pub(crate) struct Held {
    pub refs: Option<OutputRef>,
    pub wired: Option<RawRange>,
    pub bounce: Option<Mapping>,
    /// The output could not be protected after its pages were queued: the call must wait for
    /// its completion before returning, or a write after it would reach the receiver.
    pub wait: bool,
}

impl Held {
    /// Dispose: unreference, unwire, return bounce buffers.
    pub(crate) fn dispose(mut self, pool: &mut BouncePool) {
        if let Some(r) = self.refs.take() {
            time(Op::Unreference, || r.release());
        }
        if let Some(w) = self.wired.take() {
            let _ = time(Op::Unwire, || zcio_vm::protect::unwire(w));
        }
        if let Some(b) = self.bounce.take() {
            pool.put(b);
        }
    }
}

/// An output dropped without its completion (its endpoint went first, its peer died): the
/// reference goes with its own drop and the bounce buffer is unmapped, but wired pages must be
/// unwired here, or they would stay locked in the application's memory (and split its mapping)
/// for as long as the application keeps the buffer.
impl Drop for Held {
    fn drop(&mut self) {
        if let Some(w) = self.wired.take() {
            let _ = zcio_vm::protect::unwire(w);
        }
    }
}

/// Which granule an emulated-copy output or input of a buffer takes.
enum HugePlan {
    /// Whole PMDs at 2 MiB (the bytes around them copied); why, in a phrase.
    Huge { pmds: RawRange, why: String },
    /// The 4 KiB paths, and why not 2 MiB.
    Base(String),
}

/// Choose the granule for `r`: 2 MiB where its whole PMDs are huge pages (all or some: a PMD
/// that is not takes 4 KiB TCOW or moves inside the same call), the machine has TCOW at 2 MiB
/// and the calibrated threshold (`min_bytes`) is reached; else 4 KiB, with the reason.
fn huge_plan(r: RawRange, min_bytes: Option<usize>, huge_tcow: bool) -> HugePlan {
    let pmds = zcio_vm::huge::whole_pmds(r);
    if pmds.is_empty() {
        return HugePlan::Base("no whole 2 MiB granule".into());
    }
    if !huge_tcow {
        return HugePlan::Base(
            zcio_vm::huge::unavailable_reason()
                .unwrap_or_else(|| "no TCOW at 2 MiB on this machine".into()),
        );
    }
    let Some(min) = min_bytes else {
        return HugePlan::Base("the profile has no 2 MiB costs".into());
    };
    let scan = zcio_vm::huge::scan(r);
    match scan.granule() {
        Granule::Base => HugePlan::Base(match scan {
            zcio_vm::huge::HugeScan::Unknown(why) => why,
            _ => "not in huge pages".into(),
        }),
        _ if pmds.len < min => HugePlan::Base(if min == usize::MAX {
            "moving huge pages costs more than copying here".into()
        } else {
            format!("shorter than the 2 MiB threshold ({} MiB)", min >> 20)
        }),
        g => HugePlan::Huge {
            pmds,
            why: if g == Granule::Mixed {
                format!(
                    "{} of {} PMDs huge",
                    scan.huge_bytes() >> 21,
                    pmds.len >> 21
                )
            } else {
                format!("{} PMDs", pmds.len >> 21)
            },
        },
    }
}

/// Emulated copy output of the whole granules `inner` of `buf` by TCOW: they are
/// write-protected and referenced in place, the bytes before and after them copied into a
/// system buffer, so that no page (at 2 MiB: no huge page) is ever protected in part.
fn tcow_output(
    buf: &[u8],
    inner: RawRange,
    why: String,
    granule: Granule,
    wire: Striped<'_>,
    pool: &mut BouncePool,
) -> Result<(Held, Accounting)> {
    let rt = VmRuntime::get();
    let r = RawRange::of(buf);
    let (len, head, tail) = (buf.len(), inner.addr - r.addr, r.end() - inner.end());
    let mut b = pool.get((head + tail).max(1))?;
    if head + tail > 0 {
        time(Op::Copyin, || {
            b.as_mut_slice()[..head].copy_from_slice(&buf[..head]);
            b.as_mut_slice()[head..head + tail].copy_from_slice(&buf[len - tail..]);
        });
    }
    // Referenced and queued first, write-protected after: the receiver starts reading while
    // the page tables change. No write can come between (the caller holds `buf` borrowed),
    // and the protection is in place before the call returns.
    let mut refs = rt.reference_output(inner, false)?;
    let res = splice(
        wire,
        &[
            &b.as_slice()[..head],
            &buf[head..len - tail],
            &b.as_slice()[head..head + tail],
        ],
    );
    if let Err(e) = res {
        refs.release();
        pool.put(b);
        return Err(e);
    }
    let mut protect_failed = None;
    if let Err(e) = time(Op::ReadOnly, || refs.protect()) {
        // Queued but writable: keep the promise by waiting for the receiver instead.
        protect_failed = Some(e.to_string());
    }
    let wait = protect_failed.is_some();
    let path = DataPath::Tcow {
        mode: rt.capabilities().tcow,
        granule,
        why,
        protect_failed,
    };
    let acc = Accounting {
        cpu_copied_bytes: (head + tail) as u64,
        kernel_copied_bytes: Some(0),
        swapped_bytes: 0,
        path,
        granule: Some(granule),
    };
    Ok((
        Held {
            refs: Some(refs),
            bounce: Some(b),
            wired: None,
            wait,
        },
        acc,
    ))
}

/// Queue an output of the application buffer `buf` under `sem` on the page-referencing pipe
/// `wire`: the output steps of paper 000, Table 2. Returns what to hold until completion.
pub(crate) fn output_app(
    sem: Semantics,
    buf: &[u8],
    wire: Striped<'_>,
    pool: &mut BouncePool,
    profile: &Profile,
) -> Result<(Held, Accounting)> {
    match sem {
        Semantics::Copy => copy_output(buf, wire, pool, DataPath::Bounce(Write::Vmsplice)),
        Semantics::EmulatedCopy => emulated_copy_output(buf, wire, pool, profile),
        Semantics::Share | Semantics::EmulatedShare => share_output(sem, buf, wire, pool),
        _ => Err(GenieError::arg(
            "semantics",
            format!("{sem} passes system-allocated regions: use the region API (send_region)"),
        )),
    }
}

/// Queue `pieces` on `wire` as one message.
fn splice(wire: Striped<'_>, pieces: &[&[u8]]) -> Result<usize> {
    time(Op::Reference, || wire.vmsplice_message(pieces))
        .map_err(|e| GenieError::from_wire(e, "output"))
}

/// Copy semantics output (and emulated copy's fallback, reported as `path`): copy into a
/// system buffer, queue the system buffer's pages.
fn copy_output(
    buf: &[u8],
    wire: Striped<'_>,
    pool: &mut BouncePool,
    path: DataPath,
) -> Result<(Held, Accounting)> {
    let len = buf.len();
    let mut b = pool.get(len)?;
    time(Op::Copyin, || b.as_mut_slice()[..len].copy_from_slice(buf));
    splice(wire, &[&b.as_slice()[..len]])?;
    let acc = Accounting {
        granule: None,
        cpu_copied_bytes: len as u64,
        kernel_copied_bytes: Some(0),
        swapped_bytes: 0,
        path,
    };
    Ok((
        Held {
            refs: None,
            wired: None,
            bounce: Some(b),
            wait: false,
        },
        acc,
    ))
}

/// How emulated copy outputs a buffer: TCOW of its whole PMDs at 2 MiB, of its whole pages
/// at 4 KiB, or a copy (and why).
enum EmulatedCopyPlan {
    Tcow {
        inner: RawRange,
        why: String,
        granule: Granule,
    },
    Copy(CopyFallback),
}

/// What emulated copy does with `buf`: TCOW of the whole PMDs at 2 MiB where the plan allows,
/// else of the whole pages at 4 KiB, else (short, no full page, part of a huge page) a copy.
fn emulated_copy_plan(buf: &[u8], profile: &Profile) -> EmulatedCopyPlan {
    let r = RawRange::of(buf);
    let short = profile.thresholds.short_output_bytes;
    if buf.len() < short && zcio_vm::huge::whole_pmds(r).is_empty() {
        // Copied whatever its pages: decided without looking at them.
        return EmulatedCopyPlan::Copy(CopyFallback::ShortOutput(short));
    }
    let rt = VmRuntime::get();
    let why_4k = match huge_plan(
        r,
        profile.huge.map(|h| h.short_output_bytes),
        rt.huge_tcow(),
    ) {
        HugePlan::Huge { pmds, why } => {
            return EmulatedCopyPlan::Tcow {
                inner: pmds,
                why,
                granule: Granule::Huge,
            };
        }
        HugePlan::Base(why) => why,
    };
    let full = r.full_pages();
    // A page of a huge page the output does not cover whole cannot be moved out by
    // TCOW while the wire references the huge page (the kernel cannot split it), so a
    // write to it would wait for the output: such a buffer is copied instead.
    if !full.is_empty() && zcio_vm::huge::touches_huge(full) {
        return EmulatedCopyPlan::Copy(CopyFallback::InsideHugePage(why_4k));
    }
    if full.is_empty() {
        return EmulatedCopyPlan::Copy(CopyFallback::NoFullPage);
    }
    if buf.len() < short {
        return EmulatedCopyPlan::Copy(CopyFallback::ShortOutput(short));
    }
    EmulatedCopyPlan::Tcow {
        inner: full,
        why: why_4k,
        granule: Granule::Base,
    }
}

/// Where emulated copy copies `buf` rather than protect and reference it (the calibrated
/// crossover at the buffer's granule), why.
pub(crate) fn emulated_copy_copies(buf: &[u8], profile: &Profile) -> Option<CopyFallback> {
    match emulated_copy_plan(buf, profile) {
        EmulatedCopyPlan::Copy(why) => Some(why),
        EmulatedCopyPlan::Tcow { .. } => None,
    }
}

/// Emulated copy output, as [`emulated_copy_plan`] says.
fn emulated_copy_output(
    buf: &[u8],
    wire: Striped<'_>,
    pool: &mut BouncePool,
    profile: &Profile,
) -> Result<(Held, Accounting)> {
    match emulated_copy_plan(buf, profile) {
        EmulatedCopyPlan::Tcow {
            inner,
            why,
            granule,
        } => tcow_output(buf, inner, why, granule, wire, pool),
        EmulatedCopyPlan::Copy(why) => copy_output(buf, wire, pool, DataPath::CopyFallback(why)),
    }
}

/// Share and emulated share output: reference the buffer in place (share wires its full
/// pages first).
fn share_output(
    sem: Semantics,
    buf: &[u8],
    wire: Striped<'_>,
    pool: &mut BouncePool,
) -> Result<(Held, Accounting)> {
    let rt = VmRuntime::get();
    let r = RawRange::of(buf);
    let full = r.full_pages();
    let mut wiring = Wiring::No;
    let wired = if sem == Semantics::Share && !full.is_empty() {
        match time(Op::Wire, || zcio_vm::protect::wire(full)) {
            Ok(()) => {
                wiring = Wiring::Wired;
                Some(full)
            }
            Err(e) => {
                wiring = Wiring::Failed(e.to_string());
                None
            }
        }
    } else {
        None
    };
    let refs = time(Op::Reference, || rt.reference_output(r, false))?;
    let held = Held {
        refs: Some(refs),
        wired,
        bounce: None,
        wait: false,
    };
    if let Err(e) = splice(wire, &[buf]) {
        held.dispose(pool);
        return Err(e);
    }
    // Referenced in place at whatever granule the buffer is mapped at: whole huge pages
    // are referenced (and wired) whole, never split.
    let granule = zcio_vm::huge::scan(r).granule();
    let path = DataPath::InPlace {
        wiring,
        granule: (granule != Granule::Base).then_some(granule),
    };
    let acc = Accounting {
        granule: Some(granule),
        cpu_copied_bytes: 0,
        kernel_copied_bytes: Some(0),
        swapped_bytes: 0,
        path,
    };
    Ok((held, acc))
}

/// Where an input goes through staging: the alignment it takes (`offset_of`'s, modulo the
/// granule), the granule, and the fewest pages (at 2 MiB: PMDs) worth swapping.
#[derive(Debug, Clone, Copy)]
struct StagingAt {
    offset_of: usize,
    via: StagingVia,
    huge: bool,
    min: usize,
}

impl StagingAt {
    fn base(offset_of: usize, via: StagingVia, min_pages: usize) -> StagingAt {
        StagingAt {
            offset_of,
            via,
            huge: false,
            min: min_pages,
        }
    }

    fn huge(offset_of: usize, via: StagingVia, min_pmds: usize) -> StagingAt {
        StagingAt {
            offset_of,
            via,
            huge: true,
            min: min_pmds,
        }
    }
}

/// One input being placed in the application's buffer: the buffer, where the message comes
/// from, how the endpoint buffers input, the costs that choose the path, and what the input
/// has cost so far.
struct Input<'a> {
    buf: &'a mut [u8],
    src: &'a mut dyn Source,
    buffering: InputBuffering,
    profile: &'a Profile,
    acc: Accounting,
}

/// Input staging and bounce buffers of one receiving endpoint.
#[derive(Debug, Default)]
pub(crate) struct InputBuffers {
    staging: Option<Staging>,
    /// Staging in huge pages, for inputs into huge buffers.
    hstaging: Option<Staging>,
    bounce: Option<Mapping>,
    /// The last receive buffer found writable ([`InputBuffers::check_writable`]).
    writable: zcio_vm::protect::WritableCache,
}

impl InputBuffers {
    /// [`check_writable`], looked up once for a buffer reused receive after receive.
    pub(crate) fn check_writable(&mut self, buf: &mut [u8]) -> Result<()> {
        time(Op::AccessCheck, || self.writable.check(buf)).map_err(not_writable)
    }
}

/// How input bytes are read from the module.
pub(crate) trait Source {
    /// Read exactly `buf.len()` bytes (the next bytes of the current message).
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()>;
    /// Whether the whole message can be waited for in the module (outboard buffering) and, if
    /// so, wait for it. `false` when it cannot be held whole.
    fn wait_whole(&mut self, len: usize) -> Result<bool>;
    /// Kernel copies per byte read (1 for pipes and sockets, 0 for O_DIRECT), if known.
    fn kernel_copies(&self, len: usize) -> Option<u64>;
    /// Whether a direct read into this buffer works (O_DIRECT alignment).
    fn direct_ok(&self, _buf: &[u8]) -> bool {
        true
    }
    /// Most bytes the module can hold for one message (outboard buffering), if bounded.
    fn capacity(&self) -> usize {
        usize::MAX
    }
}

impl InputBuffers {
    /// The system buffer of copying inputs, at least `len` bytes: page-aligned, in huge pages
    /// from 2 MiB up (as the staging is), kept for the next input.
    fn bounce(&mut self, len: usize) -> Result<&mut [u8]> {
        if self.bounce.as_ref().is_none_or(|b| b.len() < len) {
            self.bounce = None;
            self.bounce = Some(Mapping::anonymous(len.max(1), system_buffer_options(len))?);
        }
        Ok(self.bounce.as_mut().expect("just made").as_mut_slice())
    }

    fn staging(&mut self, len: usize) -> Result<&mut Staging> {
        let need = len.max(64 * 1024);
        if self.staging.as_ref().is_none_or(|s| s.capacity() < len) {
            self.staging = Some(Staging::new(need.next_power_of_two())?);
        }
        Ok(self.staging.as_mut().expect("just created"))
    }

    fn hstaging(&mut self, len: usize) -> Result<&mut Staging> {
        if self.hstaging.as_ref().is_none_or(|s| s.capacity() < len) {
            self.hstaging = None; // release the old one first: huge staging is large
            self.hstaging = Some(Staging::new_huge(len.next_power_of_two())?);
        }
        Ok(self.hstaging.as_mut().expect("just created"))
    }

    /// Move input at 2 MiB: read into huge staging at a granule boundary, then move the pages
    /// into the new region (no zeroed pages). `None` where the region is not in huge pages.
    pub(crate) fn fill_region_huge(
        &mut self,
        region: &mut crate::region::Region,
        src: &mut dyn Source,
    ) -> Result<Option<zcio_vm::staging::Delivery>> {
        let len = region.len();
        if !crate::region::capacity_for(len).1 {
            return Ok(None);
        }
        let st = self.hstaging(len)?;
        let w = st.window_huge(0, len)?;
        src.read_exact(w)?;
        let t = crate::breakdown::start();
        let d = st.deliver_pages(region.mapping_mut())?;
        crate::breakdown::stop(Op::Swap, t);
        Ok(Some(d))
    }

    /// Return a move region's pages to the huge staging (region deallocation into the
    /// system's pool). Returns the bytes taken back.
    pub(crate) fn take_back(&mut self, region: &mut crate::region::Region) -> usize {
        match self.hstaging.as_mut() {
            Some(st) => st.take_back(region.mapping_mut()),
            None => 0,
        }
    }

    /// Place a message of `buf.len()` bytes from `src` into the application buffer under `sem`
    /// (paper 000, Table 3). Under copy and emulated copy, `buf` is not written until the whole
    /// message has arrived.
    pub(crate) fn input_app(
        &mut self,
        sem: Semantics,
        buf: &mut [u8],
        buffering: InputBuffering,
        src: &mut dyn Source,
        profile: &Profile,
    ) -> Result<Accounting> {
        let mut i = Input {
            buf,
            src,
            buffering,
            profile,
            acc: Accounting::default(),
        };
        match sem {
            Semantics::Copy => {
                self.copy_input(&mut i)?;
                i.acc.path = DataPath::SystemBufferCopyout;
            }
            Semantics::EmulatedCopy => self.emulated_copy_input(&mut i)?,
            Semantics::Share | Semantics::EmulatedShare => self.share_input(sem, &mut i)?,
            _ => {
                return Err(GenieError::arg(
                    "semantics",
                    format!(
                        "{sem} returns system-allocated regions: use the region API (recv_region)"
                    ),
                ));
            }
        }
        i.acc.kernel_copied_bytes = i.src.kernel_copies(i.buf.len());
        Ok(i.acc)
    }

    /// Copy input: read the whole message into the system buffer, then copy it out.
    fn copy_input(&mut self, i: &mut Input<'_>) -> Result<()> {
        let len = i.buf.len();
        let b = self.bounce(len)?;
        i.src.read_exact(&mut b[..len])?;
        time(Op::Copyout, || i.buf.copy_from_slice(&b[..len]));
        i.acc.cpu_copied_bytes = len as u64;
        Ok(())
    }

    /// Input through staging: read into the staging at `at.offset_of` modulo the granule,
    /// then swap the whole pages (at 2 MiB: PMDs) in, from `at.min` up, or copy out (at 4 KiB,
    /// a partial page with enough data swaps by reverse copyout).
    fn via_staging(&mut self, i: &mut Input<'_>, at: StagingAt) -> Result<()> {
        let len = i.buf.len();
        let t = crate::breakdown::start();
        let st = if at.huge {
            self.hstaging(len)?
        } else {
            self.staging(len)?
        };
        let w = if at.huge {
            st.window_huge(at.offset_of, len)?
        } else {
            st.window(at.offset_of, len)?
        };
        crate::breakdown::stop(Op::OverlayAllocate, t);
        i.src.read_exact(w)?;
        let t = crate::breakdown::start();
        let d = if at.huge {
            st.deliver_huge(i.buf, at.min)?
        } else {
            st.deliver_with(i.buf, at.min, i.profile.thresholds.reverse_copyout_bytes)?
        };
        crate::breakdown::stop(if d.swapped > 0 { Op::Swap } else { Op::Copyout }, t);
        i.acc.cpu_copied_bytes += d.copied as u64;
        i.acc.swapped_bytes += d.swapped as u64;
        let via = at.via;
        if at.huge {
            i.acc.granule = Some(Granule::Huge);
            i.acc.path = DataPath::HugeStaging {
                via,
                swapped_pmds: d.swapped >> 21,
            };
        } else {
            if d.swapped > 0 {
                i.acc.granule = Some(Granule::Base);
            }
            i.acc.path = DataPath::Staging {
                via,
                swapped: d.swapped > 0,
            };
        }
        Ok(())
    }

    /// Emulated copy input: swap at 2 MiB through huge staging where the plan allows, else
    /// copy a short message, else read directly (outboard buffering) or through staging.
    fn emulated_copy_input(&mut self, i: &mut Input<'_>) -> Result<()> {
        let len = i.buf.len();
        let min_pages = i.profile.thresholds.swap_min_pages;
        let r = RawRange::of(i.buf);
        let huge_min = i.profile.huge.map(|h| {
            h.swap_min_pmds
                .saturating_mul(zcio_vm::page::HUGE_PAGE_SIZE)
        });
        let plan = huge_plan(RawRange::of(i.buf), huge_min, VmRuntime::get().huge_tcow());
        let outboard_direct = i.buffering == InputBuffering::Outboard
            && i.src.direct_ok(i.buf)
            && len <= i.src.capacity();
        if matches!(plan, HugePlan::Huge { .. }) && !outboard_direct {
            let (at, via) = match i.buffering {
                InputBuffering::PooledAligned | InputBuffering::PooledUnaligned => {
                    (0, StagingVia::Pooled)
                }
                _ => (i.buf.as_ptr() as usize, StagingVia::EarlyDemux),
            };
            let min_pmds = i.profile.huge.map_or(usize::MAX, |h| h.swap_min_pmds);
            let at = StagingAt::huge(at, via, min_pmds);
            return self.via_staging(i, at);
        }
        let full = r.full_pages().pages();
        // A partial page with enough data swaps by reverse copyout.
        let (head, tail) = r.partial_lens();
        let reverse = head.max(tail) >= i.profile.thresholds.reverse_copyout_bytes;
        if full < min_pages && !reverse {
            self.copy_input(i)?;
            i.acc.path = DataPath::CopyFallback(if min_pages == usize::MAX {
                CopyFallback::SwapCostsMore
            } else {
                CopyFallback::ShortInput(min_pages)
            });
            return Ok(());
        }
        match i.buffering {
            InputBuffering::Outboard if i.src.direct_ok(i.buf) && i.src.wait_whole(len)? => {
                // The whole message is in the module: the read cannot stop halfway.
                i.src.read_exact(i.buf)?;
                i.acc.path = DataPath::OutboardDirect;
            }
            InputBuffering::EarlyDemux | InputBuffering::Outboard => {
                let a = i.buf.as_ptr() as usize;
                let at = StagingAt::base(a, StagingVia::EarlyDemux, min_pages);
                self.via_staging(i, at)?;
            }
            InputBuffering::PooledAligned | InputBuffering::PooledUnaligned => {
                let at = StagingAt::base(0, StagingVia::Pooled, min_pages);
                self.via_staging(i, at)?;
            }
        }
        Ok(())
    }

    /// Share and emulated share input: swap from the pool (at 2 MiB where the buffer allows),
    /// through aligned staging where a direct read does not work, else read in place (share
    /// wires the buffer for the read).
    fn share_input(&mut self, sem: Semantics, i: &mut Input<'_>) -> Result<()> {
        match i.buffering {
            InputBuffering::PooledAligned | InputBuffering::PooledUnaligned => {
                // The pool's pages swap in at 2 MiB where the buffer's whole granules are
                // huge pages on the pool's alignment.
                let plan = huge_plan(RawRange::of(i.buf), Some(0), VmRuntime::get().huge_tcow());
                let at = if matches!(plan, HugePlan::Huge { .. })
                    && i.buf.as_ptr() as usize % zcio_vm::page::HUGE_PAGE_SIZE == 0
                {
                    StagingAt::huge(0, StagingVia::Pooled, 1)
                } else {
                    StagingAt::base(0, StagingVia::Pooled, 1)
                };
                self.via_staging(i, at)?;
            }
            _ if !i.src.direct_ok(i.buf) => {
                let a = i.buf.as_ptr() as usize;
                let at = StagingAt::base(a, StagingVia::Aligned, 1);
                self.via_staging(i, at)?;
            }
            _ => {
                // In place; share wires the buffer for the duration of the input. (Wired pages
                // cannot be swapped, so only in-place reads wire.)
                let full = RawRange::of(i.buf).full_pages();
                let wired = sem == Semantics::Share
                    && !full.is_empty()
                    && time(Op::Wire, || zcio_vm::protect::wire(full)).is_ok();
                i.acc.path = DataPath::InPlaceRead { wired };
                let r = i.src.read_exact(i.buf);
                if wired {
                    let _ = time(Op::Unwire, || zcio_vm::protect::unwire(full));
                }
                r?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcio_vm::huge::{Granule, scan, unavailable_reason};
    use zcio_vm::page::HUGE_PAGE_SIZE;

    #[test]
    fn system_buffers_of_2_mib_and_up_are_huge_pages_and_kept() {
        let mut pool = BouncePool::default();
        let mut small = pool.get(64 * 1024).unwrap();
        small.as_mut_slice().fill(1);
        assert_eq!(scan(small.range()).granule(), Granule::Base);
        let mut inputs = InputBuffers::default();
        let b = inputs.bounce(2 * HUGE_PAGE_SIZE).unwrap();
        b.fill(2);
        let addr = b.as_ptr() as usize;
        let r = RawRange { addr, len: b.len() };
        // Kept for the next input of the same length or shorter.
        assert_eq!(
            inputs.bounce(HUGE_PAGE_SIZE).unwrap().as_ptr() as usize,
            addr
        );
        let mut big = pool.get(2 * HUGE_PAGE_SIZE).unwrap();
        big.as_mut_slice().fill(3);
        match unavailable_reason() {
            // Held against the start-up probe like every skip (`zcio probe --check-skips`).
            Some(why) => zcio_vm::skip::skip(zcio_vm::skip::Capability::HugePages, &why),
            None => {
                assert_eq!(scan(r).granule(), Granule::Huge, "input system buffer");
                assert_eq!(scan(big.range()).granule(), Granule::Huge, "output bounce");
            }
        }
    }
}
