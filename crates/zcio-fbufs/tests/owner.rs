//! The fbuf region's owner: chunks granted against a path's quota and the region's budget, and
//! taken back when every process of a path is gone, whatever way it went.

mod peer;

use peer::peer;
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use zcio_fbufs::owner::{Owner, OwnerClient};
use zcio_fbufs::path::{Originator, Variant};
use zcio_fbufs::region::RegionRead;
use zcio_fbufs::{pattern, pattern_len};

/// An owner serving on a thread, until the [`Serving`] returned is stopped: where it listens.
fn owner(dir: &std::path::Path, budget: usize) -> (std::path::PathBuf, Serving) {
    let at = dir.join("owner");
    let mut o = Owner::bind(&at, 256 * 1024, budget).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let t = std::thread::spawn(move || {
        o.serve(Duration::from_millis(20), |_| s.load(Ordering::Relaxed))
            .unwrap()
    });
    (at, Serving { stop, t })
}

/// The owner's thread, serving until [`Serving::stop`].
struct Serving {
    stop: Arc<AtomicBool>,
    t: std::thread::JoinHandle<()>,
}

impl Serving {
    /// Stop serving and wait for the thread to end (a failure of its serving fails the test).
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.t.join().unwrap();
    }
}

fn wait_stats(c: &mut OwnerClient, want: (usize, usize)) {
    let t = Instant::now();
    loop {
        let got = c.stats().unwrap();
        if got == want {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "owner stats stayed {got:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn grants_stop_at_the_quota_and_the_budget_and_other_paths_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (at, serving) = owner(dir.path(), 6);
    let mut a = OwnerClient::connect(&at).unwrap();
    let ia = a.create_path(4, Variant::CACHED_VOLATILE).unwrap();
    let mut oa = Originator::granted_by_owner(ia).unwrap();
    // Nothing granted yet: the allocator asks, and gets, a chunk.
    assert!(oa.alloc(100).is_err());
    let f = a.alloc(&mut oa, 100).unwrap();
    assert_eq!(oa.granted(), 1);
    oa.free(f).unwrap();
    assert_eq!(a.grant(ia.addr as u64, 3).unwrap(), 4);
    let e = a.grant(ia.addr as u64, 1).unwrap_err().to_string();
    assert!(e.contains("quota of 4 chunks"), "{e}");
    // Another path gets the two chunks left of the budget of six, then no more.
    let mut b = OwnerClient::connect(&at).unwrap();
    let ib = b.create_path(4, Variant::CACHED_VOLATILE).unwrap();
    assert_eq!(b.grant(ib.addr as u64, 2).unwrap(), 2);
    let e = b.grant(ib.addr as u64, 1).unwrap_err().to_string();
    assert!(e.contains("0 chunks left"), "{e}");
    // Nobody is granted chunks of a path it did not create, nor of one that does not exist.
    let e = b.grant(ia.addr as u64, 1).unwrap_err().to_string();
    assert!(e.contains("only the originator"), "{e}");
    let mut c = OwnerClient::connect(&at).unwrap();
    let e = c.join_path(0x1000).unwrap_err().to_string();
    assert!(e.contains("no path at 0x1000"), "{e}");
    assert_eq!(c.stats().unwrap(), (6, 2));
    // The first path ends (its only process lets go): its four chunks are back for the second.
    drop(oa);
    drop(a);
    wait_stats(&mut c, (2, 1));
    assert_eq!(b.grant(ib.addr as u64, 2).unwrap(), 4);
    serving.stop();
}

#[test]
fn an_originator_killed_mid_stream_leaves_its_chunks_to_its_receivers_until_they_go() {
    let dir = tempfile::tempdir().unwrap();
    let (at, serving) = owner(dir.path(), 64);
    let mut stats = OwnerClient::connect(&at).unwrap();
    assert_eq!(stats.stats().unwrap(), (0, 0));
    let link = dir.path().join("link");
    let l = UnixListener::bind(&link).unwrap();
    let (mut originator, mut rx) = peer()
        .args([
            "owner-originator",
            at.to_str().unwrap(),
            link.to_str().unwrap(),
            "12",
        ])
        .offering(&l);
    // This receiver holds the path through the owner too.
    let mut member = OwnerClient::connect(&at).unwrap();
    member.join_path(rx.info().addr as u64).unwrap();
    let got: Vec<_> = (0..12).map(|_| rx.recv().unwrap().unwrap()).collect();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(originator.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("sent 12 granted "), "{line}");
    let granted: usize = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(granted >= 1);
    assert_eq!(stats.stats().unwrap(), (granted, 1));
    originator.kill().unwrap();
    originator.wait().unwrap();
    // The originator is gone; its fbufs are still there to read, byte for byte, and the path's
    // chunks stay accounted to it while this receiver holds it.
    for (i, r) in got.iter().enumerate() {
        let mut buf = vec![0u8; r.len as usize];
        assert!(rx.receiver.read_bytes(r.addr, &mut buf));
        assert!(buf == pattern(i as u64, pattern_len(i as u64)), "fbuf {i}");
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(stats.stats().unwrap(), (granted, 1));
    // The last process lets go: the accounting is back at its baseline.
    drop(rx);
    drop(member);
    wait_stats(&mut stats, (0, 0));
    serving.stop();
}

/// A client that floods requests and never reads the answers is cut off; the owner never waits
/// for it, and goes on answering the others.
#[test]
fn a_client_that_never_reads_its_answers_stalls_no_one() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let (at, serving) = owner(dir.path(), 6);
    let mut flooder = std::os::unix::net::UnixStream::connect(&at).unwrap();
    // STATS requests (kind 19, no arguments), far more answers than a socket holds.
    let mut req = [0u8; 24];
    req[..8].copy_from_slice(&19u64.to_le_bytes());
    let many: Vec<u8> = req.iter().copied().cycle().take(24 * 200_000).collect();
    let writer = std::thread::spawn(move || {
        // Ends with an error once the owner has cut this client off.
        let _ = flooder.write_all(&many);
        flooder
    });
    let at2 = at.clone();
    let (done, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut honest = OwnerClient::connect(&at2).unwrap();
        for _ in 0..50 {
            assert_eq!(honest.stats().unwrap(), (0, 0));
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = done.send(());
    });
    // A watchdog: an owner stalled by the flooder fails the test instead of hanging it.
    answered
        .recv_timeout(Duration::from_secs(30))
        .expect("the owner stopped answering an honest client while another flooded it");
    let flooder = writer.join().unwrap();
    // The flooder was cut off: its socket reads the answers that fitted, then end of file.
    flooder
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut sink = Vec::new();
    let r = std::io::Read::read_to_end(&mut &flooder, &mut sink);
    assert!(r.is_ok(), "the owner kept the flooder's connection: {r:?}");
    assert!(sink.len() < 24 * 200_000, "every answer was delivered");
    serving.stop();
}
