//! An fbuf data path through three processes (paper 001, fbufs): originator → forwarder →
//! receiver.
//!
//! The originator writes each message once into an fbuf, memory of the path mapped at the same
//! address in every process (each chunk of the path a memory file of its own, announced to the
//! others before any reference into it), and sends a reference. The forwarder passes the reference on
//! without touching the data; the receiver reads the bytes in place, read-only, and frees the
//! fbuf, which travels back as a deallocation notice so that the originator can reuse it.
//!
//! Run it with `cargo run -p zcio --example fbuf_path`. The forwarder and the receiver are this
//! same program started again (`std::env::current_exe()`) with `ZCIO_EXAMPLE_ROLE` set.

#[path = "common/example.rs"]
mod example;
#[path = "common/roles.rs"]
mod roles;

use example::Result;
use roles::peer_command;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use zcio::fbufs::link::{Forwarder, OriginatorEnd, ReceiverEnd};
use zcio::fbufs::path::{Originator, PathMemory, Variant};
use zcio::fbufs::region::RegionRead;

/// The directory holding the sockets `up` (originator ↔ forwarder) and `down`.
const DIR: &str = "ZCIO_EXAMPLE_DIR";
/// Messages sent: more than the path holds at once, so fbufs must come back to be reused.
const MESSAGES: u64 = 50;

/// Message `i`: a line of text repeated to about 40 KiB.
fn message(i: u64) -> Vec<u8> {
    format!("message {i} from the originator\n")
        .into_bytes()
        .repeat(1300)
}

/// The originator (the process you start).
fn run() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = UnixListener::bind(dir.path().join("up"))?;
    // The path: 4 chunks of 256 KiB, each made as the allocator first needs it. Non-volatile:
    // once sent, an fbuf is read-only in the originator too until every receiver has freed it.
    let variant = Variant {
        cached: true,
        volatile: false,
    };
    let path = PathMemory::create(256 * 1024, 4, variant)?;
    let mut end = OriginatorEnd::new(Originator::new(path.info())?);

    let mut forwarder = peer_command("forwarder", "example_fbuf_path")?
        .env(DIR, dir.path())
        .spawn()?;
    let sock = roles::accept_from(&up, &mut forwarder, "forwarder")?;
    // Offer the path to the forwarder (its chunks follow, each with a read-only descriptor).
    end.add_receiver(sock)?;
    let mut receiver = peer_command("receiver", "example_fbuf_path")?
        .env(DIR, dir.path())
        .spawn()?;

    for i in 0..MESSAGES {
        let data = message(i);
        let fbuf = end.alloc_waiting(data.len())?; // waits for notices if the path is full
        end.originator.write(&fbuf, 0, &data)?;
        end.send(fbuf, &[0])?; // to receiver 0 of this end: the forwarder
        end.poll(false)?; // take in the deallocation notices that came back
    }
    // Wait until every fbuf has been freed at the far end.
    let start = Instant::now();
    while end.originator.outstanding() > 0 {
        if start.elapsed() > Duration::from_secs(10) {
            return Err("fbufs never came back from the receiver".into());
        }
        end.poll(true)?;
    }
    drop(end); // closes the link in order: the forwarder ends once downstream is done

    let r = receiver.wait()?;
    let f = forwarder.wait()?;
    if !r.success() || !f.success() {
        return Err(format!("receiver: {r}, forwarder: {f}; see their messages above").into());
    }
    println!("originator: {MESSAGES} messages sent through the forwarder, every fbuf back");
    Ok(())
}

/// The forwarder (second process): passes references on, never reads the data.
fn forwarder(dir: PathBuf) -> Result<()> {
    // Listen downstream before joining upstream: the receiver, started once the originator
    // has accepted us, then always finds the socket.
    let down = UnixListener::bind(dir.join("down"))?;
    let up = ReceiverEnd::connect(UnixStream::connect(dir.join("up"))?)?;
    let sock = roles::accept_within(&down, "receiver")?;
    let n = Forwarder::new(up, sock)?.run()?;
    println!("forwarder: forwarded {n} fbufs without touching them");
    Ok(())
}

/// The receiver (third process): reads each fbuf in place, checks it, frees it.
fn receiver(dir: PathBuf) -> Result<()> {
    let mut rx = ReceiverEnd::connect(UnixStream::connect(dir.join("down"))?)?;
    for i in 0..MESSAGES {
        let r = rx.recv()?.ok_or("the path closed early")?;
        let mut got = vec![0u8; r.len as usize];
        if !rx.receiver.read_bytes(r.addr, &mut got) {
            return Err(format!("message {i}: its fbuf is not readable here").into());
        }
        let want = message(i);
        example::same(&format!("message {i}"), &got, &want)?;
        rx.free(r)?; // the notice goes back along the path
    }
    rx.flush()?;
    println!("receiver: {MESSAGES} messages checked byte for byte");
    Ok(())
}

/// Play the role the environment names, or start as the originator.
fn dispatch() -> Result<()> {
    roles::dispatch(
        run,
        &[
            ("forwarder", || forwarder(dir()?)),
            ("receiver", || receiver(dir()?)),
        ],
    )
}

/// The directory the originator made for the path (the forwarder's and receiver's).
fn dir() -> Result<PathBuf> {
    Ok(std::env::var_os(DIR)
        .map(PathBuf::from)
        .ok_or("ZCIO_EXAMPLE_DIR is not set")?)
}

example::main_and_test!(example_fbuf_path, dispatch);
