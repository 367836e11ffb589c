//! Peer-to-peer I/O (paper 003, Sequoia 2000): a splice moves data from a source descriptor to
//! a sink descriptor inside the kernel, in increments the application chooses; the bytes never
//! pass through the application's memory.
//!
//! Two splices: a file to a socket (`sendfile`) and a file to a file (`copy_file_range`, or
//! `sendfile` where the file systems refuse it). The mechanism is chosen by the pair of
//! descriptors, and said.
//!
//! Run it with `cargo run -p zcio --example splice`.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use zcio::sequoia::ppio::{Increment, Splice};

#[path = "common/example.rs"]
mod example;

use example::Result;

/// 3 MiB and a bit: several increments.
const LEN: usize = (3 << 20) + 777;

/// Move everything from `source` to `sink`, one default increment per flow.
fn pump(source: &std::fs::File, sink: impl AsFd) -> Result<u64> {
    let mut splice = Splice::new(source.as_fd(), sink.as_fd())?;
    println!(
        "  {} ({}), {} bytes per flow",
        splice.mechanism().name(),
        splice.why(),
        splice.default_increment()
    );
    let mut flows = 0;
    loop {
        let flow = splice.start_flow(Increment::Default)?;
        flows += 1;
        if flow.end {
            break;
        }
    }
    println!("  {} bytes in {flows} flows", splice.moved());
    Ok(splice.moved())
}

/// Fail with the first difference if `got` is not `want`.
fn check(what: &str, got: &[u8], want: &[u8]) -> Result<()> {
    example::same(what, got, want)?;
    println!("  {what}: every byte arrived");
    Ok(())
}

fn run() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data: Vec<u8> = (0..LEN as u32).map(|i| (i ^ (i >> 9)) as u8).collect();
    let src_path = dir.path().join("source");
    std::fs::write(&src_path, &data)?;

    println!("file → socket:");
    let source = std::fs::File::open(&src_path)?;
    let (tx, mut rx) = UnixStream::pair()?;
    // The socket's reader, on a thread: the splice blocks while the socket is full.
    let reader = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
        let mut got = Vec::new();
        rx.read_to_end(&mut got)?;
        Ok(got)
    });
    pump(&source, &tx)?;
    drop(tx); // end of stream for the reader
    let got = reader.join().map_err(|_| "the reader panicked")??;
    check("the socket", &got, &data)?;

    println!("file → file:");
    let source = std::fs::File::open(&src_path)?;
    let dst_path = dir.path().join("copy");
    let mut sink = std::fs::File::create(&dst_path)?;
    pump(&source, &sink)?;
    sink.flush()?;
    check("the copy", &std::fs::read(&dst_path)?, &data)?;
    Ok(())
}

example::main_and_test!(example_splice, run);
