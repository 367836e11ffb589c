//! Start-up probes of the kernel features zcio uses. A missing feature yields a fallback and a
//! reason, never a failure.

use serde::{Deserialize, Serialize};
use std::path::Path;
use zcio_vm::VmRuntime;
use zcio_vm::uffd::{Features, Userfaultfd};

/// One probed feature.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Feature {
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

fn feature(name: &str, available: bool, detail: impl Into<String>) -> Feature {
    Feature {
        name: name.into(),
        available,
        detail: detail.into(),
    }
}

/// Probe the features; `dir` is where file transfers will go (for `O_DIRECT`).
pub fn probe(dir: &Path) -> Probe {
    let mut f = Vec::new();
    match Userfaultfd::probe() {
        Ok(feat) => {
            f.push(feature(
                "userfaultfd write-protect",
                feat.contains(Features::WP),
                if feat.contains(Features::WP) {
                    "TCOW by write-protect faults"
                } else {
                    "missing: TCOW falls back to mprotect + SIGSEGV"
                },
            ));
            f.push(feature(
                "UFFDIO_MOVE",
                feat.contains(Features::MOVE),
                if feat.contains(Features::MOVE) {
                    "page swapping and TCOW page moves"
                } else {
                    "missing (Linux < 6.8): swaps become copies, TCOW sleeps on write"
                },
            ));
        }
        Err(e) => f.push(feature(
            "userfaultfd",
            false,
            format!("{e}: TCOW falls back to mprotect + SIGSEGV, swaps become copies"),
        )),
    }
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let mode = thp
        .split_whitespace()
        .find(|w| w.starts_with('['))
        .unwrap_or("[unknown]")
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    f.push(feature(
        "transparent huge pages",
        mode == "always" || mode == "madvise",
        format!("mode {mode}"),
    ));
    match crate::stream::direct_align(dir) {
        Ok(a) => f.push(feature(
            "O_DIRECT",
            true,
            format!(
                "{}: memory alignment {}, offset alignment {}",
                dir.display(),
                a.mem,
                a.offset
            ),
        )),
        Err(r) => f.push(feature(
            "O_DIRECT",
            false,
            format!("{r}: file transfers use the page cache"),
        )),
    }
    match io_uring::IoUring::new(2) {
        Ok(_) => f.push(feature("io_uring", true, "available")),
        Err(e) => f.push(feature(
            "io_uring",
            false,
            format!("{e}: synchronous system calls are used"),
        )),
    }
    f.push(feature(
        "pipe-max-size",
        true,
        format!("{} bytes", zcio_vm::wire::pipe_max_size()),
    ));
    let zc = crate::zerocopy::loopback();
    f.push(feature(
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
    ));
    Probe {
        kernel: rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned(),
        features: f,
        vm: VmRuntime::get().capabilities().clone(),
    }
}
