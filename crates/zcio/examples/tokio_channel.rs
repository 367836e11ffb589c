//! A channel in an async program (tokio): the receiver is a task that sleeps until the channel
//! is readable, through tokio's `AsyncFd`, and receives without blocking the runtime; the
//! sender, a plain thread here, passes messages under emulated copy and overwrites its buffer
//! after each `send`.
//!
//! A channel is a descriptor (`AsFd`), readable when a message is ready. The receiving task
//! lets the channel's waits end at once (`Waits { timeout: Some(Duration::ZERO), .. }`): a
//! receive then either takes a whole message or says `TimedOut` having taken nothing, and the
//! task goes back to sleep until the descriptor is readable again.
//!
//! Both ends live in this process here (`memnet::pair`); between two processes the receiver
//! gets its channel from `Channel::listen(name)?.accept(..)` instead, and nothing else changes.
//! Run it with `cargo run -p zcio --example tokio_channel`.

#[path = "common/example.rs"]
mod example;

use example::Result;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use zcio::genie::memnet;
use zcio::genie::profile::Profile;
use zcio::{AppBuffer, Channel, ErrorKind, InputBuffering, Semantics, Waits};

/// Messages sent, and their lengths in turn.
const MESSAGES: usize = 24;
const LENS: [usize; 4] = [100, 4096 * 3, 1 << 20, 5 << 20];

/// Byte `k` of message `i`.
fn byte(i: usize, k: usize) -> u8 {
    (k as u8).wrapping_mul(13).wrapping_add(i as u8)
}

/// The sender: each message written into one buffer, sent, and overwritten at once.
fn sender(mut tx: Channel) -> Result<()> {
    let mut buf = AppBuffer::new(5 << 20)?;
    for i in 0..MESSAGES {
        let m = &mut buf[..LENS[i % LENS.len()]];
        for (k, b) in m.iter_mut().enumerate() {
            *b = byte(i, k);
        }
        let (ticket, _) = tx.send(Semantics::EmulatedCopy, m)?;
        m.fill(0xEE); // the receiver still gets message i
        tx.wait(ticket)?;
    }
    Ok(())
}

/// The receiving task: wait for readability, then take every message that is there.
async fn receiver(rx: Channel) -> Result<usize> {
    // SAFETY: a channel owns its descriptor (the memory network's readiness epoll, or the TCP
    // socket) for its whole life and `as_raw_fd` always returns that one, as tokio asks; the
    // `AsyncFd` owns the channel, so the descriptor outlives the registration.
    let mut rx = unsafe { AsyncFd::register(rx) }.map_err(|e| e.to_string())?;
    rx.get_mut().set_waits(Waits {
        timeout: Some(Duration::ZERO),
        interruptible: false,
    });
    let mut got = 0;
    while got < MESSAGES {
        let mut ready = rx.readable_mut().await?;
        loop {
            let ch = ready.get_inner_mut();
            match ch.recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux) {
                Ok((m, _)) => {
                    let len = LENS[got % LENS.len()];
                    if m.len() != len {
                        return Err(format!("message {got}: {} bytes, not {len}", m.len()).into());
                    }
                    if let Some(k) = (0..len).find(|&k| m[k] != byte(got, k)) {
                        return Err(format!("message {got}: byte {k} differs").into());
                    }
                    got += 1;
                }
                // Nothing more there now: sleep until the descriptor says otherwise.
                Err(e) if e.kind() == ErrorKind::TimedOut => {
                    ready.clear_ready();
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(got)
}

fn run() -> Result<()> {
    let (a, b) = memnet::pair()?;
    let (mut tx, mut rx) = (Channel::local(a), Channel::local(b));
    // The VM paths at every length, whatever this machine finds cheaper: they are the point.
    tx.set_profile(Profile::zero_copy());
    rx.set_profile(Profile::zero_copy());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let sending = std::thread::spawn(move || sender(tx).map_err(|e| e.to_string()));
    let got = rt.block_on(receiver(rx))?;
    sending.join().map_err(|_| "the sender panicked")??;
    println!("receiver task: {got} messages, each as it was when sent");
    Ok(())
}

example::main_and_test!(example_tokio_channel, run);
