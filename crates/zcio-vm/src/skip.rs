//! Tests that cannot run on this machine say so, by capability, through [`skip`]: the line goes
//! to the test's output and, where `$ZCIO_SKIP_LOG` names a file, to that file, so that CI can
//! hold every skip against the start-up probe (`zcio probe --check-skips FILE`). A skip is a
//! failure unless the probe says the capability is absent here.

use std::io::Write;

/// Environment variable naming the file skips are appended to, one line each:
/// `capability<TAB>test<TAB>reason`.
pub const SKIP_LOG_ENV: &str = "ZCIO_SKIP_LOG";

/// What a test may skip for, named as the probe names it (`zcio probe`, the features' `id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// userfaultfd with write-protect faults (TCOW).
    UffdWp,
    /// `UFFDIO_MOVE` (page swapping, TCOW by page moving).
    UffdMove,
    /// Transparent huge pages that zcio can use (THP on, `PAGEMAP_SCAN`).
    HugePages,
    /// `O_DIRECT` in the directory the tests write to.
    ODirect,
    /// io_uring (and the setups of it a test asks for).
    IoUring,
    /// `pidfd_open` and `pidfd_getfd`.
    Pidfd,
    /// A Chromium to load the report in.
    Chromium,
    /// fio, the peer of the user-level I/O bench.
    Fio,
    /// `PROCMAP_QUERY` (the input access check by mapping lookup).
    ProcmapQuery,
    /// Memory-backed loop devices: ext4 on a loop device over an image in a tmpfs, attached,
    /// made and mounted (root, loop support, `losetup`, `mkfs.ext4`, `mount`).
    LoopDevices,
    /// Setting the kernel's shared memory huge page policy (root) on a kernel that gives
    /// memory files large folios under it ([`crate::shmem`]).
    ShmemPolicy,
    /// Switching a thread to another user (`CAP_SETUID`), to act as another user's process.
    SetUid,
}

impl Capability {
    /// Every capability.
    pub const ALL: [Capability; 12] = [
        Capability::UffdWp,
        Capability::UffdMove,
        Capability::HugePages,
        Capability::ODirect,
        Capability::IoUring,
        Capability::Pidfd,
        Capability::Chromium,
        Capability::Fio,
        Capability::ProcmapQuery,
        Capability::LoopDevices,
        Capability::ShmemPolicy,
        Capability::SetUid,
    ];

    /// The probe's name for it.
    pub fn id(self) -> &'static str {
        match self {
            Capability::UffdWp => "uffd-wp",
            Capability::UffdMove => "uffd-move",
            Capability::HugePages => "huge-pages",
            Capability::ODirect => "o-direct",
            Capability::IoUring => "io-uring",
            Capability::Pidfd => "pidfd",
            Capability::Chromium => "chromium",
            Capability::Fio => "fio",
            Capability::ProcmapQuery => "procmap-query",
            Capability::LoopDevices => "loop-devices",
            Capability::ShmemPolicy => "shmem-policy",
            Capability::SetUid => "setuid",
        }
    }

    /// The capability of a probe name.
    pub fn from_id(id: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.id() == id)
    }
}

/// Say that the calling test (named by its thread, as the test harness names it) skips its
/// checks, or some of them, for want of `cap`, and why.
pub fn skip(cap: Capability, why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("(unnamed)");
    let why = why.replace(['\t', '\n'], " ");
    eprintln!("skipped [{}] {test}: {why}", cap.id());
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        let line = format!("{}\t{test}\t{why}\n", cap.id());
        // One write with O_APPEND: lines of tests running side by side do not interleave.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!(
                "cannot record the skip in {} (${SKIP_LOG_ENV}): {e}",
                std::path::Path::new(&path).display()
            );
        }
    }
}

/// One recorded skip, as read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    /// The capability's probe name (as written; may be unknown).
    pub capability: String,
    /// The test.
    pub test: String,
    /// Why it skipped.
    pub why: String,
}

/// Read a skip log written by [`skip`]. Lines that do not have three fields are refused.
pub fn read_log(text: &str) -> Result<Vec<Skip>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            let mut f = l.splitn(3, '\t');
            match (f.next(), f.next(), f.next()) {
                (Some(c), Some(t), Some(w)) => Ok(Skip {
                    capability: c.to_string(),
                    test: t.to_string(),
                    why: w.to_string(),
                }),
                _ => Err(format!(
                    "skip log line {}: want capability, test and reason separated by tabs: {l:?}",
                    i + 1
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_logs_parse() {
        for c in Capability::ALL {
            assert_eq!(Capability::from_id(c.id()), Some(c));
        }
        assert_eq!(Capability::from_id("warp-drive"), None);
        let log = "uffd-move\ta::b\tno move here\n\nfio\tc\twhy: with\ttab\n";
        let s = read_log(log).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].capability, "uffd-move");
        assert_eq!(s[1].why, "why: with\ttab");
        let e = read_log("just one field").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
    }
}
