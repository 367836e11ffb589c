//! The reserved region: reserved once per process at the same address, paths mapped inside
//! it replace the placeholder and put it back when they go, overlapping paths are refused by
//! name, and a process where the region is taken gets an error naming what holds it.

use std::os::fd::AsFd;
use zcio_vm::protect::Access;
use zcio_vm::reserve::{self, REGION_ADDR, REGION_LEN};
use zcio_vm::shared::SharedWords;

/// The `/proc/self/maps` line holding `addr`.
fn maps_line(addr: usize) -> String {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .find(|l| {
            let (a, b) = l.split_once(' ').unwrap().0.split_once('-').unwrap();
            let (a, b) = (
                usize::from_str_radix(a, 16).unwrap(),
                usize::from_str_radix(b, 16).unwrap(),
            );
            a <= addr && addr < b
        })
        .unwrap_or("")
        .to_string()
}

#[test]
fn paths_map_inside_the_region_and_give_their_range_back_reserved() {
    let region = reserve::region().unwrap();
    assert!(
        maps_line(REGION_ADDR + REGION_LEN - 1).contains("---p"),
        "the placeholder: {}",
        maps_line(REGION_ADDR + REGION_LEN - 1)
    );
    let len = 1 << 20;
    let addr = region.random_address(len);
    assert!(reserve::contains(addr, len));
    let fd = zcio_vm::mapping::memfd("zcio-reserve-test", len).unwrap();
    let before = region.in_use();
    let m = SharedWords::map(fd.as_fd(), 0, len, addr, Access::ReadWrite).unwrap();
    assert_eq!(m.addr(), addr);
    m.store(8, 0xfeed);
    assert_eq!(m.load(8), 0xfeed);
    assert!(maps_line(addr).contains("rw-s"), "{}", maps_line(addr));
    // Another mapping over any part of it is refused, by name, and nothing changes.
    let e = SharedWords::map(fd.as_fd(), 0, 4096, addr + len - 4096, Access::ReadOnly)
        .unwrap_err()
        .to_string();
    assert!(e.contains("overlaps"), "{e}");
    assert_eq!(m.load(8), 0xfeed);
    drop(m);
    assert_eq!(region.in_use(), before);
    assert!(
        maps_line(addr).contains("---p"),
        "reserved again: {}",
        maps_line(addr)
    );
    // The range can be mapped again, and sees the memory as it was.
    let again = SharedWords::map(fd.as_fd(), 0, len, addr, Access::ReadOnly).unwrap();
    assert_eq!(again.load(8), 0xfeed);
}

#[test]
fn a_process_where_the_region_is_taken_gets_an_error_naming_the_holder() {
    const CHILD: &str = "ZCIO_RESERVE_TAKEN_CHILD";
    if std::env::var_os(CHILD).is_some() {
        // Something of this process sits in the region before zcio reserves it.
        let at = REGION_ADDR + (1 << 30);
        // SAFETY: a new private anonymous mapping where nothing is mapped (MAP_FIXED_NOREPLACE
        // replaces nothing); it is never read or written, and lives until the process ends.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        assert_eq!(p as usize, at, "the squatter is in place");
        let e = reserve::region().unwrap_err().to_string();
        assert!(
            e.contains("taken in this process by") && e.contains(&format!("{at:x}")),
            "{e}"
        );
        // A path inside the region cannot be mapped here: the same error, every time.
        let fd = zcio_vm::mapping::memfd("zcio-reserve-test", 4096).unwrap();
        let e2 = SharedWords::map(fd.as_fd(), 0, 4096, REGION_ADDR, Access::ReadOnly)
            .unwrap_err()
            .to_string();
        assert!(e2.contains("taken in this process by"), "{e2}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_process_where_the_region_is_taken_gets_an_error_naming_the_holder",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the child ran the check: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
