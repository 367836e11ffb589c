//! Errors of the VM layer: one enum, structured fields naming the argument and the rule it broke,
//! the kernel's errno kept as the source.

use std::io;

/// What went wrong in a VM-layer operation.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// An address or length that must be page-aligned was not.
    #[error("{what} = {value:#x} is not aligned to {alignment} bytes")]
    Misaligned {
        /// Which argument.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The alignment it needed.
        alignment: usize,
    },
    /// An object used with something it does not belong to.
    #[error("misuse: {what}")]
    Misuse {
        /// What was passed where it does not belong.
        what: &'static str,
    },
    /// A length of zero where at least one byte (or page) is needed.
    #[error("{what} must not be empty")]
    Empty {
        /// Which argument.
        what: &'static str,
    },
    /// Two ranges that must have equal lengths did not.
    #[error("{what}: lengths differ ({left} vs {right} bytes)")]
    LengthMismatch {
        /// Which operation.
        what: &'static str,
        /// Left length.
        left: usize,
        /// Right length.
        right: usize,
    },
    /// A length too large to map or address.
    #[error("{what} = {value} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Which argument.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The limit.
        limit: usize,
    },
    /// A kernel feature the operation needs is missing on this machine.
    #[error("{feature} is not available: {reason}")]
    Unsupported {
        /// The feature.
        feature: &'static str,
        /// Why (errno text or probe result).
        reason: String,
    },
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Sys {
        /// The system call or ioctl.
        op: &'static str,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// The shared arena could not be placed at the address every participant agreed on.
    #[error("cannot map the shared arena at {addr:#x} ({len} bytes): {source}")]
    ArenaPlacement {
        /// The agreed address.
        addr: usize,
        /// Arena length.
        len: usize,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A range lies (partly) outside the object it must be inside.
    #[error("{what} [{start:#x}, {end:#x}) lies outside [{bound_start:#x}, {bound_end:#x})")]
    OutOfBounds {
        /// Which range.
        what: &'static str,
        /// Its start.
        start: usize,
        /// Its end.
        end: usize,
        /// Bound start.
        bound_start: usize,
        /// Bound end.
        bound_end: usize,
    },
    /// An input buffer lies (partly) in memory the process may not write (read-only or
    /// inaccessible pages, or no mapping at all).
    #[error(
        "input buffer [{addr:#x}, +{len}) is not writable memory (read-only, inaccessible or unmapped)"
    )]
    NotWritable {
        /// Start of the buffer.
        addr: usize,
        /// Its length.
        len: usize,
    },
    /// The page-referencing runtime is shutting down or its handler died.
    #[error("the VM runtime is not running: {0}")]
    RuntimeDown(String),
}

impl VmError {
    /// Wrap the current `errno` of a failed system call.
    pub fn last_os(op: &'static str) -> Self {
        VmError::Sys {
            op,
            source: io::Error::last_os_error(),
        }
    }

    /// Wrap an `io::Error`.
    pub fn sys(op: &'static str, source: io::Error) -> Self {
        VmError::Sys { op, source }
    }

    /// The raw errno, when this error came from the kernel.
    pub fn errno(&self) -> Option<i32> {
        match self {
            VmError::Sys { source, .. } | VmError::ArenaPlacement { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }
}

impl From<rustix::io::Errno> for VmError {
    fn from(e: rustix::io::Errno) -> Self {
        VmError::Sys {
            op: "syscall",
            source: e.into(),
        }
    }
}

/// Result of the VM layer.
pub type Result<T, E = VmError> = std::result::Result<T, E>;
