//! Byte-exact delivery for every semantics x module x length, at page offset 0 and non-zero.

use zcio_genie::memnet::{self, MemnetEndpoint};
use zcio_genie::profile::Profile;
use zcio_genie::stream::{self, ModuleKind, StreamEnd};
use zcio_genie::{InputBuffering, Region, Semantics};
use zcio_testkit::data::bytes;
use zcio_vm::{MapOptions, Mapping, page_size};

const LENGTHS: [usize; 7] = [1, 100, 4095, 4096, 4097, 60 * 1024, 1 << 20];

/// A buffer of `len` bytes at page offset `off` inside a fresh mapping.
struct Buf {
    map: Mapping,
    off: usize,
    len: usize,
}

impl Buf {
    fn new(len: usize, off: usize) -> Buf {
        Buf {
            map: Mapping::anonymous(len + off + page_size(), MapOptions::default()).unwrap(),
            off,
            len,
        }
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.map.as_mut_slice()[self.off..self.off + self.len]
    }
}

fn memnet_once(
    tx: &mut MemnetEndpoint,
    rx: &mut MemnetEndpoint,
    sem: Semantics,
    len: usize,
    off: usize,
    input: InputBuffering,
) {
    let data = bytes(len, (len * 31 + off) as u64 ^ sem as u64);
    std::thread::scope(|s| {
        let d = &data;
        s.spawn(move || {
            if sem.allocation() == zcio_genie::semantics::Allocation::System {
                let r = Region::from_slice(d).unwrap();
                let (t, _) = tx.send_region(sem, r).unwrap();
                tx.wait(t).unwrap();
            } else {
                let mut b = Buf::new(len, off);
                b.get().copy_from_slice(d);
                let (t, _) = tx.send(sem, b.get()).unwrap();
                tx.wait(t).unwrap();
            }
        });
        if sem.allocation() == zcio_genie::semantics::Allocation::System {
            let (r, _) = rx.recv_region(sem, input).unwrap();
            assert!(
                r.as_slice() == &d[..],
                "{sem} memnet len {len} off {off}: data differs"
            );
            assert!(
                r.page_span()[len..].iter().all(|&b| b == 0),
                "{sem}: stale bytes in the tail"
            );
        } else {
            let mut b = Buf::new(len, off);
            let (n, _) = rx.recv(sem, b.get(), input).unwrap();
            assert_eq!(n, len);
            assert!(
                b.get() == &d[..],
                "{sem} memnet {input} len {len} off {off}: data differs"
            );
        }
    });
}

/// Page offsets: aligned; a head page mostly data (reverse copyout swaps it); a head page
/// mostly not (copied).
const OFFSETS: [usize; 3] = [0, 100, 3000];

/// The calibrated profile (which may say copying wins everywhere here) and one that takes the
/// VM paths (TCOW, swapping, reverse copyout) from the first page up.
fn profiles() -> [std::sync::Arc<Profile>; 2] {
    [Profile::current(), Profile::zero_copy()]
}

#[test]
fn memnet_every_semantics_length_offset_and_buffering() {
    let (mut a, mut b) = memnet::pair().unwrap();
    for profile in profiles() {
        a.set_profile(profile.clone());
        b.set_profile(profile.clone());
        for sem in Semantics::ALL {
            for len in LENGTHS {
                for off in OFFSETS {
                    for input in InputBuffering::ALL {
                        memnet_once(&mut a, &mut b, sem, len, off, input);
                    }
                }
            }
        }
    }
    // The other direction works too.
    memnet_once(
        &mut b,
        &mut a,
        Semantics::EmulatedCopy,
        1 << 20,
        0,
        InputBuffering::EarlyDemux,
    );
}

fn stream_once(
    tx: &mut StreamEnd,
    rx: &mut StreamEnd,
    sem: Semantics,
    len: usize,
    off: usize,
    input: InputBuffering,
) {
    let data = bytes(len, (len * 7 + off) as u64 ^ sem as u64);
    let system = sem.allocation() == zcio_genie::semantics::Allocation::System;
    let send = |tx: &mut StreamEnd| {
        if system {
            tx.send_region(sem, Region::from_slice(&data).unwrap())
                .unwrap();
        } else {
            let mut b = Buf::new(len, off);
            b.get().copy_from_slice(&data);
            tx.send(sem, b.get()).unwrap();
        }
    };
    let recv = |rx: &mut StreamEnd| {
        if system {
            let (r, _) = rx.recv_region(sem, len).unwrap();
            assert!(
                r.as_slice() == &data[..],
                "{sem} {} len {len}: data differs",
                rx.kind()
            );
            assert!(r.page_span()[len..].iter().all(|&b| b == 0));
        } else {
            let mut b = Buf::new(len, off);
            rx.recv(sem, b.get(), input).unwrap();
            assert!(
                b.get() == &data[..],
                "{sem} {} {input} len {len} off {off}: data differs",
                rx.kind()
            );
        }
    };
    if tx.kind() == ModuleKind::File {
        send(tx);
        recv(tx);
        let _ = rx;
    } else {
        std::thread::scope(|s| {
            s.spawn(|| send(tx));
            recv(rx);
        });
    }
}

#[test]
fn kernel_modules_every_semantics_length_and_offset() {
    for kind in [
        ModuleKind::Unix,
        ModuleKind::Tcp,
        ModuleKind::Udp,
        ModuleKind::Pipe,
    ] {
        let (mut tx, mut rx) = stream::pair(kind).unwrap();
        for sem in Semantics::ALL {
            for len in LENGTHS {
                for off in OFFSETS {
                    stream_once(&mut tx, &mut rx, sem, len, off, InputBuffering::EarlyDemux);
                }
            }
        }
    }
}

#[test]
fn files_every_semantics_length_and_offset() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for (sem, profile) in Semantics::ALL
        .into_iter()
        .flat_map(|s| profiles().map(|p| (s, p)))
    {
        for len in LENGTHS {
            for off in OFFSETS {
                let mut f = StreamEnd::file(&dir.path().join("f")).unwrap();
                f.set_profile(profile.clone());
                let (mut dummy, _) = (StreamEnd::file(&dir.path().join("g")).unwrap(), ());
                stream_once(
                    &mut f,
                    &mut dummy,
                    sem,
                    len,
                    off,
                    InputBuffering::EarlyDemux,
                );
            }
        }
    }
}
