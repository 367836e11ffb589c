//! A read through the user-level I/O layer (paper 004): each request is a self-contained
//! 64-byte record, checked by the layer and handed to the kernel through io_uring (by a polling
//! kernel thread, without a system call, where the kernel allows it); the data moves with
//! `O_DIRECT` straight into a buffer of the layer's region; and the completion calls the
//! handler the record names, on the thread that issued it.
//!
//! Run it with `cargo run -p zcio --example uio_read`.

use std::io::Write;
use std::sync::mpsc;
use zcio::uio::{Config, HandlerId, Initiation, Opcode, Request, Translation, Uio};
use zcio::vm::skip::Capability;

#[path = "common/example.rs"]
mod example;

use example::Result;

/// Two chunks of 64 KiB (O_DIRECT wants offsets and lengths in multiples of 4 KiB).
const CHUNK: usize = 64 << 10;

/// The layer in the best setup this kernel allows: ring polled by a kernel thread with
/// buffers registered ahead, else one system call per request, else buffers pinned per
/// request. Says which it got; `None`, said as a skip, where io_uring is refused altogether (a
/// kernel with `io_uring_disabled`, a sandbox that filters it): the layer has no other way in.
fn layer() -> Option<Uio> {
    let mut why = Vec::new();
    for (initiation, translation) in [
        (Initiation::Polled, Translation::Registered),
        (Initiation::Syscall, Translation::Registered),
        (Initiation::Syscall, Translation::PerRequest),
    ] {
        let config = Config {
            initiation,
            translation,
            buffers: 4,
            buf_size: CHUNK,
            ..Config::default()
        };
        match Uio::new(config) {
            Ok(uio) => {
                println!("layer: {initiation:?} initiation, {translation:?} buffers");
                for w in &why {
                    println!("  fallback: {w}");
                }
                return Some(uio);
            }
            Err(e) => why.push(format!("{initiation:?}/{translation:?} refused: {e}")),
        }
    }
    zcio::vm::skip::skip(Capability::IoUring, &why.join("; "));
    None
}

fn run() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("table");
    let data: Vec<u8> = (0..2 * CHUNK as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).rotate_left(7) as u8)
        .collect();
    let mut f = std::fs::File::create(&path)?;
    f.write_all(&data)?;
    f.sync_all()?;
    drop(f);

    let Some(uio) = layer() else {
        return Ok(()); // said above, as a skip
    };
    let target = uio.open(&path, false)?;
    match uio.buffered_because(target) {
        None => println!("file opened with O_DIRECT"),
        Some(why) => println!("fallback: {why}"),
    }

    // 1. A record of our own, completing to a handler: the first chunk.
    let (tx, rx) = mpsc::channel();
    let handler: HandlerId = uio.handler(move |c| {
        let got = match &c.error {
            Some(e) => Err(e.to_string()),
            None => Ok(c.data().to_vec()),
        };
        tx.send((c.record.argument, got))
            .expect("the example waits for it");
    });
    let buf = uio.buffer().ok_or("the layer has no free buffer")?;
    let record = Request::new(
        Opcode::Read,
        target,
        0,          // offset in the file
        buf.addr(), // where the data goes: the start of the buffer
        CHUNK as u32,
        handler,
        42, // the handler's argument
    );
    uio.submit(record, buf).map_err(|e| e.to_string())?;
    uio.wait()?; // runs the handler on this thread
    let (argument, got) = rx.recv()?;
    let got = got?;
    if argument != 42 {
        return Err(format!("the handler got argument {argument}, not 42").into());
    }
    check("chunk 0 (handler)", &got, &data[..CHUNK])?;

    // 2. The blocking call built on top: the second chunk.
    let buf = uio.buffer().ok_or("the layer has no free buffer")?;
    let c = uio.read_blocking(target, CHUNK as u64, buf, 0, CHUNK as u32)?;
    if let Some(e) = c.error {
        return Err(e.into());
    }
    check("chunk 1 (blocking)", c.data(), &data[CHUNK..])?;

    let s = uio.stats();
    println!(
        "{} requests, {} system calls to submit them",
        s.submitted, s.submit_enters
    );
    Ok(())
}

/// Fail with the first difference if `got` is not `want`.
fn check(what: &str, got: &[u8], want: &[u8]) -> Result<()> {
    example::same(what, got, want)?;
    println!("{what}: {} bytes, byte for byte as in the file", got.len());
    Ok(())
}

example::main_and_test!(example_uio_read, run);
