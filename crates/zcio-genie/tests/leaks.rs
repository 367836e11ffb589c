//! Resource accounting: these run alone in their own process (one test), so that descriptor
//! and mapping counts are not disturbed by other tests.

use zcio_genie::memnet::MemnetEndpoint;
use zcio_genie::stream::StreamEnd;
use zcio_genie::{GenieError, InputBuffering, Region, Semantics};
use zcio_vm::{MapOptions, Mapping, page_size};

mod common;
use common::forced_pair;

#[test]
fn resources() {
    bad_input_is_a_clear_error_and_leaks_nothing();
    vma_count_stays_bounded_over_many_transfers();
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn bad_input_is_a_clear_error_and_leaks_nothing() {
    let (mut tx, mut rx) = forced_pair();
    let (mut fds, mut vmas) = (0, 0);
    for round in 0..6 {
        if round == 2 {
            // Counted after a first round, which starts the runtime and fills the pools.
            fds = open_fds();
            vmas = zcio_vm::mapping::vma_count();
        }
        let e = tx.send(Semantics::EmulatedCopy, &[]).unwrap_err();
        assert!(e.to_string().contains("length 0"), "{e}");
        let e = Region::alloc(0).unwrap_err();
        assert!(matches!(e, GenieError::InvalidArgument { arg: "len", .. }));
        let e = Region::alloc(1 << 50).unwrap_err();
        assert!(e.to_string().contains("exceeds"), "{e}");
        let e = tx.send(Semantics::Move, &[1]).unwrap_err();
        assert!(e.to_string().contains("send_region"), "{e}");
        let mut small = [0u8; 10];
        let e = rx
            .recv(Semantics::Copy, &mut small[..0], InputBuffering::EarlyDemux)
            .unwrap_err();
        assert!(matches!(e, GenieError::InvalidArgument { arg: "buf", .. }));
        // A message longer than the buffer: refused, naming its length, and kept queued for
        // a buffer that fits it.
        let big = vec![9u8; 100];
        let (t, _) = tx.send(Semantics::Copy, &big).unwrap();
        let e = rx
            .recv(Semantics::Copy, &mut small, InputBuffering::EarlyDemux)
            .unwrap_err();
        assert!(
            matches!(
                e,
                GenieError::TooSmall {
                    needed: 100,
                    got: 10
                }
            ),
            "{e}"
        );
        assert_eq!(rx.peek_len().unwrap(), 100);
        assert_eq!(rx.peek_len().unwrap(), 100, "peeking takes nothing");
        let (got, _) = rx
            .recv_alloc(Semantics::Copy, InputBuffering::EarlyDemux)
            .unwrap();
        assert_eq!(&got[..], &big[..]);
        tx.wait(t).unwrap();
        let (t, _) = tx.send(Semantics::Copy, &[4u8; 10]).unwrap();
        rx.recv(Semantics::Copy, &mut small, InputBuffering::EarlyDemux)
            .unwrap();
        tx.wait(t).unwrap();
        assert_eq!(small, [4u8; 10]);
        input_into_protected_memory_is_refused_and_loses_nothing(&mut tx, &mut rx);
        wrong_kind_of_descriptor_is_a_clear_error();
    }
    assert_eq!(open_fds(), fds, "descriptors leaked");
    assert_eq!(zcio_vm::mapping::vma_count(), vmas, "mappings leaked");
    // A peer that disappears.
    drop(rx);
    let e = tx
        .send(Semantics::EmulatedCopy, &vec![1u8; 1 << 20])
        .unwrap_err();
    assert!(matches!(e, GenieError::PeerGone { .. }), "{e}");
    // An invalid descriptor for a module: a read-only file cannot take output.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = dir.path().join("ro");
    std::fs::write(&p, b"x").unwrap();
    let ro: std::os::fd::OwnedFd = std::fs::File::open(&p).unwrap().into();
    let e = StreamEnd::from_fd(zcio_genie::stream::ModuleKind::Pipe, ro).unwrap_err();
    assert!(
        matches!(e, GenieError::InvalidArgument { arg: "fd", .. })
            && e.to_string().contains("not a pipe"),
        "{e}"
    );
    // A pipe end that cannot take output (the read end).
    let p = zcio_vm::wire::Pipe::new(4096).unwrap();
    let mut s = StreamEnd::from_fd(zcio_genie::stream::ModuleKind::Pipe, p.rx).unwrap();
    let e = s.send(Semantics::Copy, &[1, 2, 3]).unwrap_err();
    assert!(e.to_string().contains("write"), "{e}");
}

/// An input buffer in read-only or inaccessible memory (a C caller could pass one): a clear error
/// naming the buffer, no fault, and the message stays for the next input.
fn input_into_protected_memory_is_refused_and_loses_nothing(
    tx: &mut MemnetEndpoint,
    rx: &mut MemnetEndpoint,
) {
    use zcio_vm::protect::{Access, set_access};
    let len = 3 * page_size();
    for access in [Access::ReadOnly, Access::None] {
        for sem in [
            Semantics::Copy,
            Semantics::EmulatedCopy,
            Semantics::Share,
            Semantics::EmulatedShare,
        ] {
            // The message in a mapping of its own: the runtime forgets its registration when it
            // is unmapped (a heap buffer's registration would outlive the buffer and split the
            // heap's mapping wherever the allocator puts the next one).
            let mut src = Mapping::anonymous(len, MapOptions::default()).unwrap();
            src.as_mut_slice().fill(0x3C);
            let data = src.as_slice();
            let (t, _) = tx.send(sem, data).unwrap();
            let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
            // SAFETY: the test plays a C application handing over memory it may not write; the
            // mapping is not touched from Rust until access is restored below.
            unsafe { set_access(m.range(), access) }.unwrap();
            let e = rx
                .recv(sem, m.as_mut_slice(), InputBuffering::EarlyDemux)
                .unwrap_err();
            assert!(
                matches!(e, GenieError::InvalidArgument { arg: "buf", .. })
                    && e.to_string().contains("not writable"),
                "{sem} {access:?}: {e}"
            );
            // SAFETY: restores the access the mapping was created with.
            unsafe { set_access(m.range(), Access::ReadWrite) }.unwrap();
            let (n, _) = rx
                .recv(sem, m.as_mut_slice(), InputBuffering::EarlyDemux)
                .unwrap();
            tx.wait(t).unwrap();
            assert_eq!(n, len);
            assert_eq!(m.as_slice(), data, "{sem}: the message was kept");
        }
    }
    // The same through a kernel module (a pipe).
    let (mut a, mut b) = zcio_genie::stream::pair(zcio_genie::stream::ModuleKind::Pipe).unwrap();
    a.send(Semantics::Copy, &[5u8; 100]).unwrap();
    let mut m = Mapping::anonymous(page_size(), MapOptions::default()).unwrap();
    // SAFETY: as above.
    unsafe { set_access(m.range(), Access::ReadOnly) }.unwrap();
    let e = b
        .recv(
            Semantics::Copy,
            &mut m.as_mut_slice()[..100],
            InputBuffering::EarlyDemux,
        )
        .unwrap_err();
    assert!(e.to_string().contains("not writable"), "{e}");
    // SAFETY: as above.
    unsafe { set_access(m.range(), Access::ReadWrite) }.unwrap();
    b.recv(
        Semantics::Copy,
        &mut m.as_mut_slice()[..100],
        InputBuffering::EarlyDemux,
    )
    .unwrap();
    assert!(m.as_slice()[..100].iter().all(|&x| x == 5));
}

/// A descriptor of the wrong kind for its module (a regular file handed to the TCP module).
fn wrong_kind_of_descriptor_is_a_clear_error() {
    use zcio_genie::stream::ModuleKind;
    let f: std::os::fd::OwnedFd = tempfile::tempfile().unwrap().into();
    let e = StreamEnd::from_fd(ModuleKind::Tcp, f).unwrap_err();
    assert!(
        matches!(e, GenieError::InvalidArgument { arg: "fd", .. })
            && e.to_string().contains("tcp module")
            && e.to_string().contains("not a socket"),
        "{e}"
    );
    // A UDP socket handed to the TCP module.
    let (u, _) = zcio_genie::stream::pair_fds(ModuleKind::Udp).unwrap();
    let e = StreamEnd::from_fd(ModuleKind::Tcp, u).unwrap_err();
    assert!(e.to_string().contains("IPv4 datagram socket"), "{e}");
}

fn vma_count_stays_bounded_over_many_transfers() {
    let (mut tx, mut rx) = forced_pair();
    let len = 64 * 1024;
    let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
    let mut got = Mapping::anonymous(len, MapOptions::default()).unwrap();
    let mut after_warmup = 0;
    for i in 0..5000 {
        m.as_mut_slice()[i % len] = i as u8;
        let (t, _) = tx.send(Semantics::EmulatedCopy, m.as_slice()).unwrap();
        rx.recv(
            Semantics::EmulatedCopy,
            got.as_mut_slice(),
            InputBuffering::EarlyDemux,
        )
        .unwrap();
        tx.wait(t).unwrap();
        if i == 100 {
            after_warmup = zcio_vm::mapping::vma_count();
        }
    }
    assert_eq!(got.as_slice(), m.as_slice());
    assert!(
        zcio_vm::mapping::vma_count() <= after_warmup + 2,
        "VMAs grew from {after_warmup} to {}",
        zcio_vm::mapping::vma_count()
    );
}
