//! Fbufs between real processes: a stream with reuse through deallocation notices, a receiver
//! killed mid-stream or outliving its socket, an originator that exits, a three-process path,
//! notices piggybacked on a request, and aggregate messages sent as one root reference.

mod peer;

use peer::{Peer, peer};
use std::os::unix::net::UnixListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use zcio_fbufs::aggregate::{Builder, BumpNodes, Msg};
use zcio_fbufs::link::{OriginatorEnd, PathName};
use zcio_fbufs::path::{Fbuf, PathMemory, Variant};
use zcio_fbufs::region::RegionRead;
use zcio_fbufs::{pattern, pattern_len};

/// Where an originator's receivers connect: the socket, in a fresh directory.
struct Origin {
    dir: tempfile::TempDir,
    l: UnixListener,
}

impl Origin {
    /// The socket's path.
    fn up(&self) -> std::path::PathBuf {
        self.dir.path().join("up")
    }

    /// Start `peer` (which connects to the socket) as a receiver of `end`.
    fn join(&self, peer: &mut Peer, end: &mut OriginatorEnd) -> Child {
        let child = peer.spawn().unwrap();
        let (s, _) = self.l.accept().unwrap();
        end.add_receiver(s).unwrap();
        child
    }
}

/// An originator on a small path (4 chunks of 256 KiB) listening on a fresh socket.
fn originator(variant: Variant) -> (Origin, OriginatorEnd) {
    let dir = tempfile::tempdir().unwrap();
    let l = UnixListener::bind(dir.path().join("up")).unwrap();
    let p = PathMemory::create(256 * 1024, 4, variant).unwrap();
    let end = OriginatorEnd::new(p.originator().unwrap());
    (Origin { dir, l }, end)
}

/// Start a peer with `args` (the socket goes in after the mode) as a receiver of `end`.
fn receiver(o: &Origin, end: &mut OriginatorEnd, args: &[&str]) -> Child {
    let mut peer = peer();
    peer.arg(args[0])
        .arg(o.up())
        .args(&args[1..])
        .stdout(Stdio::piped());
    o.join(&mut peer, end)
}

fn send_stream(end: &mut OriginatorEnd, count: u64, to: &[usize]) {
    for i in 0..count {
        let len = pattern_len(i);
        let f = end.alloc_waiting(len).unwrap();
        end.originator.write(&f, 0, &pattern(i, len)).unwrap();
        end.send(f, to).unwrap();
        end.poll(false).unwrap();
    }
}

/// The first line `child` prints (its standard output piped, and taken).
fn first_line(child: &mut Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line
}

/// Kill `child`, a receiver of `end`, and wait until `end` has back what it held.
fn kill_and_take_back(child: &mut Child, end: &mut OriginatorEnd) {
    child.kill().unwrap();
    child.wait().unwrap();
    wait_all_back(end);
}

/// `count` aggregate messages: "msg N:" in one fbuf prepended to the pattern of N in another,
/// split and joined again, the nodes in a third; each sent as one root reference.
fn send_msgs(end: &mut OriginatorEnd, count: u64, to: &[usize]) -> Vec<u64> {
    let mut parts = Vec::new();
    for i in 0..count {
        let body = pattern(i, pattern_len(i));
        let head = format!("msg {i}:").into_bytes();
        let data = end.alloc_waiting(body.len()).unwrap();
        end.originator.write(&data, 0, &body).unwrap();
        let h = end.alloc_waiting(head.len()).unwrap();
        end.originator.write(&h, 0, &head).unwrap();
        let nodes = end.alloc_waiting(4096).unwrap();
        let m = {
            let mut b = Builder::new(&end.originator, BumpNodes::new(nodes.addr(), nodes.len()));
            let d = b.leaf(data.addr(), body.len() as u64).unwrap();
            let (x, y) = b.split(d, body.len() as u64 / 3).unwrap();
            let d = b.join(x, y).unwrap();
            let hd = b.leaf(h.addr(), head.len() as u64).unwrap();
            b.prepend(hd, d).unwrap()
        };
        parts.extend([nodes.addr(), h.addr(), data.addr()]);
        end.send_msg(m, vec![nodes, h, data], to).unwrap();
    }
    parts
}

fn wait_all_back(end: &mut OriginatorEnd) {
    let t = Instant::now();
    while end.originator.outstanding() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "fbufs never came back"
        );
        end.poll(true).unwrap();
    }
}

/// Wait for every fbuf to come back, then for the receiver `child` to end well: what it
/// printed. `what` names the run in a failure.
fn all_back_and_done(end: &mut OriginatorEnd, child: Child, what: &str) -> String {
    wait_all_back(end);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{what}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn receivers_started_on_their_own_join_a_path_by_its_name() {
    let name = format!("test-path-{}", std::process::id());
    let offered = PathName::bind(&name).unwrap();
    let e = PathName::bind(&name).unwrap_err();
    assert!(e.to_string().contains("taken"), "{e}");
    let p = PathMemory::create(256 * 1024, 4, Variant::CACHED).unwrap();
    let mut end = OriginatorEnd::new(p.originator().unwrap());
    // Two receivers, each started on its own with only the name.
    let mut children = Vec::new();
    for _ in 0..2 {
        let mut peer = peer();
        peer.arg("receiver-loop")
            .arg(format!("name:{name}"))
            .arg("200")
            .stdout(Stdio::piped());
        children.push(peer.spawn().unwrap());
        offered
            .accept(&mut end, Some(Duration::from_secs(10)))
            .unwrap();
    }
    send_stream(&mut end, 200, &[0, 1]);
    wait_all_back(&mut end);
    for (i, c) in children.into_iter().enumerate() {
        let out = all_back_and_done(&mut end, c, "a receiver joined by name");
        assert!(out.contains("ok 200"), "receiver {i}: {out}");
    }
    // Nobody else comes: the wait for a receiver ends after its time.
    let e = offered
        .accept(&mut end, Some(Duration::from_millis(20)))
        .unwrap_err();
    assert!(e.to_string().contains("timed out"), "{e}");
}

#[test]
fn a_stream_reuses_its_fbufs_through_batched_notices() {
    for variant in [Variant::CACHED_VOLATILE, Variant::CACHED, Variant::UNCACHED] {
        let (o, mut end) = originator(variant);
        let child = receiver(&o, &mut end, &["receiver-loop", "400"]);
        // 400 messages of up to 70 KiB through 1 MiB of path: only reuse makes it fit.
        send_stream(&mut end, 400, &[0]);
        let line = all_back_and_done(&mut end, child, &format!("{variant:?}"));
        assert!(line.starts_with("ok 400 notices 400 in "), "{line}");
        let messages: usize = line.split_whitespace().nth(5).unwrap().parse().unwrap();
        assert!(messages <= 400, "{line}");
        assert!(end.originator.chunks_used() <= 4);
        assert!(end.originator.cached() > 0);
        assert_eq!(end.released_for_dead, 0);
    }
}

#[test]
fn a_receiver_killed_mid_stream_gives_every_fbuf_back() {
    let (o, mut end) = originator(Variant::CACHED);
    let mut child = receiver(&o, &mut end, &["receiver-loop", "10", "hold"]);
    send_stream(&mut end, 10, &[0]);
    // Let the receiver take them all, then kill it while it holds them.
    let line = first_line(&mut child);
    assert!(line.starts_with("ok 10"), "{line}");
    assert_eq!(end.originator.outstanding(), 10);
    kill_and_take_back(&mut child, &mut end);
    assert_eq!(end.released_for_dead, 10);
    assert_eq!(end.receivers_alive(), 0);
    // Back to the baseline: every fbuf on a free list, writable again, reusable.
    assert_eq!(end.originator.cached(), 10);
    let f = end.originator.alloc(pattern_len(9)).unwrap();
    end.originator.write(&f, 0, b"writable again").unwrap();
}

#[test]
fn what_an_exiting_originator_sent_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let l = UnixListener::bind(dir.path().join("s")).unwrap();
    let (child, mut rx) = peer()
        .args([
            "originator-then-exit",
            dir.path().join("s").to_str().unwrap(),
            "5",
        ])
        .offering(&l);
    let mut refs = Vec::new();
    while let Some(r) = rx.recv().unwrap() {
        refs.push(r);
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(refs.len(), 5);
    // The originator is gone; its memory is not, while we map it.
    for (i, r) in refs.iter().enumerate() {
        let mut b = vec![0u8; r.len as usize];
        assert!(rx.receiver.read_bytes(r.addr, &mut b));
        assert_eq!(b, pattern(i as u64, r.len as usize));
    }
    // Freeing towards a gone originator crashes nothing: the notices go to a ring nobody
    // reads, and the link stays ended.
    for r in refs {
        rx.free(r).unwrap();
    }
    rx.flush().unwrap();
    assert_eq!(rx.receiver.held(), 0);
    assert_eq!(rx.recv().unwrap(), None);
}

/// The forwarding server of a three-process path (a peer in mode `forward`), joined to `end` and
/// listening downstream: the process, what it prints after "listening", and the downstream
/// socket's path.
fn forwarder(
    o: &Origin,
    end: &mut OriginatorEnd,
) -> (
    Child,
    std::io::BufReader<std::process::ChildStdout>,
    std::path::PathBuf,
) {
    use std::io::BufRead;
    let down = o.dir.path().join("down");
    let mut peer = peer();
    peer.arg("forward")
        .arg(o.up())
        .arg(&down)
        .stdout(Stdio::piped());
    let mut server = o.join(&mut peer, end);
    let mut out = std::io::BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "listening");
    (server, out, down)
}

/// An originator → server → receiver path: the server is a peer in mode `forward`, the
/// receiver a peer with `receiver_args` (after its socket). `send` streams; then everything must
/// come back, the receiver and the server end, and their outputs are returned.
fn three_process_path(
    receiver_args: &[&str],
    send: impl FnOnce(&mut OriginatorEnd),
) -> (String, String) {
    let (o, mut end) = originator(Variant::CACHED);
    let (mut server, mut server_out, down) = forwarder(&o, &mut end);
    use std::io::Read;
    let receiver = peer()
        .arg(receiver_args[0])
        .arg(&down)
        .args(&receiver_args[1..])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    send(&mut end);
    wait_all_back(&mut end);
    assert_eq!(end.msgs_outstanding(), 0);
    drop(end); // closes the link: the server ends once downstream has freed everything
    let r = receiver.wait_with_output().unwrap();
    assert!(r.status.success(), "{r:?}");
    let mut rest = String::new();
    server_out.read_to_string(&mut rest).unwrap();
    assert!(server.wait().unwrap().success());
    (String::from_utf8_lossy(&r.stdout).into_owned(), rest)
}

#[test]
fn a_three_process_path_forwards_without_touching_and_frees_end_to_end() {
    let (received, forwarded) =
        three_process_path(&["receiver-loop", "300"], |end| send_stream(end, 300, &[0]));
    assert!(received.starts_with("ok 300"), "{received}");
    assert_eq!(forwarded.trim(), "forwarded 300");
}

#[test]
fn a_killed_forwarder_leaves_what_its_receiver_holds_unused_until_the_receiver_ends() {
    use std::io::{BufRead, Write};
    let (o, mut end) = originator(Variant::CACHED);
    let (mut server, _server_out, down) = forwarder(&o, &mut end);
    let mut line = String::new();
    let mut receiver = peer()
        .args([
            "receiver-loop",
            down.to_str().unwrap(),
            "4",
            "recheck-on-line",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut rx_out = std::io::BufReader::new(receiver.stdout.take().unwrap());
    send_stream(&mut end, 4, &[0]);
    line.clear();
    rx_out.read_line(&mut line).unwrap();
    assert!(line.starts_with("ok 4"), "{line}");
    // The receiver holds all four. The forwarder dies without a goodbye.
    server.kill().unwrap();
    server.wait().unwrap();
    let t = Instant::now();
    while end.receivers_alive() > 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "death not seen");
        end.poll(true).unwrap();
    }
    // The originator takes all the memory it can get and writes it: none of it may be an
    // fbuf the receiver still holds.
    // (The lengths of the four sent: a cached path reuses an fbuf for its own length.)
    let mut taken = Vec::new();
    for i in 0.. {
        let len = pattern_len(i % 4);
        let Ok(f) = end.originator.alloc(len) else {
            break;
        };
        end.originator.write(&f, 0, &vec![0xEE; len]).unwrap();
        taken.push(f);
    }
    assert_eq!(
        end.quarantined(),
        4,
        "held back for the receiver downstream"
    );
    let e = end.alloc_waiting(pattern_len(0)).unwrap_err();
    assert!(e.to_string().contains("forwarder"), "{e}");
    receiver.stdin.take().unwrap().write_all(b"go\n").unwrap();
    line.clear();
    rx_out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "changed 0 of 4");
    assert!(receiver.wait().unwrap().success());
    // Downstream has ended: the four come back.
    let t = Instant::now();
    while end.quarantined() > 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "never released");
        end.poll(false).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(end.released_for_dead, 4);
    for f in taken {
        end.originator.free(f).unwrap();
    }
    assert_eq!(end.originator.outstanding(), 0);
}

#[test]
fn a_receiver_that_frees_what_it_was_not_given_is_cut_off_and_harms_nobody() {
    let (o, mut end) = originator(Variant::CACHED);
    let mut bad = receiver(&o, &mut end, &["receiver-frees-foreign"]);
    // Two fbufs; the receiver reads both, then names a page it was not given.
    send_stream(&mut end, 2, &[0]);
    let t = Instant::now();
    while end.misbehaved.is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the bad notice was never seen"
        );
        end.poll(true).unwrap();
    }
    assert!(
        end.misbehaved[0].contains("does not hold"),
        "{:?}",
        end.misbehaved
    );
    // Its references are released; the fbufs are all back and the originator carries on.
    assert_eq!(end.originator.outstanding(), 0);
    assert_eq!(end.released_for_dead, 2);
    assert_eq!(end.receivers_alive(), 0);
    let f = end.originator.alloc(100).unwrap();
    end.originator.write(&f, 0, b"still fine").unwrap();
    let _ = bad.kill();
    bad.wait().unwrap();
}

#[test]
fn a_receiver_whose_socket_outlives_it_in_a_child_still_gives_every_fbuf_back() {
    let (o, mut end) = originator(Variant::CACHED);
    let mut child = receiver(
        &o,
        &mut end,
        &["receiver-loop", "5", "leave-socket-to-child"],
    );
    send_stream(&mut end, 5, &[0]);
    let mut out = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success());
    let grandchild = out
        .lines()
        .find_map(|l| l.strip_prefix("child "))
        .unwrap_or_else(|| panic!("no child pid in {out:?}"))
        .to_string();
    let watched = end.watches_process(0);
    if watched {
        // The socket is still open in the child; the receiving process's end alone frees them.
        wait_all_back(&mut end);
        assert_eq!(end.released_for_dead, 5);
        assert_eq!(end.receivers_alive(), 0);
    } else {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::Pidfd,
            "no pidfd for the receiver here (kernel or namespace)",
        );
    }
    let _ = Command::new("kill").args(["-9", &grandchild]).status();
    if !watched {
        // Without a pidfd the socket's close tells of the end, once the child is gone too.
        wait_all_back(&mut end);
    }
    assert_eq!(end.originator.outstanding(), 0);
}

#[test]
fn notices_go_on_the_ring_and_what_overflows_it_rides_along_with_a_request() {
    let (o, mut end) = originator(Variant::CACHED_VOLATILE);
    // Rings of one slot: the second and third sends overflow to the socket, and so does the
    // second notice while this end is not taking them in.
    end.ring_slots = 1;
    let mut child = receiver(&o, &mut end, &["free-two-secure-third"]);
    send_stream(&mut end, 3, &[0]);
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    use std::io::{BufRead, Read};
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "freed 2");
    assert_eq!(end.originator.outstanding(), 3);
    // Serve the receiver until it is gone (it asks to secure, then exits).
    let t = Instant::now();
    while end.receivers_alive() > 0 {
        assert!(t.elapsed() < Duration::from_secs(30), "never done");
        end.poll(true).unwrap();
    }
    line.clear();
    out.read_to_string(&mut line).unwrap();
    assert!(child.wait().unwrap().success());
    // One notice went on the ring, the other rode along with the request; none needed a
    // message of its own. The third fbuf, held when the receiver exited, came back for it.
    assert_eq!(line.trim(), "piggybacked 1 alone 0");
    assert_eq!(end.released_for_dead, 1);
    assert_eq!(end.originator.outstanding(), 0);
}

#[test]
fn aggregates_go_as_one_reference_and_come_back_with_all_their_fbufs() {
    let (o, mut end) = originator(Variant::CACHED);
    let child = receiver(&o, &mut end, &["receive-msgs", "60"]);
    // 60 messages of three fbufs each need more than the path's 1 MiB: they must be reused.
    send_msgs(&mut end, 60, &[0]);
    let said = all_back_and_done(&mut end, child, "60 messages");
    assert_eq!(said.trim(), "ok 60 messages");
    assert_eq!(end.msgs_outstanding(), 0);
    assert_eq!(end.released_for_dead, 0);
    assert!(end.originator.chunks_used() <= 4);
}

#[test]
fn a_receiver_killed_holding_aggregates_gives_back_every_part() {
    let (o, mut end) = originator(Variant::CACHED_VOLATILE);
    let mut child = receiver(&o, &mut end, &["receive-msgs", "5", "hold"]);
    send_msgs(&mut end, 5, &[0]);
    assert_eq!(first_line(&mut child).trim(), "ok 5 messages");
    assert_eq!(end.originator.outstanding(), 15);
    kill_and_take_back(&mut child, &mut end);
    // Five messages released, fifteen fbufs back on the free lists.
    assert_eq!(end.released_for_dead, 5);
    assert_eq!(end.msgs_outstanding(), 0);
    assert_eq!(end.originator.cached(), 15);
}

/// A message of one leaf over 100 bytes: its data fbuf, its node fbuf, and its root.
fn one_leaf(end: &mut OriginatorEnd) -> (Fbuf, Fbuf, Msg) {
    let data = end.originator.alloc(100).unwrap();
    let nodes = end.originator.alloc(4096).unwrap();
    let m = Builder::new(&end.originator, BumpNodes::new(nodes.addr(), nodes.len()))
        .leaf(data.addr(), 100)
        .unwrap();
    (data, nodes, m)
}

#[test]
fn an_aggregate_on_an_uncached_path_is_refused_and_loses_nothing() {
    let (_o, mut end) = originator(Variant::VOLATILE);
    let (data, nodes, m) = one_leaf(&mut end);
    let e = end.send_msg(m, vec![nodes, data], &[]).unwrap_err();
    assert!(e.to_string().contains("cached path"), "{e}");
    // Both fbufs went back to the free lists.
    assert_eq!(end.originator.cached(), 2);
    assert_eq!(end.originator.outstanding(), 0);
}

#[test]
fn an_aggregate_whose_root_is_not_in_its_parts_is_refused() {
    let (_o, mut end) = originator(Variant::CACHED_VOLATILE);
    let (data, nodes, m) = one_leaf(&mut end);
    // The node fbuf is left out of the parts: the message would outlive its root.
    let e = end.send_msg(m, vec![data], &[]).unwrap_err();
    assert!(e.to_string().contains("root node inside"), "{e}");
    assert_eq!(end.originator.cached(), 1);
    end.originator.free(nodes).unwrap();
}

#[test]
fn a_three_process_path_forwards_aggregates_untouched() {
    let (received, forwarded) = three_process_path(&["receive-msgs", "40"], |end| {
        send_msgs(end, 40, &[0]);
    });
    assert_eq!(received.trim(), "ok 40 messages");
    assert_eq!(forwarded.trim(), "forwarded 40");
}

/// The permissions of the mapping holding `addr` in this process ("rw-p", "r--s", ...).
fn perms(addr: u64) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .find_map(|l| {
            let (range, rest) = l.split_once(' ')?;
            let (a, b) = range.split_once('-')?;
            let (a, b) = (
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            );
            (a..b).contains(&addr).then(|| rest[..4].to_string())
        })
        .unwrap_or_else(|| panic!("{addr:#x} not mapped"))
}

#[test]
fn a_secured_aggregate_is_read_only_in_every_part_until_freed() {
    let (o, mut end) = originator(Variant::CACHED_VOLATILE);
    let mut child = receiver(&o, &mut end, &["receive-msgs", "1", "secure-hold"]);
    let parts = send_msgs(&mut end, 1, &[0]);
    // Volatile: the parts stay writable on send.
    assert!(parts.iter().all(|a| perms(*a).starts_with("rw")));
    // Serve the secure request until the receiver says it holds the secured message.
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
        tx.send(line).unwrap();
    });
    let t = Instant::now();
    let line = loop {
        if let Ok(line) = rx.try_recv() {
            break line;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never secured");
        end.poll(false).unwrap();
    };
    assert_eq!(line.trim(), "ok 1 messages");
    // Every part of it (nodes, header, data) is read-only to its originator now.
    for a in &parts {
        assert!(perms(*a).starts_with("r-"), "{a:#x}: {}", perms(*a));
    }
    kill_and_take_back(&mut child, &mut end);
    // Given back: writable again.
    assert!(parts.iter().all(|a| perms(*a).starts_with("rw")));
    assert_eq!(end.originator.cached(), 3);
}
