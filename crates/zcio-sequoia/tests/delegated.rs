//! Flows that run without the caller ([`DelegatedSplice`]): `start_flow` returns while the sink
//! still blocks, the data arrives byte for byte while this thread does something else, the end
//! of each flow reaches the caller by polling, waiting and a readable descriptor, a sink that
//! goes away ends the flow with every byte accounted for, and dropping the splice mid-flow
//! neither blocks nor leaks its descriptors.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use zcio_sequoia::ppio::{DelegatedSplice, Increment, Mechanism, SpliceError};

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ salt)
        .collect()
}

/// A file holding `data`, opened for reading (its directory kept alive by the caller).
fn source_file(dir: &tempfile::TempDir, data: &[u8]) -> OwnedFd {
    let p = dir.path().join("source");
    std::fs::write(&p, data).unwrap();
    std::fs::File::open(p).unwrap().into()
}

/// A delegated splice from a file holding `data` to a socket, and the socket's other end.
fn to_socket(dir: &tempfile::TempDir, data: &[u8]) -> (DelegatedSplice, UnixStream) {
    let (sink, reader) = UnixStream::pair().unwrap();
    let splice = DelegatedSplice::new(source_file(dir, data), sink.into()).unwrap();
    (splice, reader)
}

fn readable(fd: std::os::fd::BorrowedFd<'_>, timeout_ms: i32) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let t = rustix::event::Timespec {
        tv_sec: (timeout_ms / 1000) as i64,
        tv_nsec: (timeout_ms % 1000) as i64 * 1_000_000,
    };
    rustix::event::poll(&mut fds, Some(&t)).unwrap() == 1
}

#[test]
fn start_flow_returns_while_the_sink_blocks_and_the_data_arrives_whole() {
    let dir = tempfile::tempdir().unwrap();
    // Far more than a socket buffer holds: the flow cannot end before this thread reads.
    let data = pattern(8 << 20, 3);
    let (mut splice, mut reader) = to_socket(&dir, &data);
    assert_eq!(splice.mechanism(), Mechanism::Sendfile);
    let t0 = Instant::now();
    splice
        .start_flow(Increment::Bytes(data.len() as u64))
        .unwrap();
    let returned = t0.elapsed();
    // Nobody reads yet: the flow is blocked on the sink, and the caller knows it is not done.
    std::thread::sleep(Duration::from_millis(100));
    assert!(splice.try_complete().is_none(), "the flow ended unread");
    assert!(
        !readable(splice.completion_fd(), 0),
        "completion before the end"
    );
    assert_eq!(splice.pending(), 1);
    let mut got = vec![0u8; data.len()];
    reader.read_exact(&mut got).unwrap();
    assert!(
        readable(splice.completion_fd(), 10_000),
        "the completion descriptor never turned readable"
    );
    let flow = loop {
        if let Some(r) = splice.try_complete() {
            break r.unwrap();
        }
        std::thread::yield_now();
    };
    assert_eq!(flow.bytes, data.len() as u64);
    assert!(!flow.end);
    assert_eq!(splice.moved(), data.len() as u64);
    assert_eq!(splice.pending(), 0);
    assert!(!readable(splice.completion_fd(), 0), "a count left behind");
    let first = got.iter().zip(&data).position(|(a, b)| a != b);
    assert!(
        first.is_none(),
        "the sink got other bytes, first at {first:?}"
    );
    eprintln!("start_flow returned after {returned:?} with 8 MiB to move");
}

#[test]
fn queued_flows_finish_in_order_each_with_its_own_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(300_000, 9);
    let (mut splice, mut reader) = to_socket(&dir, &data);
    for _ in 0..3 {
        splice.start_flow(Increment::Bytes(128 * 1024)).unwrap();
    }
    let drain = std::thread::spawn(move || {
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        got
    });
    let flows: Vec<_> = (0..3).map(|_| splice.wait().unwrap()).collect();
    assert_eq!(
        flows.iter().map(|f| f.bytes).collect::<Vec<_>>(),
        [131_072, 131_072, 300_000 - 262_144]
    );
    assert!(flows[2].end, "the source ended in the third flow");
    assert!(matches!(splice.wait(), Err(SpliceError::NoFlow)));
    drop(splice); // closes the sink: the reader sees the end
    assert_eq!(drain.join().unwrap(), data);
}

#[test]
fn a_sink_that_goes_away_ends_the_flow_with_every_byte_accounted_for() {
    let data = pattern(4 << 20, 5);
    // Socket to socket: the splice's own pipe holds what was taken and not delivered.
    let (sink, sink_reader) = UnixStream::pair().unwrap();
    let (src_w, src_r) = UnixStream::pair().unwrap();
    let mut splice = DelegatedSplice::new(src_r.into(), sink.into()).unwrap();
    assert_eq!(splice.mechanism(), Mechanism::Splice);
    let writer = std::thread::spawn({
        let data = data.clone();
        move || {
            use std::io::Write;
            let mut w = src_w;
            let _ = w.write_all(&data);
        }
    });
    splice
        .start_flow(Increment::Bytes(data.len() as u64))
        .unwrap();
    let mut r = sink_reader;
    let mut first = vec![0u8; 100_000];
    r.read_exact(&mut first).unwrap();
    assert_eq!(first, data[..100_000]);
    drop(r); // the sink's reader dies mid-flow
    let t0 = Instant::now();
    let e = splice.wait().unwrap_err();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the failure took too long"
    );
    match e {
        SpliceError::Sink {
            moved, stranded, ..
        } => {
            assert!(moved >= 100_000, "{e}");
            assert_eq!(splice.moved(), moved, "{e}");
            assert!(moved + stranded <= data.len() as u64, "{e}");
        }
        other => panic!("not a sink error: {other}"),
    }
    drop(splice);
    writer.join().unwrap();
}

#[test]
fn dropping_it_mid_flow_returns_at_once_and_its_descriptors_close_when_the_flow_ends() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(8 << 20, 1);
    let (mut splice, mut reader) = to_socket(&dir, &data);
    splice
        .start_flow(Increment::Bytes(data.len() as u64))
        .unwrap();
    splice
        .start_flow(Increment::Bytes(data.len() as u64))
        .unwrap();
    let t0 = Instant::now();
    drop(splice); // the flow is blocked on a sink nobody reads
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "drop waited for the flow"
    );
    // The sink's reader stops reading: the flow fails, the thread exits and closes the sink,
    // which the reader sees as the end of the stream (after what was buffered).
    reader.shutdown(std::net::Shutdown::Read).unwrap();
    reader
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    let r = reader.read_to_end(&mut rest);
    assert!(r.is_ok(), "the sink was not closed: {r:?}");
    assert!(
        rest.len() < data.len(),
        "the queued flow ran after the drop"
    );
}

#[test]
fn bad_input_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (mut splice, _reader) = to_socket(&dir, b"abc");
    assert!(matches!(
        splice.start_flow(Increment::Bytes(0)),
        Err(SpliceError::ZeroIncrement)
    ));
    assert!(matches!(splice.wait(), Err(SpliceError::NoFlow)));
    assert!(splice.try_complete().is_none());
    // A source of a kind the kernel cannot splice from.
    let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let (sink, _r) = UnixStream::pair().unwrap();
    let e = DelegatedSplice::new(null, sink.into()).unwrap_err();
    assert!(e.to_string().contains("cannot splice"), "{e}");
}
