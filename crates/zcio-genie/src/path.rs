//! The path one side of a transfer took ([`crate::Accounting::path`]): which mechanism moved
//! the data and, where the mechanism a semantics names could not be used, which copying
//! fallback was taken and why.
//!
//! A [`DataPath`] prints (and serializes to JSON) as the phrase users read in `zcio transfer`,
//! the memory-network bench and `results.json`, e.g. `vmsplice+tcow(uffd-wp, uffd-move) [4k:
//! ...]` or `copy-fallback: short transfer (< 8192 bytes)`; any phrase written so far parses
//! back (`FromStr`), an unknown one as [`DataPath::Other`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zcio_vm::huge::Granule;
use zcio_vm::runtime::TcowMode;

/// How one side of a transfer passed its data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DataPath {
    /// Nothing recorded (an accounting not yet filled, or folded without a path).
    #[default]
    None,
    /// Copy semantics on output: into a system buffer, then written by `write`.
    Bounce(Write),
    /// Written from the application buffer by the kernel (`write`, `send`, `pwrite`).
    Kernel(Write),
    /// Emulated copy output by TCOW: the buffer's whole pages (at `granule`) referenced in place
    /// and write-protected.
    Tcow {
        /// How write protection is implemented in this process.
        mode: TcowMode,
        /// The granule the pages were protected at (4k or 2m).
        granule: Granule,
        /// Why this granule, in a phrase.
        why: String,
        /// Where write protection failed, the error: the call then waited for the receiver.
        protect_failed: Option<String>,
    },
    /// Share and emulated share output: referenced in place by `vmsplice`.
    InPlace {
        /// Whether the buffer was wired for the output.
        wiring: Wiring,
        /// The granule the buffer is mapped at, where not 4k.
        granule: Option<Granule>,
    },
    /// Copy semantics on input: read into a system buffer, then copied out.
    SystemBufferCopyout,
    /// Emulated copy or share input through staging: read into the staging at the buffer's
    /// alignment, then pages swapped in (or the bytes copied out).
    Staging {
        /// Which input buffering placed the staging.
        via: StagingVia,
        /// Whether pages were swapped (else copied out).
        swapped: bool,
    },
    /// Input at 2 MiB through huge staging: whole PMDs swapped in (`swapped_pmds > 0`) or the
    /// bytes copied out.
    HugeStaging {
        /// Which input buffering placed the staging.
        via: StagingVia,
        /// The PMDs swapped in (0: copied out).
        swapped_pmds: usize,
    },
    /// Outboard buffering: the whole message waited for in the module, then read directly into
    /// the application buffer.
    OutboardDirect,
    /// Share and emulated share input: read in place.
    InPlaceRead {
        /// Whether the buffer was wired for the input.
        wired: bool,
    },
    /// A region output on the memory network.
    RegionOut(RegionOut),
    /// A region output on a kernel stream, the region then unmapped (move) or cached.
    StreamRegionOut {
        /// How the region's bytes were written.
        write: Write,
        /// Whether the region was unmapped (else cached).
        unmapped: bool,
    },
    /// Input into a system-allocated region by a read.
    RegionIn {
        /// Whether the region is in huge pages.
        huge: bool,
    },
    /// Move input at 2 MiB: read into huge staging, the pages moved into a new region.
    RegionInHugeStaging,
    /// The semantics' mechanism could not be used: the data was copied instead.
    CopyFallback(CopyFallback),
    /// A path, with the reason `O_DIRECT` could not be used on the module.
    DirectUnavailable {
        /// The path taken.
        path: Box<DataPath>,
        /// Why `O_DIRECT` is unavailable.
        reason: String,
    },
    /// Several paths, in order (the sides of a transfer folded by [`crate::Accounting::add`]).
    Joined(Vec<DataPath>),
    /// A message taken in whole into a buffer of its own before it was delivered (it came in
    /// segments, being longer than its sender's window, or arrived while this end's output
    /// waited): that buffer handed over, or copied out into the application's.
    Assembled {
        /// Whether the bytes were copied into the application's buffer.
        copied_out: bool,
    },
    /// Copied into the link's shared ring by the sender (`out`), or out of it by the receiver:
    /// a message below the copy crossover on the memory network.
    SharedRing {
        /// Whether this is the sender's side.
        out: bool,
    },
    /// A loan shipped as a sealed memory file (container shipping, paper 003): its pages
    /// handed over by the sender (`out`), or taken by the receiver: mapped privately
    /// (`mapped`), or copied out into the application's buffer.
    Shipped {
        /// Whether this is the sender's side.
        out: bool,
        /// On the receiver's side, whether the pages were mapped (else copied out).
        mapped: bool,
    },
    /// A loan sent under emulated copy and kept by its sender (`memnet::loan`): its memory
    /// file sealed and shipped as [`DataPath::Shipped`], the sender's mapping made a private
    /// one of the same file, so that each page it writes afterwards becomes its own copy (the
    /// kernel's copy-on-write, Genie's TCOW at the granule of the file's pages).
    Kept,
    /// A volatile loan (`memnet::loan`): a memory file reused from loan to loan, lent to the
    /// receiver and given back.
    Lent {
        /// Whether this is the sender's side.
        out: bool,
        /// On the receiver's side, whether the file was mapped in place (else copied out).
        mapped: bool,
    },
    /// A phrase this version does not know (read from an older results file).
    Other(String),
}

/// How bytes were written to a kernel module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Pages referenced by `vmsplice` (the memory network).
    Vmsplice,
    /// `pwrite` with `O_DIRECT`.
    PwriteDirect,
    /// Buffered `pwrite`, and why not `O_DIRECT`.
    PwriteBuffered(String),
    /// `send` on a UDP socket (the kernel copies).
    SendUdp,
    /// `send` on a TCP socket (the kernel copies).
    SendTcp,
    /// `send` on a Unix socket (the kernel copies).
    SendUnix,
    /// `write` on a pipe (the kernel copies).
    WritePipe,
}

/// Whether a buffer output in place was wired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wiring {
    /// Not wired (emulated share, or no full page).
    No,
    /// Wired with `mlock` (share).
    Wired,
    /// Wiring failed with this error: referenced unwired.
    Failed(String),
}

/// Which input buffering placed the staging an input went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StagingVia {
    /// Pooled input buffering (aligned or unaligned).
    Pooled,
    /// Early demultiplexing at the application buffer's alignment.
    EarlyDemux,
    /// Staging aligned to the buffer where a direct read into it does not work.
    Aligned,
}

/// What became of a region output on the memory network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionOut {
    /// Move: unmapped once the output completes (I/O-deferred deallocation).
    Unmapped,
    /// Emulated move: hidden and cached.
    Hidden,
    /// Weak move: kept mapped, wired and cached.
    Wired,
    /// Emulated weak move: kept mapped and cached.
    Cached,
    /// The region cache was full: unmapped.
    CacheFull,
}

/// Why a transfer was copied instead of taking the semantics' mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyFallback {
    /// The output lies inside a huge page without covering it whole (and why not 2 MiB).
    InsideHugePage(String),
    /// The output has no full page.
    NoFullPage,
    /// The output is shorter than the calibrated threshold (bytes).
    ShortOutput(usize),
    /// The input is shorter than the calibrated threshold (full pages).
    ShortInput(usize),
    /// Calibration found swapping costlier than copying at every size.
    SwapCostsMore,
}

impl DataPath {
    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        *self == DataPath::None
    }

    /// Whether this is a TCOW output with userfaultfd write protection.
    pub fn is_uffd_tcow(&self) -> bool {
        self.any(&|p| {
            matches!(
                p,
                DataPath::Tcow {
                    mode: TcowMode::UffdMove | TcowMode::UffdCopy,
                    ..
                }
            )
        })
    }

    /// Whether the path names pages handled at 2 MiB.
    pub fn is_2m(&self) -> bool {
        self.any(&|p| match p {
            DataPath::Tcow { granule, .. } => *granule == Granule::Huge,
            DataPath::InPlace { granule, .. } => *granule == Some(Granule::Huge),
            DataPath::HugeStaging { .. } | DataPath::RegionInHugeStaging => true,
            DataPath::RegionIn { huge } => *huge,
            _ => false,
        })
    }

    /// Whether the data was written to a socket or pipe, where the kernel copies it.
    pub fn kernel_copies(&self) -> bool {
        self.any(&|p| match p {
            DataPath::Bounce(w) | DataPath::Kernel(w) => w.kernel_copies(),
            DataPath::StreamRegionOut { write, .. } => write.kernel_copies(),
            _ => false,
        })
    }

    /// Whether `f` holds for this path or one it is made of.
    fn any(&self, f: &dyn Fn(&DataPath) -> bool) -> bool {
        match self {
            DataPath::Joined(v) => v.iter().any(|p| p.any(f)),
            DataPath::DirectUnavailable { path, .. } => path.any(f),
            p => f(p),
        }
    }

    /// This path followed by `other` (as [`DataPath::Joined`]).
    pub fn then(self, other: DataPath) -> DataPath {
        let flat = |p: DataPath| match p {
            DataPath::Joined(v) => v,
            p => vec![p],
        };
        let mut v = flat(self);
        v.extend(flat(other));
        DataPath::Joined(v)
    }

    /// This path, noting why `O_DIRECT` is unavailable.
    pub fn direct_unavailable(self, reason: impl Into<String>) -> DataPath {
        DataPath::DirectUnavailable {
            path: Box::new(self),
            reason: reason.into(),
        }
    }
}

fn tcow_mode_name(mode: TcowMode) -> &'static str {
    match mode {
        TcowMode::UffdMove => "vmsplice+tcow(uffd-wp, uffd-move)",
        TcowMode::UffdCopy => "vmsplice+tcow(uffd-wp, copy: no UFFDIO_MOVE)",
        TcowMode::MprotectSleepOnWrite => {
            "vmsplice+mprotect (no userfaultfd: a write copies the range, or sleeps on shared memory)"
        }
    }
}

const TCOW_MODES: [TcowMode; 3] = [
    TcowMode::UffdMove,
    TcowMode::UffdCopy,
    TcowMode::MprotectSleepOnWrite,
];

const PROTECT_FAILED: (&str, &str) = (
    " (write-protect failed: ",
    "; the call waited for the receiver)",
);

const LOOPBACK: &str = "kernel copies; MSG_ZEROCOPY not used: loopback copies)";

impl Write {
    /// Whether this is a socket or pipe write, where the kernel copies every byte (the phrase
    /// says `kernel copies`).
    pub fn kernel_copies(&self) -> bool {
        matches!(
            self,
            Write::SendUdp | Write::SendTcp | Write::SendUnix | Write::WritePipe
        )
    }
}

impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Write::Vmsplice => f.write_str("vmsplice"),
            Write::PwriteDirect => f.write_str("pwrite(O_DIRECT)"),
            Write::PwriteBuffered(why) => write!(f, "pwrite(buffered: {why})"),
            Write::SendUdp => write!(f, "send(udp, {LOOPBACK}"),
            Write::SendTcp => write!(f, "send(tcp, {LOOPBACK}"),
            Write::SendUnix => f.write_str("send(unix, kernel copies)"),
            Write::WritePipe => f.write_str("write(pipe, kernel copies)"),
        }
    }
}

impl StagingVia {
    fn name(self) -> &'static str {
        match self {
            StagingVia::Pooled => "pooled",
            StagingVia::EarlyDemux => "early-demux (system-aligned)",
            StagingVia::Aligned => "aligned staging",
        }
    }
}

impl fmt::Display for CopyFallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CopyFallback::InsideHugePage(why) => {
                write!(f, "inside a huge page but not covering it whole ({why})")
            }
            CopyFallback::NoFullPage => f.write_str("no full page"),
            CopyFallback::ShortOutput(n) => write!(f, "short transfer (< {n} bytes)"),
            CopyFallback::ShortInput(n) => write!(f, "short transfer (< {n} full pages)"),
            CopyFallback::SwapCostsMore => f.write_str("swapping costs more than copying here"),
        }
    }
}

impl fmt::Display for DataPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataPath::None => Ok(()),
            DataPath::Bounce(w) => write!(f, "copy: bounce+{w}"),
            DataPath::Kernel(w) => write!(f, "{w}"),
            DataPath::Tcow {
                mode,
                granule,
                why,
                protect_failed,
            } => {
                write!(f, "{} [{granule}: {why}]", tcow_mode_name(*mode))?;
                match protect_failed {
                    Some(e) => write!(f, "{}{e}{}", PROTECT_FAILED.0, PROTECT_FAILED.1),
                    None => Ok(()),
                }
            }
            DataPath::InPlace { wiring, granule } => {
                match wiring {
                    Wiring::No => f.write_str("vmsplice (in place)")?,
                    Wiring::Wired => f.write_str("vmsplice+mlock (in place)")?,
                    Wiring::Failed(e) => write!(f, "vmsplice (in place; wiring failed: {e})")?,
                }
                match granule {
                    Some(g) => write!(f, " [{g}]"),
                    None => Ok(()),
                }
            }
            DataPath::SystemBufferCopyout => f.write_str("copy: system buffer+copyout"),
            DataPath::Staging { via, swapped } => {
                let how = if *swapped { "swap" } else { "copyout" };
                write!(f, "{}: staging+{how}", via.name())
            }
            DataPath::HugeStaging { via, swapped_pmds } => match swapped_pmds {
                0 => write!(f, "{}: huge staging+copyout [2m]", via.name()),
                n => write!(f, "{}: huge staging+swap [2m: {n} PMDs]", via.name()),
            },
            DataPath::OutboardDirect => {
                f.write_str("outboard: direct read into application buffer")
            }
            DataPath::InPlaceRead { wired: true } => f.write_str("in-place read (wired)"),
            DataPath::InPlaceRead { wired: false } => f.write_str("in-place read"),
            DataPath::RegionOut(r) => f.write_str(match r {
                RegionOut::Unmapped => "vmsplice+unmap (I/O-deferred deallocation)",
                RegionOut::Hidden => "vmsplice+hide (region cached)",
                RegionOut::Wired => "vmsplice+mlock (region cached)",
                RegionOut::Cached => "vmsplice (region cached)",
                RegionOut::CacheFull => "vmsplice+unmap (region cache full)",
            }),
            DataPath::StreamRegionOut { write, unmapped } => {
                let what = if *unmapped { "unmapped" } else { "cached" };
                write!(f, "{write}; region {what}")
            }
            DataPath::RegionIn { huge } => {
                let tag = if *huge { " [2m]" } else { "" };
                write!(f, "read into system-allocated region{tag}")
            }
            DataPath::RegionInHugeStaging => {
                f.write_str("read into huge staging, pages moved into a new region [2m]")
            }
            DataPath::CopyFallback(why) => write!(f, "copy-fallback: {why}"),
            DataPath::DirectUnavailable { path, reason } => {
                write!(f, "{path} [O_DIRECT unavailable: {reason}]")
            }
            DataPath::Joined(v) => {
                for (i, p) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{p}")?;
                }
                Ok(())
            }
            DataPath::Assembled { copied_out: false } => {
                f.write_str("taken in whole: its own buffer handed over")
            }
            DataPath::Assembled { copied_out: true } => {
                f.write_str("taken in whole: its own buffer, copied out")
            }
            DataPath::SharedRing { out: true } => f.write_str("copy: into the shared ring"),
            DataPath::SharedRing { out: false } => f.write_str("copy: out of the shared ring"),
            DataPath::Shipped { out: true, .. } => {
                f.write_str("move: a sealed memory file's pages handed over")
            }
            DataPath::Shipped {
                out: false,
                mapped: true,
            } => f.write_str("move: a sealed memory file mapped privately"),
            DataPath::Shipped {
                out: false,
                mapped: false,
            } => f.write_str("copy: out of a sealed memory file"),
            DataPath::Kept => f.write_str(
                "emulated copy: a sealed memory file's pages handed over, the sender's mapping \
                 made private (its writes copied by the kernel)",
            ),
            DataPath::Lent { out: true, .. } => {
                f.write_str("weak move: a volatile memory file lent, its mapping kept")
            }
            DataPath::Lent {
                out: false,
                mapped: true,
            } => f.write_str("weak move: a volatile memory file mapped in place, its mapping kept"),
            DataPath::Lent {
                out: false,
                mapped: false,
            } => f.write_str("copy: out of a volatile memory file"),
            DataPath::Other(s) => f.write_str(s),
        }
    }
}

/// The paths whose phrase has no variable part, for parsing.
fn fixed() -> Vec<DataPath> {
    let writes = [
        Write::Vmsplice,
        Write::PwriteDirect,
        Write::SendUdp,
        Write::SendTcp,
        Write::SendUnix,
        Write::WritePipe,
    ];
    let mut v = vec![
        DataPath::SystemBufferCopyout,
        DataPath::OutboardDirect,
        DataPath::InPlaceRead { wired: true },
        DataPath::InPlaceRead { wired: false },
        DataPath::RegionIn { huge: true },
        DataPath::RegionIn { huge: false },
        DataPath::RegionInHugeStaging,
        DataPath::Assembled { copied_out: false },
        DataPath::Assembled { copied_out: true },
        DataPath::SharedRing { out: true },
        DataPath::SharedRing { out: false },
        DataPath::Shipped {
            out: true,
            mapped: false,
        },
        DataPath::Shipped {
            out: false,
            mapped: true,
        },
        DataPath::Shipped {
            out: false,
            mapped: false,
        },
        DataPath::Kept,
        DataPath::Lent {
            out: true,
            mapped: false,
        },
        DataPath::Lent {
            out: false,
            mapped: true,
        },
        DataPath::Lent {
            out: false,
            mapped: false,
        },
        DataPath::CopyFallback(CopyFallback::NoFullPage),
        DataPath::CopyFallback(CopyFallback::SwapCostsMore),
    ];
    for w in writes {
        v.push(DataPath::Bounce(w.clone()));
        v.push(DataPath::Kernel(w.clone()));
        for unmapped in [true, false] {
            let write = w.clone();
            v.push(DataPath::StreamRegionOut { write, unmapped });
        }
    }
    for r in [
        RegionOut::Unmapped,
        RegionOut::Hidden,
        RegionOut::Wired,
        RegionOut::Cached,
        RegionOut::CacheFull,
    ] {
        v.push(DataPath::RegionOut(r));
    }
    for via in [
        StagingVia::Pooled,
        StagingVia::EarlyDemux,
        StagingVia::Aligned,
    ] {
        for swapped in [true, false] {
            v.push(DataPath::Staging { via, swapped });
        }
        v.push(DataPath::HugeStaging {
            via,
            swapped_pmds: 0,
        });
    }
    for granule in [None, Some(Granule::Huge), Some(Granule::Mixed)] {
        for wiring in [Wiring::No, Wiring::Wired] {
            v.push(DataPath::InPlace { wiring, granule });
        }
    }
    v
}

/// `s` as one path with a variable part, if it is one.
fn parse_variable(s: &str) -> Option<DataPath> {
    if let Some(r) = s.strip_suffix(']')
        && let Some((path, reason)) = r.rsplit_once(" [O_DIRECT unavailable: ")
    {
        return Some(parse_one(path)?.direct_unavailable(reason));
    }
    if let Some(r) = s.strip_prefix("copy-fallback: ") {
        let n = |r: &str, pre: &str, post: &str| -> Option<usize> {
            r.strip_prefix(pre)?.strip_suffix(post)?.parse().ok()
        };
        let why = if let Some(b) = n(r, "short transfer (< ", " bytes)") {
            CopyFallback::ShortOutput(b)
        } else if let Some(p) = n(r, "short transfer (< ", " full pages)") {
            CopyFallback::ShortInput(p)
        } else {
            let why = r
                .strip_prefix("inside a huge page but not covering it whole (")?
                .strip_suffix(')')?;
            CopyFallback::InsideHugePage(why.into())
        };
        return Some(DataPath::CopyFallback(why));
    }
    if let Some(w) = parse_buffered(s) {
        return Some(DataPath::Kernel(w));
    }
    if let Some(r) = s.strip_prefix("copy: bounce+") {
        return Some(DataPath::Bounce(parse_buffered(r)?));
    }
    if let Some((w, what)) = s.rsplit_once("; region ") {
        let unmapped = match what {
            "unmapped" => true,
            "cached" => false,
            _ => return None,
        };
        let write = parse_buffered(w)?;
        return Some(DataPath::StreamRegionOut { write, unmapped });
    }
    if let Some(p) = parse_tcow(s) {
        return Some(p);
    }
    for via in [
        StagingVia::Pooled,
        StagingVia::EarlyDemux,
        StagingVia::Aligned,
    ] {
        if let Some(n) = s
            .strip_prefix(via.name())
            .and_then(|r| r.strip_prefix(": huge staging+swap [2m: "))
            .and_then(|r| r.strip_suffix(" PMDs]"))
        {
            let swapped_pmds = n.parse().ok()?;
            return Some(DataPath::HugeStaging { via, swapped_pmds });
        }
    }
    let tagged = s
        .rsplit_once(" [")
        .and_then(|(w, g)| Some((w, parse_granule(g.strip_suffix(']')?)?)));
    let (wiring, granule) = match tagged {
        Some((w, g)) => (w, Some(g)),
        None => (s, None),
    };
    let e = wiring
        .strip_prefix("vmsplice (in place; wiring failed: ")?
        .strip_suffix(')')?;
    Some(DataPath::InPlace {
        wiring: Wiring::Failed(e.into()),
        granule,
    })
}

fn parse_buffered(s: &str) -> Option<Write> {
    let why = s.strip_prefix("pwrite(buffered: ")?.strip_suffix(')')?;
    Some(Write::PwriteBuffered(why.into()))
}

fn parse_granule(s: &str) -> Option<Granule> {
    [Granule::Base, Granule::Huge, Granule::Mixed]
        .into_iter()
        .find(|g| g.to_string() == s)
}

fn parse_tcow(s: &str) -> Option<DataPath> {
    let (mode, rest) = TCOW_MODES
        .into_iter()
        .find_map(|m| Some((m, s.strip_prefix(tcow_mode_name(m))?.strip_prefix(" [")?)))?;
    let (rest, protect_failed) = match rest.strip_suffix(PROTECT_FAILED.1) {
        Some(r) => {
            let (r, e) = r.rsplit_once(PROTECT_FAILED.0)?;
            (r, Some(e.to_string()))
        }
        None => (rest, None),
    };
    let (g, why) = rest.strip_suffix(']')?.split_once(": ")?;
    Some(DataPath::Tcow {
        mode,
        granule: parse_granule(g)?,
        why: why.into(),
        protect_failed,
    })
}

/// `s` as one path (not joined), if it is a known phrase.
fn parse_one(s: &str) -> Option<DataPath> {
    fixed()
        .into_iter()
        .find(|p| p.to_string() == s)
        .or_else(|| parse_variable(s))
        .filter(|p| p.to_string() == s)
}

impl FromStr for DataPath {
    type Err = std::convert::Infallible;

    /// Parse a phrase as written by [`DataPath`]'s `Display`; a phrase it does not know is kept
    /// as [`DataPath::Other`], so the parsed value always prints as `s`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Ok(DataPath::None);
        }
        if let Some(p) = parse_one(s) {
            return Ok(p);
        }
        // Joined: the longest known phrase first at each point (phrases contain "; " too).
        let pieces: Vec<&str> = s.split("; ").collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < pieces.len() {
            let found = (i + 1..=pieces.len())
                .rev()
                .find_map(|j| Some((j, parse_one(&pieces[i..j].join("; "))?)));
            match found {
                Some((j, p)) => {
                    out.push(p);
                    i = j;
                }
                None => return Ok(DataPath::Other(s.to_string())),
            }
        }
        Ok(DataPath::Joined(out))
    }
}

impl Serialize for DataPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DataPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(s.parse()
            .unwrap_or_else(|e: std::convert::Infallible| match e {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phrase_parses_back() {
        let mut all = fixed();
        all.extend([
            DataPath::Tcow {
                mode: TcowMode::UffdCopy,
                granule: Granule::Base,
                why: "no huge page here".into(),
                protect_failed: None,
            },
            DataPath::Tcow {
                mode: TcowMode::UffdMove,
                granule: Granule::Huge,
                why: "2 PMDs".into(),
                protect_failed: Some("EPERM: x; y".into()),
            },
            DataPath::InPlace {
                wiring: Wiring::Failed("ENOMEM".into()),
                granule: Some(Granule::Huge),
            },
            DataPath::InPlace {
                wiring: Wiring::Failed("odd [x]".into()),
                granule: None,
            },
            DataPath::HugeStaging {
                via: StagingVia::EarlyDemux,
                swapped_pmds: 3,
            },
            DataPath::CopyFallback(CopyFallback::ShortOutput(8192)),
            DataPath::CopyFallback(CopyFallback::ShortInput(2)),
            DataPath::CopyFallback(CopyFallback::InsideHugePage("mixed (x)".into())),
            DataPath::Kernel(Write::PwriteBuffered("not aligned".into())),
            DataPath::Bounce(Write::PwriteBuffered("not aligned".into())),
            DataPath::StreamRegionOut {
                write: Write::PwriteBuffered("why".into()),
                unmapped: false,
            },
            DataPath::Kernel(Write::PwriteDirect).direct_unavailable("EINVAL"),
            DataPath::Bounce(Write::SendTcp).then(DataPath::StreamRegionOut {
                write: Write::SendUdp,
                unmapped: true,
            }),
        ]);
        for p in all {
            let s = p.to_string();
            assert_eq!(s.parse::<DataPath>().unwrap(), p, "{s}");
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, serde_json::to_string(&s).unwrap());
            assert_eq!(serde_json::from_str::<DataPath>(&json).unwrap(), p);
        }
    }

    #[test]
    fn known_phrases_print_as_before() {
        let p = DataPath::CopyFallback(CopyFallback::ShortOutput(8192));
        assert_eq!(
            p.to_string(),
            "copy-fallback: short transfer (< 8192 bytes)"
        );
        let p = DataPath::Tcow {
            mode: TcowMode::UffdMove,
            granule: Granule::Base,
            why: "w".into(),
            protect_failed: None,
        };
        assert_eq!(p.to_string(), "vmsplice+tcow(uffd-wp, uffd-move) [4k: w]");
        let p = DataPath::Bounce(Write::Vmsplice);
        assert_eq!(p.to_string(), "copy: bounce+vmsplice");
        assert_eq!(
            DataPath::Bounce(Write::SendTcp).to_string(),
            "copy: bounce+send(tcp, kernel copies; MSG_ZEROCOPY not used: loopback copies)"
        );
    }

    #[test]
    fn unknown_phrases_are_kept() {
        for s in ["something else", "vmsplice; nonsense"] {
            let p: DataPath = s.parse().unwrap();
            assert_eq!(p, DataPath::Other(s.into()));
            assert_eq!(p.to_string(), s);
        }
        assert_eq!("".parse::<DataPath>().unwrap(), DataPath::None);
    }
}
