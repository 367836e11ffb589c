//! A second process for the fbuf tests: a receiver on a path another process created, or an
//! originator that misbehaves. Not a user-facing tool.
//!
//! - `fbuf-peer receive FD_PATH ADDR CHUNK QUOTA CACHED VOLATILE REF_ADDR REF_LEN`: join the
//!   path read-only (opening the creator's memfd through `/proc/PID/fd/N`), receive the fbuf
//!   and print its bytes as hex on one line.
//! - `fbuf-peer receive-then-write ...` (same arguments): then try to write what was received:
//!   first by asking for a writable mapping (refused: printed), then by storing through the
//!   read-only mapping (faults: the process dies by SIGSEGV).
//! - `fbuf-peer originator-writes-after-send VOLATILE`: make a path, send an fbuf, then write it.

use std::os::fd::AsFd;
use zcio_fbufs::path::{FbufRef, Originator, PathInfo, PathMemory, Receiver, Variant};
use zcio_fbufs::region::{RegionRead, RegionWrite};

fn arg<T: std::str::FromStr>(a: &[String], i: usize) -> T {
    a.get(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("argument {i} missing or malformed: {a:?}"))
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some(mode @ ("receive" | "receive-then-write")) => {
            let fd = rustix::fs::open(
                a[2].as_str(),
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .expect("open the path's memfd read-only");
            let info = PathInfo {
                addr: arg(&a, 3),
                chunk_bytes: arg(&a, 4),
                quota_chunks: arg(&a, 5),
                variant: Variant {
                    cached: arg(&a, 6),
                    volatile: arg(&a, 7),
                },
            };
            let r = FbufRef {
                addr: arg(&a, 8),
                len: arg(&a, 9),
            };
            let mut rx = Receiver::new(fd, info).expect("join the path");
            rx.receive(r).expect("receive");
            let mut buf = vec![0u8; r.len as usize];
            assert!(rx.read_bytes(r.addr, &mut buf), "received fbuf unreadable");
            println!(
                "{}",
                buf.iter().map(|b| format!("{b:02x}")).collect::<String>()
            );
            if mode == "receive-then-write" {
                let fd = rustix::fs::open(
                    a[2].as_str(),
                    rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .expect("open again");
                let elsewhere = zcio_vm::arena::random_address(info.len());
                match zcio_vm::shared::SharedWords::map(
                    fd.as_fd(),
                    0,
                    info.len(),
                    elsewhere,
                    zcio_vm::protect::Access::ReadWrite,
                ) {
                    Ok(_) => println!("writable mapping GRANTED"),
                    Err(e) => println!("writable mapping refused: {e}"),
                }
                let ro = zcio_vm::shared::SharedWords::map(
                    fd.as_fd(),
                    0,
                    info.len(),
                    elsewhere,
                    zcio_vm::protect::Access::ReadOnly,
                )
                .expect("read-only mapping");
                println!("storing");
                use std::io::Write;
                std::io::stdout().flush().ok();
                ro.store((r.addr - info.addr as u64) as usize, 0xbad);
                println!("store went through");
            }
        }
        Some("originator-writes-after-send") => {
            let volatile: bool = arg(&a, 2);
            let p = PathMemory::create(
                1 << 16,
                4,
                Variant {
                    cached: true,
                    volatile,
                },
            )
            .expect("path");
            let mut o = Originator::new(p.fd(), p.info()).expect("originator");
            let f = o.alloc(100).expect("alloc");
            o.write(&f, 0, b"before").expect("write");
            let r = o.send(f, 1).expect("send");
            println!("sent");
            use std::io::Write;
            std::io::stdout().flush().ok();
            let ok = o.write_bytes(r.addr, b"after!");
            println!("write after send returned {ok}");
        }
        _ => {
            eprintln!("usage: see the source");
            std::process::exit(2);
        }
    }
}
