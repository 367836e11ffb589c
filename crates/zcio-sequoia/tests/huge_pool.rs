//! Containers from a pool of files in 2 MiB pages: each file is whole 2 MiB pages long, held
//! in huge pages where the kernel gives them (the sender's mapping of it is then PMD-mapped, a
//! page-table entry per 2 MiB), filled in place or from bytes, sealed, and read at the
//! receiver byte for byte; where huge pages are off, the files come in 4 KiB pages and the
//! pool says why, and every byte still arrives.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use zcio_sequoia::container::Domain;
use zcio_sequoia::pool::Pool;
use zcio_vm::huge::{Granule, scan, whole_pmds};
use zcio_vm::page::{HUGE_PAGE_SIZE, RawRange};

const MIB: usize = 1 << 20;

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(11) as u8 ^ salt)
        .collect()
}

/// Why the kernel may refuse 2 MiB pages for a memory file here: huge pages off for zcio or
/// the machine, or denied to shared memory (`shmem_enabled` = deny).
fn refusal_expected() -> Option<String> {
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        return Some(why);
    }
    let shmem = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .unwrap_or_default();
    shmem
        .contains("[deny]")
        .then(|| "huge pages denied to shared memory (shmem_enabled = deny)".into())
}

/// Two containers through a socket from a pool of 3 MiB files: one drawn in place, one filled
/// from bytes. Returns the pool's account of its files.
fn through_a_socket(pool: &Pool, expect_huge: bool) -> zcio_sequoia::pool::Granules {
    let len = 3 * MIB;
    assert_eq!(pool.len(), 4 * MIB, "a file is whole 2 MiB pages");
    let (tx, rx) = UnixStream::pair().unwrap();
    let (mut a, mut b) = (Domain::new(), Domain::new());

    let drawn = pattern(len, 0x5a);
    let id = a.alloc_pooled(pool, len).unwrap();
    let bytes = a.map(id).unwrap();
    assert!(bytes.iter().all(|&x| x == 0), "a fresh file is zeroed");
    bytes.copy_from_slice(&drawn);
    let range = whole_pmds(RawRange {
        addr: bytes.as_ptr() as usize,
        len: bytes.len(),
    });
    if expect_huge {
        assert_eq!(range.len, HUGE_PAGE_SIZE, "the mapping is aligned to 2 MiB");
        let got = scan(range).granule();
        assert_eq!(got, Granule::Huge, "the sender's mapping is PMD-mapped");
    } else if range.len > 0 {
        let got = scan(range).granule();
        assert_eq!(got, Granule::Base, "4 KiB pages, as the pool said");
    }
    a.write(tx.as_fd(), id).unwrap();

    let filled = pattern(len, 0xa5);
    let id = a.alloc_filled(pool, &filled).unwrap();
    a.write(tx.as_fd(), id).unwrap();

    for want in [&drawn, &filled] {
        let got = b.read(rx.as_fd(), 0, true).unwrap();
        assert_eq!(b.len(got).unwrap(), len);
        let seen = b.map_read(got).unwrap();
        if let Some(i) = seen.iter().zip(want.iter()).position(|(x, y)| x != y) {
            panic!("byte {i} of a container differs at the receiver");
        }
        b.free(got).unwrap();
    }
    pool.granules()
}

#[test]
fn a_huge_pool_hands_out_files_in_2mib_pages_filled_in_place_or_from_bytes_byte_exact() {
    let refusal = refusal_expected();
    let pool = Pool::huge(3 * MIB, 2).unwrap();
    let g = through_a_socket(&pool, refusal.is_none());
    match refusal {
        None => {
            assert_eq!(
                (g.huge, g.base),
                (2, 0),
                "the kernel refused 2 MiB pages: {:?}",
                g.refused
            );
            assert_eq!(g.refused, None);
        }
        Some(why) => {
            eprintln!("2 MiB pages not expected here ({why}); the pool said {g:?}");
            assert_eq!((g.huge, g.base), (0, 2));
            assert!(g.refused.is_some_and(|r| !r.is_empty()));
        }
    }
}

const CHILD: &str = "ZCIO_TEST_HUGE_POOL_CHILD";

#[test]
fn a_huge_pool_where_huge_pages_are_off_gives_4k_files_says_why_and_loses_nothing() {
    let test = "a_huge_pool_where_huge_pages_are_off_gives_4k_files_says_why_and_loses_nothing";
    if std::env::var_os(CHILD).is_some() {
        let pool = Pool::huge(3 * MIB, 2).unwrap();
        let g = through_a_socket(&pool, false);
        assert_eq!((g.huge, g.base), (0, 2), "{g:?}");
        let why = g
            .refused
            .expect("the pool says why its files are in 4 KiB pages");
        assert!(why.contains("ZCIO_VM_DISABLE"), "{why}");
        println!("child done: {why}");
        return;
    }
    // `ZCIO_VM_DISABLE` is read once per process: the scenario runs in a child.
    let out = zcio_testkit::child::rerun(test, &[(CHILD, "1"), ("ZCIO_VM_DISABLE", "huge")]);
    assert!(
        out.finished("child done"),
        "the child without huge pages failed ({}):\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
}

#[test]
fn a_huge_pool_refuses_a_container_longer_than_its_files_by_name() {
    let pool = Pool::huge(100_000, 1).unwrap();
    assert_eq!(pool.len(), 2 * MIB);
    let mut a = Domain::new();
    let err = a.alloc_pooled(&pool, 2 * MIB + 1).unwrap_err().to_string();
    assert!(err.contains(&(2 * MIB + 1).to_string()), "{err}");
    let err = a
        .alloc_filled(&pool, &vec![1u8; 2 * MIB + 4096])
        .unwrap_err()
        .to_string();
    assert!(err.contains("bytes"), "{err}");
    // Nothing was taken from the pool by the refusals.
    assert_eq!(pool.granules().huge + pool.granules().base, 0);
}
