//! What the tests against the real kernel share: the runtime where TCOW moves pages, and huge
//! buffers, each said as a skip where this machine lacks it.

// Each test file uses what it needs of this module.
#![allow(dead_code)]

use zcio_vm::runtime::TcowMode;
use zcio_vm::{MapOptions, Mapping, VmRuntime};

/// The runtime, where its TCOW moves pages (`UFFDIO_MOVE`); `None` (after saying why) where it
/// does not.
pub fn tcow_by_moving() -> Option<&'static VmRuntime> {
    moving_pages(
        |rt| rt.capabilities().tcow == TcowMode::UffdMove,
        |rt| format!("TCOW mode {:?}", rt.capabilities().tcow),
    )
}

/// The runtime, where it swaps pages (`UFFDIO_MOVE`); `None` (after saying why) where it does
/// not.
pub fn swapping() -> Option<&'static VmRuntime> {
    moving_pages(
        |rt| rt.capabilities().swap,
        |rt| format!("page swapping unavailable: {:?}", rt.capabilities().reasons),
    )
}

/// The runtime, where `can` says it moves pages as the test needs; `None` where it does not,
/// after skipping for `UFFDIO_MOVE` with the reason `why` gives.
fn moving_pages(
    can: impl FnOnce(&VmRuntime) -> bool,
    why: impl FnOnce(&VmRuntime) -> String,
) -> Option<&'static VmRuntime> {
    let rt = VmRuntime::get();
    if !can(rt) {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::UffdMove, &why(rt));
        return None;
    }
    Some(rt)
}

/// What a test of TCOW at 2 MiB needs: the runtime where TCOW moves pages ([`tcow_by_moving`])
/// and a [`huge_buffer`] of `pmds` huge pages; `None` (after saying why) where either is
/// missing. Where both are there, the runtime must do TCOW at 2 MiB.
pub fn tcow_at_2mib(pmds: usize) -> Option<(&'static VmRuntime, Mapping)> {
    let rt = tcow_by_moving()?;
    let m = huge_buffer(pmds)?;
    assert!(rt.huge_tcow(), "{:?}", rt.capabilities().reasons);
    Some((rt, m))
}

/// A huge (2 MiB-aligned, populated, PMD-mapped) buffer of `pmds` huge pages; `None` (after
/// saying why) where this kernel gives no huge pages.
pub fn huge_buffer(pmds: usize) -> Option<Mapping> {
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::HugePages, &why);
        return None;
    }
    Some(
        Mapping::anonymous(
            pmds * zcio_vm::page::HUGE_PAGE_SIZE,
            MapOptions::POPULATED_2M,
        )
        .unwrap(),
    )
}
