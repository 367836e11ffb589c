//! Start-up probes of the kernel features zcio uses. A missing feature yields a fallback and a
//! reason, never a failure.

use serde::{Deserialize, Serialize};
use std::path::Path;
use zcio_vm::VmRuntime;
use zcio_vm::uffd::{Features, Userfaultfd};

/// One probed feature.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Feature {
    /// Short name, as tests name what they skip for ([`zcio_vm::skip::Capability::id`]).
    #[serde(default)]
    pub id: String,
    /// Feature name.
    pub name: String,
    /// Whether it is available.
    pub available: bool,
    /// What was found, or why it is missing and what zcio does instead.
    pub detail: String,
}

/// What this machine offers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Probe {
    /// Kernel release.
    pub kernel: String,
    /// Features.
    pub features: Vec<Feature>,
    /// The VM runtime's choice of mechanisms, with reasons.
    pub vm: zcio_vm::runtime::Capabilities,
}

fn feature(id: &str, name: &str, available: bool, detail: impl Into<String>) -> Feature {
    Feature {
        id: id.into(),
        name: name.into(),
        available,
        detail: detail.into(),
    }
}

/// The first executable called `name` on `$PATH`.
fn tool_on_path(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

impl Probe {
    /// Hold recorded skips ([`zcio_vm::skip`]) against this probe: one line per skip, and the
    /// skips of capabilities the probe says are here (or does not know), which are failures.
    pub fn check_skips(&self, skips: &[zcio_vm::skip::Skip]) -> (Vec<String>, Vec<String>) {
        let mut lines = Vec::new();
        let mut failures = Vec::new();
        for s in skips {
            match self.features.iter().find(|f| f.id == s.capability) {
                Some(f) if !f.available => lines.push(format!(
                    "skip ok: {} skipped for {} ({}); the probe agrees: {}",
                    s.test, s.capability, s.why, f.detail
                )),
                Some(f) => failures.push(format!(
                    "{} skipped for {} ({}), but the probe says it is here: {}",
                    s.test, s.capability, s.why, f.detail
                )),
                None => failures.push(format!(
                    "{} skipped for {} ({}), which the probe does not know",
                    s.test, s.capability, s.why
                )),
            }
        }
        (lines, failures)
    }
}

/// Probe the features; `dir` is where file transfers will go (for `O_DIRECT`).
pub fn probe(dir: &Path) -> Probe {
    let mut f = userfaultfd_features();
    f.push(huge_pages_feature());
    f.push(shmem_policy_feature());
    f.push(o_direct_feature(dir));
    match io_uring::IoUring::new(2) {
        Ok(_) => f.push(feature("io-uring", "io_uring", true, "available")),
        Err(e) => f.push(feature(
            "io-uring",
            "io_uring",
            false,
            format!("{e}: synchronous system calls are used"),
        )),
    }
    f.push(feature(
        "pipe-max-size",
        "pipe-max-size",
        true,
        format!("{} bytes", zcio_vm::wire::pipe_max_size()),
    ));
    f.push(msg_zerocopy_feature());
    f.push(match zcio_vm::protect::writable_check() {
        zcio_vm::protect::WritableCheck::ProcmapQuery => feature(
            "procmap-query",
            "PROCMAP_QUERY",
            true,
            "the input access check looks up the mappings under a buffer, one call per mapping",
        ),
        other => feature(
            "procmap-query",
            "PROCMAP_QUERY",
            false,
            format!("the input access check is {other}: its cost grows with the buffer's pages"),
        ),
    });
    f.push(
        match rustix::process::pidfd_open(
            rustix::process::getpid(),
            rustix::process::PidfdFlags::empty(),
        ) {
            Ok(_) => feature("pidfd", "pidfd", true, "pidfd_open works"),
            Err(e) => feature(
                "pidfd",
                "pidfd",
                false,
                format!("pidfd_open: {e}: fbuf receivers are not checked for being alive by pidfd"),
            ),
        },
    );
    f.push(
        match zcio_uio::memdisk::probe(Path::new(zcio_uio::memdisk::DEFAULT_BACKING)) {
            Ok(found) => feature("loop-devices", "memory-backed loop devices", true, found),
            Err(why) => feature(
                "loop-devices",
                "memory-backed loop devices",
                false,
                format!("{why}: tables that want a device each share one"),
            ),
        },
    );
    f.push(match setuid_unavailable() {
        None => feature(
            "setuid",
            "another user's thread",
            true,
            "a thread can become user 65534 (the refusal of another user's channel client)",
        ),
        Some(why) => feature("setuid", "another user's thread", false, why),
    });
    for (id, what) in [
        ("chromium", "the report's browser check"),
        ("fio", "the peer of the user-level I/O bench"),
    ] {
        f.push(match tool_on_path(id) {
            Some(p) => feature(id, id, true, format!("{} ({what})", p.display())),
            None => feature(id, id, false, format!("not on PATH: no {what}")),
        });
    }
    Probe {
        kernel: rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned(),
        features: f,
        vm: VmRuntime::get().capabilities().clone(),
    }
}

/// userfaultfd's write protection (TCOW) and `UFFDIO_MOVE` (page swapping).
fn userfaultfd_features() -> Vec<Feature> {
    let mut f = Vec::new();
    match Userfaultfd::probe() {
        Ok(feat) => {
            // A feature the kernel has or lacks: what it brings, or what its lack costs.
            let has = |id, name, want, brings: &str, lacking: &str| {
                let available = feat.contains(want);
                feature(
                    id,
                    name,
                    available,
                    if available { brings } else { lacking },
                )
            };
            f.push(has(
                "uffd-wp",
                "userfaultfd write-protect",
                Features::WP,
                "TCOW by write-protect faults",
                "missing: TCOW falls back to mprotect + SIGSEGV",
            ));
            f.push(has(
                "uffd-move",
                "UFFDIO_MOVE",
                Features::MOVE,
                "page swapping and TCOW page moves",
                "missing (Linux < 6.8): swaps become copies, TCOW copies pages instead of moving them",
            ));
        }
        Err(e) => {
            f.push(feature(
                "uffd-wp",
                "userfaultfd write-protect",
                false,
                format!("{e}: TCOW falls back to mprotect + SIGSEGV, swaps become copies"),
            ));
            f.push(feature(
                "uffd-move",
                "UFFDIO_MOVE",
                false,
                format!("{e}: swaps become copies"),
            ));
        }
    }
    f
}

/// The user a thread becomes to act as another user's process ([`setuid_unavailable`]).
pub const OTHER_USER: u32 = 65534;

/// Why a thread of this process cannot become user [`OTHER_USER`] (`setresuid` on that thread
/// alone, which needs `CAP_SETUID`), or `None` where it can: tried on a thread that ends then.
pub fn setuid_unavailable() -> Option<String> {
    std::thread::spawn(|| {
        let u = rustix::process::Uid::from_raw(OTHER_USER);
        rustix::thread::set_thread_res_uid(u, u, u)
            .err()
            .map(|e| format!("setresuid({OTHER_USER}) on a thread: {e} (needs CAP_SETUID)"))
    })
    .join()
    .unwrap_or_else(|_| Some("the thread that tried setresuid panicked".into()))
}

/// Whether zcio may set the kernel's shared memory huge page policy for a run, and whether
/// memory files get large folios under it here.
fn shmem_policy_feature() -> Feature {
    let name = "shared memory huge page policy";
    match zcio_vm::shmem::unavailable_reason() {
        Some(why) => feature("shmem-policy", name, false, why),
        None => feature(
            "shmem-policy",
            name,
            true,
            format!(
                "{} here; zcio may set another for a run, and memory files get large folios under within_size or always",
                zcio_vm::shmem::ShmemPolicy::current()
                    .map_or_else(|e| e.to_string(), |p| p.to_string())
            ),
        ),
    }
}

/// Transparent huge pages, with the system's mode.
fn huge_pages_feature() -> Feature {
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let mode = thp
        .split_whitespace()
        .find(|w| w.starts_with('['))
        .unwrap_or("[unknown]")
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    let huge = zcio_vm::huge::unavailable_reason();
    feature(
        "huge-pages",
        "transparent huge pages",
        huge.is_none(),
        match huge {
            None => format!("mode {mode}"),
            Some(why) => format!("mode {mode}: {why}"),
        },
    )
}

/// `O_DIRECT` in `dir`, with the alignments it needs.
fn o_direct_feature(dir: &Path) -> Feature {
    // The alignment O_DIRECT needs is reported for files, not directories: ask of a new file.
    let file = dir.join(format!(".zcio-probe-{}", std::process::id()));
    let align = std::fs::File::create(&file)
        .map_err(|e| format!("cannot create a file in {}: {e}", dir.display()))
        .and_then(|_| crate::stream::direct_align(&file));
    let _ = std::fs::remove_file(&file);
    match align {
        Ok(a) => feature(
            "o-direct",
            "O_DIRECT",
            true,
            format!(
                "{}: memory alignment {}, offset alignment {}",
                dir.display(),
                a.mem,
                a.offset
            ),
        ),
        Err(r) => feature(
            "o-direct",
            "O_DIRECT",
            false,
            format!("{r}: file transfers use the page cache"),
        ),
    }
}

/// `MSG_ZEROCOPY` on loopback, measured.
fn msg_zerocopy_feature() -> Feature {
    let zc = crate::zerocopy::loopback();
    feature(
        "msg-zerocopy",
        "MSG_ZEROCOPY on loopback",
        zc.supported && !zc.copied,
        if zc.supported && !zc.copied {
            format!(
                "measured: {}; socket modules still send with plain copies (MSG_ZEROCOPY is not used by them)",
                zc.detail
            )
        } else if zc.supported {
            format!(
                "measured: {}; zero-copy gains nothing here, so socket modules send with plain copies",
                zc.detail
            )
        } else {
            format!(
                "unsupported: {}; socket modules send with plain copies",
                zc.detail
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcio_vm::skip::Skip;

    #[test]
    fn a_skip_passes_only_where_the_probe_finds_the_capability_absent() {
        let p = Probe {
            kernel: "test".into(),
            features: vec![
                feature("uffd-move", "UFFDIO_MOVE", true, "here"),
                feature("fio", "fio", false, "not on PATH"),
            ],
            vm: VmRuntime::get().capabilities().clone(),
        };
        let skip = |c: &str| Skip {
            capability: c.into(),
            test: format!("t::{c}"),
            why: "because".into(),
        };
        let (ok, failed) = p.check_skips(&[skip("fio"), skip("uffd-move"), skip("warp-drive")]);
        assert_eq!(ok.len(), 1, "{ok:?}");
        assert!(
            ok[0].contains("t::fio") && ok[0].contains("not on PATH"),
            "{ok:?}"
        );
        assert_eq!(failed.len(), 2, "{failed:?}");
        assert!(
            failed[0].contains("t::uffd-move") && failed[0].contains("says it is here"),
            "{failed:?}"
        );
        assert!(failed[1].contains("does not know"), "{failed:?}");
    }

    #[test]
    fn every_capability_a_test_may_skip_for_is_probed() {
        let dir = tempfile::tempdir().unwrap();
        let p = probe(dir.path());
        for c in zcio_vm::skip::Capability::ALL {
            assert!(
                p.features.iter().any(|f| f.id == c.id()),
                "the probe has no feature {}",
                c.id()
            );
        }
    }
}
