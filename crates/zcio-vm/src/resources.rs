//! What a process holds of the kernel's resources that zcio's mechanisms create: descriptors,
//! memory files, mappings, POSIX shared-memory objects and threads. Long runs and tests compare
//! a snapshot taken before with one taken after to see that nothing leaked.

use serde::{Deserialize, Serialize};

/// A snapshot of this process's resources (and of `/dev/shm`, which is the machine's).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// Open file descriptors (`/proc/self/fd`).
    pub fds: usize,
    /// Of those, memory files (`memfd:` links).
    pub memfds: usize,
    /// Mappings (`/proc/self/maps` lines).
    pub vmas: usize,
    /// Objects in `/dev/shm` (every process's).
    pub shm_objects: usize,
    /// Threads of this process.
    pub threads: usize,
}

/// Open now the descriptors zcio keeps for the life of a process, which are otherwise opened
/// at their first use: this process's `/proc/self/maps` (the input access check) and
/// `/proc/self/pagemap` (the huge-page scan). A baseline of [`Resources`] taken afterwards
/// counts them, so that a later first use does not read as a leak.
pub fn open_kept_descriptors() -> std::io::Result<()> {
    crate::protect::open_maps()?;
    crate::huge::open_pagemap()
}

impl Resources {
    /// The resources held now. An entry that cannot be read counts as zero.
    pub fn now() -> Resources {
        let mut fds = 0usize;
        let mut memfds = 0usize;
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            for e in dir.flatten() {
                fds += 1;
                if std::fs::read_link(e.path())
                    .is_ok_and(|t| t.to_string_lossy().starts_with("/memfd:"))
                {
                    memfds += 1;
                }
            }
        }
        let count = |p: &str| std::fs::read_dir(p).map_or(0, |d| d.count());
        Resources {
            // The directory being read holds one descriptor of its own.
            fds: fds.saturating_sub(1),
            memfds,
            vmas: crate::mapping::vma_count(),
            shm_objects: count("/dev/shm"),
            threads: count("/proc/self/task"),
        }
    }

    /// The names of the objects in `/dev/shm` (every process's) that contain `part`, sorted:
    /// what a test compares where the count of every object would take in other programs' too.
    /// A directory that cannot be read holds none.
    pub fn shm_objects_named(part: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.contains(part))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// How `self` strays from `before` beyond `tolerance`, as "name before → after" phrases
    /// (empty if it does not).
    pub fn strayed_from(&self, before: &Resources, tolerance: &Tolerance) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |name: &str, b: usize, a: usize, more: usize, fewer: Option<usize>| {
            if a > b + more || fewer.is_some_and(|f| a + f < b) {
                out.push(format!("{name} {b} → {a}"));
            }
        };
        let exact = tolerance.exact_descriptors.then_some(0);
        check("descriptors", before.fds, self.fds, 0, exact);
        check("memory files", before.memfds, self.memfds, 0, exact);
        check(
            "mappings",
            before.vmas,
            self.vmas,
            tolerance.vma_slack,
            tolerance.vma_shrink,
        );
        if tolerance.all_shm_objects {
            check(
                "/dev/shm objects",
                before.shm_objects,
                self.shm_objects,
                0,
                None,
            );
        }
        if tolerance.threads {
            check("threads", before.threads, self.threads, 0, None);
        }
        out
    }
}

/// How far resources may stray from an earlier snapshot ([`Resources::strayed_from`]). Whoever
/// compares states its own, with why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tolerance {
    /// Mappings there may be beyond the earlier snapshot.
    pub vma_slack: usize,
    /// Mappings there may be fewer than at the earlier snapshot (`None`: any number fewer).
    pub vma_shrink: Option<usize>,
    /// Descriptors and memory files must be as many as before, not only no more.
    pub exact_descriptors: bool,
    /// Threads may be no more than before (else they are not compared).
    pub threads: bool,
    /// The objects in `/dev/shm` of every program may be no more than before (else they are not
    /// compared).
    pub all_shm_objects: bool,
}

impl Tolerance {
    /// Nothing may grow, but mappings by `vma_slack` (caches that fill up to a bound):
    /// descriptors, memory files, threads and `/dev/shm` objects no more than before.
    pub const fn nothing_grows(vma_slack: usize) -> Tolerance {
        Tolerance {
            vma_slack,
            vma_shrink: None,
            exact_descriptors: false,
            threads: true,
            all_shm_objects: true,
        }
    }
}
