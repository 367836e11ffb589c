//! The kernel's huge page policy for shared memory (`shmem_enabled`), which decides the pages
//! of every memory file, sealed containers' included.
//!
//! Under `never` (most distributions' default) a memory file is held in 4 KiB pages, and a
//! fresh page costs the page cache's bookkeeping of one entry: a sealed container, which can
//! never be written again and so never reused, pays it for every page of every frame. Under
//! `within_size` or `always`, Linux 6.14 and later give a file allocated or written in one call
//! large folios (pieces of 8 KiB to 2 MiB that fit in the file), one entry each: a 300 KiB file
//! then costs four entries instead of 75. The policy holds for the whole machine, so zcio never
//! changes it on its own. A benchmark asked to measure under another policy sets it through
//! [`PolicyOverride`], which puts the policy it found back when dropped, or when an interrupt,
//! hang-up or termination signal ends the process meanwhile (where the program left that
//! signal's default action in place); where its process died otherwise (`SIGKILL`), the next
//! override, or [`restore_left`], puts that policy back first.

use crate::error::{Result, VmError};
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The policy's file.
pub const SHMEM_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// Where a [`PolicyOverride`] records the policy it found (and the process that holds it), and
/// which it holds locked while it lives.
pub const OVERRIDE_RECORD: &str = "/run/zcio-shmem-policy";

/// The per-size statistics of large folios (`hugepages-<size>kB/stats`), Linux 6.10 and later.
const SIZES_DIR: &str = "/sys/kernel/mm/transparent_hugepage";

/// A value of `shmem_enabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShmemPolicy {
    /// Large folios wherever they fit.
    Always,
    /// Large folios that lie within the file's size.
    WithinSize,
    /// Large folios only where a mapping asks for them (`MADV_HUGEPAGE`).
    Advise,
    /// 4 KiB pages only (`MADV_COLLAPSE` may still make 2 MiB ones).
    Never,
    /// 4 KiB pages only, `MADV_COLLAPSE` refused too (an emergency setting).
    Deny,
    /// 2 MiB pages for everything (a testing setting).
    Force,
}

impl ShmemPolicy {
    /// Every policy.
    pub const ALL: [ShmemPolicy; 6] = [
        ShmemPolicy::Always,
        ShmemPolicy::WithinSize,
        ShmemPolicy::Advise,
        ShmemPolicy::Never,
        ShmemPolicy::Deny,
        ShmemPolicy::Force,
    ];

    /// Its name in `shmem_enabled`.
    pub fn name(self) -> &'static str {
        match self {
            ShmemPolicy::Always => "always",
            ShmemPolicy::WithinSize => "within_size",
            ShmemPolicy::Advise => "advise",
            ShmemPolicy::Never => "never",
            ShmemPolicy::Deny => "deny",
            ShmemPolicy::Force => "force",
        }
    }

    /// Whether memory files allocated or written in one call get large folios under it
    /// (on kernels that give memory files large folios at all: see [`large_folios_possible`]).
    pub fn gives_large_folios(self) -> bool {
        matches!(
            self,
            ShmemPolicy::Always | ShmemPolicy::WithinSize | ShmemPolicy::Force
        )
    }

    /// The policy in force, from `shmem_enabled` (the bracketed word).
    pub fn current() -> Result<ShmemPolicy> {
        let text = std::fs::read_to_string(SHMEM_ENABLED).map_err(|e| VmError::Unsupported {
            feature: "the kernel's shared memory huge page policy",
            reason: format!("{SHMEM_ENABLED}: {e}"),
        })?;
        Self::selected(&text).ok_or_else(|| VmError::Unsupported {
            feature: "the kernel's shared memory huge page policy",
            reason: format!(
                "{SHMEM_ENABLED} says {:?}: no policy zcio knows",
                text.trim()
            ),
        })
    }

    /// The bracketed policy of a `shmem_enabled` text.
    fn selected(text: &str) -> Option<ShmemPolicy> {
        crate::huge::bracketed(text)?.parse().ok()
    }
}

impl std::fmt::Display for ShmemPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ShmemPolicy {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<ShmemPolicy, String> {
        ShmemPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = ShmemPolicy::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "{s:?} is not a shared memory huge page policy (one of {})",
                    names.join(", ")
                )
            })
    }
}

/// Large folios the kernel has given shared memory since it started, by size in KiB
/// (`hugepages-<size>kB/stats/shmem_alloc`, Linux 6.10 and later; empty before).
fn allocs_by_size() -> Vec<(usize, u64)> {
    let Ok(dir) = std::fs::read_dir(SIZES_DIR) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let kib = entry
                .file_name()
                .to_str()?
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse::<usize>()
                .ok()?;
            let n = std::fs::read_to_string(entry.path().join("stats/shmem_alloc")).ok()?;
            Some((kib, n.trim().parse::<u64>().ok()?))
        })
        .collect()
}

/// Large folios the kernel has given shared memory since it started, summed over their sizes
/// (`hugepages-<size>kB/stats/shmem_alloc`, 2 MiB included): a counter of the whole machine,
/// which grows while memory files get large folios. `None` where the kernel keeps no such
/// statistics.
pub fn large_folio_allocs() -> Option<u64> {
    let sizes = allocs_by_size();
    (!sizes.is_empty()).then(|| sizes.iter().map(|&(_, n)| n).sum())
}

/// Whether this kernel can give memory files large folios below 2 MiB at all, and if not why:
/// Linux 6.14 and later do, under a policy that [`ShmemPolicy::gives_large_folios`].
pub fn large_folios_possible() -> std::result::Result<(), String> {
    let release = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    if (major, minor) < (6, 14) {
        return Err(format!(
            "Linux {release} gives memory files 4 KiB or 2 MiB pages only (large folios of other sizes came in 6.14)"
        ));
    }
    if !allocs_by_size()
        .iter()
        .any(|&(kib, _)| kib * 1024 < crate::page::HUGE_PAGE_SIZE)
    {
        return Err(format!(
            "{SIZES_DIR} keeps no per-size statistics: the kernel has no large folios below 2 MiB"
        ));
    }
    Ok(())
}

/// Why zcio cannot set the policy for a run here and have memory files get large folios under
/// it, if it cannot (the policy found is part of the answer): the policy unreadable, a kernel
/// without large folios below 2 MiB, or `shmem_enabled` or the directory of
/// [`OVERRIDE_RECORD`] not writable by this process.
pub fn unavailable_reason() -> Option<String> {
    let found = match ShmemPolicy::current() {
        Ok(p) => p,
        Err(e) => return Some(e.to_string()),
    };
    if let Err(why) = large_folios_possible() {
        return Some(format!("{found} here; {why}"));
    }
    let record = std::path::Path::new(OVERRIDE_RECORD);
    let record_dir = record.parent().unwrap_or(std::path::Path::new("/"));
    for path in [std::path::Path::new(SHMEM_ENABLED), record_dir] {
        if let Err(e) = rustix::fs::access(path, rustix::fs::Access::WRITE_OK) {
            return Some(format!(
                "{found} here, and zcio may not set another for a run: {}: {e}",
                path.display()
            ));
        }
    }
    None
}

/// The machine's shared memory policy set to another for as long as this lives; dropped, the
/// policy found is put back. One process at a time holds it (a lock on [`OVERRIDE_RECORD`]),
/// and the record names the policy found, so that if the holder dies the next override puts
/// that policy back before anything else.
#[derive(Debug)]
pub struct PolicyOverride {
    record: std::fs::File,
    found: ShmemPolicy,
    set: ShmemPolicy,
    recovered: Option<ShmemPolicy>,
}

/// Setting the policy refused, and why.
fn refused(reason: String) -> VmError {
    VmError::Unsupported {
        feature: "setting the kernel's shared memory huge page policy",
        reason,
    }
}

/// Write `policy` into `shmem_enabled`.
fn write_policy(policy: ShmemPolicy) -> Result<()> {
    std::fs::write(SHMEM_ENABLED, policy.name()).map_err(|e| {
        refused(match e.kind() {
            std::io::ErrorKind::PermissionDenied => {
                format!("writing {SHMEM_ENABLED} needs root: {e}")
            }
            _ => format!("writing {policy:?} into {SHMEM_ENABLED}: {e}"),
        })
    })
}

impl PolicyOverride {
    /// Set the policy to `policy`. Refused, with the reason, where this process may not write
    /// the policy (it needs root) or another process holds an override now.
    pub fn set(policy: ShmemPolicy) -> Result<PolicyOverride> {
        PolicyOverride::take(Some(policy))
    }

    /// Hold the override: first put back what a holder that died left, then set `policy`, if
    /// given.
    fn take(policy: Option<ShmemPolicy>) -> Result<PolicyOverride> {
        let on_record = |e: std::io::Error| refused(format!("{OVERRIDE_RECORD}: {e}"));
        let mut record = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(OVERRIDE_RECORD)
            .map_err(on_record)?;
        let locked = rustix::fs::flock(
            record.as_fd(),
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        );
        let mut text = String::new();
        record.read_to_string(&mut text).map_err(on_record)?;
        match locked {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(refused(format!(
                    "another process holds an override of it now ({OVERRIDE_RECORD}: {:?})",
                    text.trim()
                )));
            }
            Err(e) => return Err(refused(format!("flock({OVERRIDE_RECORD}): {e}"))),
        }
        // The lock is this process's: what the record still names, a holder that died left.
        let recovered = text
            .split_whitespace()
            .next()
            .and_then(|w| w.parse::<ShmemPolicy>().ok());
        if let Some(left) = recovered {
            write_policy(left)?;
        }
        let found = ShmemPolicy::current()?;
        on_signal::put_back(found);
        let mut over = PolicyOverride {
            record,
            found,
            set: found,
            recovered,
        };
        over.note(&format!("{found} {}\n", std::process::id()))
            .map_err(on_record)?;
        if let Some(policy) = policy {
            write_policy(policy)?;
            over.set = policy;
        }
        Ok(over)
    }

    /// Replace the record's text.
    fn note(&mut self, text: &str) -> std::io::Result<()> {
        self.record.set_len(0)?;
        self.record.rewind()?;
        self.record.write_all(text.as_bytes())?;
        self.record.flush()
    }

    /// The policy found, which is put back.
    pub fn found(&self) -> ShmemPolicy {
        self.found
    }

    /// The policy set.
    pub fn policy(&self) -> ShmemPolicy {
        self.set
    }

    /// The policy a process that died holding an override had found, which this one put back
    /// before it looked, if there was one.
    pub fn recovered(&self) -> Option<ShmemPolicy> {
        self.recovered
    }
}

impl Drop for PolicyOverride {
    fn drop(&mut self) {
        // The record is cleared only once the policy found is back: where writing it fails,
        // the next override tries again.
        if self.set == self.found || write_policy(self.found).is_ok() {
            let _ = self.note("");
        }
        on_signal::nothing_to_put_back();
    }
}

/// Put back the policy a process that died holding a [`PolicyOverride`] had found, if one did
/// and none holds one now; returns it. A process that may not set the policy finds nothing to
/// do.
pub fn restore_left() -> Option<ShmemPolicy> {
    PolicyOverride::take(None).ok()?.recovered()
}

/// The policy put back by a signal that ends the process while an override lives: the ABI edge
/// of [`PolicyOverride`].
mod on_signal {
    use super::{AtomicUsize, OVERRIDE_RECORD, Ordering, SHMEM_ENABLED, ShmemPolicy};
    use std::ffi::CString;
    use std::sync::OnceLock;

    /// Nothing to put back.
    const NOTHING: usize = usize::MAX;

    /// The policy to put back (its index in [`ShmemPolicy::ALL`]), or [`NOTHING`].
    static PUT_BACK: AtomicUsize = AtomicUsize::new(NOTHING);

    /// `shmem_enabled` and the override record, as C strings for the handler (made before it
    /// is installed).
    static PATHS: OnceLock<(CString, CString)> = OnceLock::new();

    /// The signals that end a process by default and can be caught.
    const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

    /// From now on, a catchable ending signal puts `policy` back first.
    pub(super) fn put_back(policy: ShmemPolicy) {
        let k = ShmemPolicy::ALL
            .iter()
            .position(|&p| p == policy)
            .unwrap_or(NOTHING);
        PUT_BACK.store(k, Ordering::SeqCst);
        install();
    }

    /// The override ended: a signal has nothing to put back.
    pub(super) fn nothing_to_put_back() {
        PUT_BACK.store(NOTHING, Ordering::SeqCst);
    }

    /// Install the handler, once a process, for each of [`SIGNALS`] whose action is still the
    /// default (a program's own handler is left alone: the record then serves).
    fn install() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            PATHS.get_or_init(|| {
                let c = |s: &str| CString::new(s).expect("a path without NUL");
                (c(SHMEM_ENABLED), c(OVERRIDE_RECORD))
            });
            for sig in SIGNALS {
                // SAFETY: `sigaction` with a null new action only reads the current one into
                // `old`, a zeroed `struct sigaction` this frame owns; then, where it is the
                // default, the new action is a handler that makes only async-signal-safe calls
                // (open, write, close, signal, raise) and reads a static atomic.
                unsafe {
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                        || old.sa_sigaction != libc::SIG_DFL
                    {
                        continue;
                    }
                    let mut sa: libc::sigaction = std::mem::zeroed();
                    sa.sa_sigaction = handler as *const () as usize;
                    libc::sigemptyset(&mut sa.sa_mask);
                    libc::sigaction(sig, &sa, std::ptr::null_mut());
                }
            }
        });
    }

    /// Put the policy back and clear the record, then end the process as the signal would
    /// have.
    extern "C" fn handler(sig: libc::c_int) {
        let k = PUT_BACK.swap(NOTHING, Ordering::SeqCst);
        if let (Some(p), Some((policy_file, record_file))) = (ShmemPolicy::ALL.get(k), PATHS.get())
        {
            let name = p.name().as_bytes();
            // SAFETY: open, write and close are async-signal-safe; the paths are C strings
            // made before the handler was installed and never dropped, and `name` a static
            // string of `name.len()` bytes.
            unsafe {
                let fd = libc::open(policy_file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd >= 0 {
                    if libc::write(fd, name.as_ptr().cast(), name.len()) == name.len() as isize {
                        let rec = libc::open(
                            record_file.as_ptr(),
                            libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC,
                        );
                        if rec >= 0 {
                            libc::close(rec);
                        }
                    }
                    libc::close(fd);
                }
            }
        }
        // SAFETY: signal and raise are async-signal-safe: the default action is restored and
        // the signal raised again, which ends the process as it would have without zcio.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bracketed_word_is_the_policy_and_an_unknown_one_is_named() {
        let text = "always within_size advise [never] deny force\n";
        assert_eq!(ShmemPolicy::selected(text), Some(ShmemPolicy::Never));
        assert_eq!(
            ShmemPolicy::selected("[within_size] never"),
            Some(ShmemPolicy::WithinSize)
        );
        assert_eq!(ShmemPolicy::selected("always never"), None);
        assert_eq!(ShmemPolicy::selected("[sometimes] never"), None);
        for p in ShmemPolicy::ALL {
            assert_eq!(p.name().parse::<ShmemPolicy>(), Ok(p));
        }
        let e = "sometimes".parse::<ShmemPolicy>().unwrap_err();
        assert!(
            e.contains("\"sometimes\"") && e.contains("within_size"),
            "{e}"
        );
    }
}
