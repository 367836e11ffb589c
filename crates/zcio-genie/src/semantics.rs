//! The eight data-passing semantics of Genie (paper 000, §2, Table 1) and the input buffering
//! schemes (§6.2).

use crate::path::DataPath;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// How data is passed between an application buffer and an I/O module.
///
/// # Examples
///
/// What each semantics promises (paper 000, Table 1), and its name on the command line:
///
/// ```
/// use zcio_genie::semantics::Allocation;
/// use zcio_genie::{Integrity, Semantics};
///
/// let s: Semantics = "emulated-copy".parse()?;
/// assert_eq!(s, Semantics::EmulatedCopy);
/// // The application's own buffer; the receiver gets the data as of the call.
/// assert_eq!(s.allocation(), Allocation::Application);
/// assert_eq!(s.integrity(), Integrity::Strong);
/// // Emulated: no wiring, VM tricks (TCOW, page swapping) instead of copies.
/// assert!(s.is_emulated() && !s.wires());
/// // The move family passes system-allocated regions instead.
/// assert_eq!(Semantics::Move.allocation(), Allocation::System);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Semantics {
    /// The module gets (output) or gives (input) a copy; strong integrity; application buffers.
    Copy,
    /// Copy semantics without the copies where the VM allows it (TCOW, swapping).
    EmulatedCopy,
    /// The module works in place on the wired application buffer; weak integrity.
    Share,
    /// Share without wiring: pages are referenced instead.
    EmulatedShare,
    /// The buffer is given away (output) or handed over (input): system-allocated regions.
    Move,
    /// Move, with the region hidden and cached instead of unmapped.
    EmulatedMove,
    /// The region stays mapped but the application promises not to touch it until completion.
    WeakMove,
    /// Weak move without wiring.
    EmulatedWeakMove,
}

/// Who allocates the buffer (paper 000, Table 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Allocation {
    /// The application passes its own buffer.
    Application,
    /// The system passes regions it allocated (and the application gets regions on input).
    System,
}

/// What an output promises about writes the application makes after the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Integrity {
    /// The receiver gets the data as of the call, whatever the application does afterwards.
    Strong,
    /// Writes before completion may or may not be seen by the receiver.
    Weak,
}

impl Semantics {
    /// All eight, in the paper's order.
    pub const ALL: [Semantics; 8] = [
        Semantics::Copy,
        Semantics::EmulatedCopy,
        Semantics::Share,
        Semantics::EmulatedShare,
        Semantics::Move,
        Semantics::EmulatedMove,
        Semantics::WeakMove,
        Semantics::EmulatedWeakMove,
    ];

    /// Kebab-case name used by the command line and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Semantics::Copy => "copy",
            Semantics::EmulatedCopy => "emulated-copy",
            Semantics::Share => "share",
            Semantics::EmulatedShare => "emulated-share",
            Semantics::Move => "move",
            Semantics::EmulatedMove => "emulated-move",
            Semantics::WeakMove => "weak-move",
            Semantics::EmulatedWeakMove => "emulated-weak-move",
        }
    }

    /// Who allocates the buffers.
    pub fn allocation(self) -> Allocation {
        match self {
            Semantics::Copy
            | Semantics::EmulatedCopy
            | Semantics::Share
            | Semantics::EmulatedShare => Allocation::Application,
            _ => Allocation::System,
        }
    }

    /// The integrity an output keeps (paper 000, Table 1). Move semantics are strong because the
    /// application no longer has the buffer.
    pub fn integrity(self) -> Integrity {
        match self {
            Semantics::Copy
            | Semantics::EmulatedCopy
            | Semantics::Move
            | Semantics::EmulatedMove => Integrity::Strong,
            _ => Integrity::Weak,
        }
    }

    /// Whether this is an emulated semantics (no wiring; VM tricks instead).
    pub fn is_emulated(self) -> bool {
        matches!(
            self,
            Semantics::EmulatedCopy
                | Semantics::EmulatedShare
                | Semantics::EmulatedMove
                | Semantics::EmulatedWeakMove
        )
    }

    /// Whether buffers are wired (locked) during I/O: the non-emulated share and move family.
    pub fn wires(self) -> bool {
        matches!(
            self,
            Semantics::Share | Semantics::Move | Semantics::WeakMove
        )
    }
}

/// The one of `all` whose `name` is `s`, or an error naming `what` and every name.
fn by_name<T: Copy>(
    s: &str,
    all: &[T],
    name: fn(T) -> &'static str,
    what: &str,
) -> Result<T, String> {
    all.iter().copied().find(|&x| name(x) == s).ok_or_else(|| {
        let names: Vec<_> = all.iter().map(|&x| name(x)).collect();
        format!("unknown {what} `{s}` (one of: {})", names.join(", "))
    })
}

zcio_vm::display_by_name!(Semantics, InputBuffering);

impl FromStr for Semantics {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        by_name(s, &Semantics::ALL, Semantics::name, "semantics")
    }
}

/// Where input data is placed as it arrives (paper 000, §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputBuffering {
    /// Early demultiplexing: the data goes where the application's buffer is, as it arrives
    /// (in place for share, into system-aligned staging for copy semantics).
    EarlyDemux,
    /// Pooled buffers whose data starts at a page boundary; the application aligned its buffer to
    /// the module's preferred alignment, so full pages can be swapped.
    PooledAligned,
    /// Pooled buffers; the application's buffer is not aligned, so data is copied out.
    PooledUnaligned,
    /// Outboard buffering: the data waits in the module until the whole message is there, then
    /// goes straight into the application's buffer.
    Outboard,
}

impl InputBuffering {
    /// All four.
    pub const ALL: [InputBuffering; 4] = [
        InputBuffering::EarlyDemux,
        InputBuffering::PooledAligned,
        InputBuffering::PooledUnaligned,
        InputBuffering::Outboard,
    ];

    /// Kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            InputBuffering::EarlyDemux => "early-demux",
            InputBuffering::PooledAligned => "pooled-aligned",
            InputBuffering::PooledUnaligned => "pooled-unaligned",
            InputBuffering::Outboard => "outboard",
        }
    }
}

impl FromStr for InputBuffering {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        by_name(
            s,
            &InputBuffering::ALL,
            InputBuffering::name,
            "input buffering",
        )
    }
}

/// What an endpoint does when the mechanism a semantics names cannot be used for a transfer
/// (the kernel copies on this module, the buffer is not aligned for `O_DIRECT` or for page
/// swapping, page moves are unavailable): take a correct copying path and say so in
/// [`Accounting::path`], or refuse with [`crate::GenieError::Unsupported`] before any data moves.
///
/// Converting a short transfer to copy below the calibrated thresholds is part of Genie's
/// emulated semantics (paper 000, §6), not a fallback: it happens under both policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fallback {
    /// Take the copying path and report it (the default).
    #[default]
    Allow,
    /// Fail with `Unsupported` instead.
    Refuse,
}

/// What one side of a transfer did: the copies it made and the mechanism it used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accounting {
    /// Bytes copied by the CPU in user space for data passing (bounce copies, copyouts, partial
    /// pages, TCOW page copies are counted by the VM layer separately).
    pub cpu_copied_bytes: u64,
    /// Bytes the kernel copied, where known (`None` when the kernel does not say).
    pub kernel_copied_bytes: Option<u64>,
    /// Bytes delivered by swapping or moving pages.
    pub swapped_bytes: u64,
    /// The mechanism actually used and, where it was copied instead, why: in JSON the phrase,
    /// e.g. `"copy: bounce+vmsplice"` or `"copy-fallback: short transfer (< 8192 bytes)"`.
    pub path: DataPath,
    /// The page granule the VM work was done at (`4k`, `2m`, or `mixed` where both were used
    /// on one transfer), `None` where no page work was done (copies, regions, kernel streams).
    #[serde(default)]
    pub granule: Option<zcio_vm::huge::Granule>,
}

impl Accounting {
    /// Fold another side's accounting into this one.
    pub fn add(&mut self, other: &Accounting) {
        self.cpu_copied_bytes += other.cpu_copied_bytes;
        self.kernel_copied_bytes = match (self.kernel_copied_bytes, other.kernel_copied_bytes) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        self.swapped_bytes += other.swapped_bytes;
        self.granule = match (self.granule, other.granule) {
            (Some(a), Some(b)) if a != b => Some(zcio_vm::huge::Granule::Mixed),
            (a, b) => a.or(b),
        };
        if self.path.is_empty() {
            self.path = other.path.clone();
        } else if !other.path.is_empty() && other.path != self.path {
            self.path = std::mem::take(&mut self.path).then(other.path.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Semantics::ALL {
            assert_eq!(s.name().parse::<Semantics>().unwrap(), s);
        }
        for b in InputBuffering::ALL {
            assert_eq!(b.name().parse::<InputBuffering>().unwrap(), b);
        }
        assert!(
            "copyy"
                .parse::<Semantics>()
                .unwrap_err()
                .contains("emulated-copy")
        );
    }

    #[test]
    fn table_1_properties() {
        assert_eq!(Semantics::EmulatedCopy.integrity(), Integrity::Strong);
        assert_eq!(Semantics::Share.integrity(), Integrity::Weak);
        assert_eq!(Semantics::WeakMove.allocation(), Allocation::System);
        assert!(Semantics::Share.wires() && !Semantics::EmulatedShare.wires());
    }
}
