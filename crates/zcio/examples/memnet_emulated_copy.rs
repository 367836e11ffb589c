//! Emulated copy between two processes over the memory network (paper 000, Genie).
//!
//! The two processes find each other by name: the sender listens on a channel name
//! (`Channel::listen`), the receiver connects to it (`Channel::connect`), and each gets its end
//! of a link. The sender passes a buffer with `Semantics::EmulatedCopy`: the call returns as soon as
//! the data is queued, without copying it, and the sender writes into its buffer at once.
//! Copy semantics is kept all the same: the receiver gets the bytes as they were when `send`
//! was called, because the pages were write-protected (TCOW) and the overwrite went to new
//! copies of them. The receiver's verdict comes back over the same link, the other way.
//!
//! Run it with `cargo run -p zcio --example memnet_emulated_copy`. The receiver is this same
//! program started again (`std::env::current_exe()`) with `ZCIO_EXAMPLE_ROLE=receiver`; any
//! program that knows the name could be.

#[path = "common/example.rs"]
mod example;
#[path = "common/roles.rs"]
mod roles;

use example::Result;
use roles::peer_command;
use std::time::Duration;
use zcio::genie::profile::Profile;
use zcio::{AppBuffer, Channel, InputBuffering, Semantics};

/// The channel name, handed to the receiver.
const NAME: &str = "ZCIO_EXAMPLE_CHANNEL";
/// The message: 16 pages.
const LEN: usize = 16 * 4096;

/// The bytes the sender sends: the receiver regenerates them to check what it got.
fn message() -> Vec<u8> {
    (0..LEN).map(|i| (i % 251) as u8).collect()
}

/// The sender (the process you start).
fn run() -> Result<()> {
    let name = format!("example-{}", std::process::id());
    let listener = Channel::listen(&name)?;
    let mut receiver = peer_command("receiver", "example_memnet_emulated_copy")?
        .env(NAME, &name)
        .spawn()?;
    let mut link = match listener.accept(Some(Duration::from_secs(30))) {
        Ok(l) => l,
        Err(e) => {
            let _ = receiver.kill();
            return Err(format!("the receiver did not connect to `{name}`: {e}").into());
        }
    };
    // Take the VM path even where this machine finds copying 16 pages cheaper: that path is
    // what this example is about (the default profile would choose by cost).
    link.set_profile(Profile::zero_copy());

    let mut buf = AppBuffer::new(LEN)?; // page-aligned, as TCOW wants
    buf.copy_from_slice(&message());
    let (ticket, acc) = link.send(Semantics::EmulatedCopy, &buf)?;
    println!("sender: send returned, path taken: {}", acc.path);

    // Overwrite the buffer right away, whether or not the receiver has read yet. The write
    // takes a fault that gives this process fresh copies of the pages (TCOW) while the output
    // keeps the originals.
    let runtime = zcio::vm::VmRuntime::get();
    let before = runtime.stats().tcow_copies;
    buf.fill(0xEE);
    link.wait(ticket)?; // the receiver has it
    let copies = runtime.stats().tcow_copies - before;
    println!("sender: overwrote its buffer ({copies} pages copied on write)");

    // The receiver's verdict, over the link's other direction.
    let (verdict, _) = link.recv_alloc(Semantics::Copy, InputBuffering::EarlyDemux)?;
    let status = receiver.wait()?;
    if !status.success() || verdict[..] != *b"y" {
        return Err(format!("the receiver failed ({status}); see its message above").into());
    }
    if buf.iter().any(|&b| b != 0xEE) {
        return Err("the sender's overwrite did not stick in its own buffer".into());
    }
    println!("sender: the receiver got the bytes as they were when send was called");
    Ok(())
}

/// The receiver (the second process).
fn receiver() -> Result<()> {
    let name = std::env::var(NAME).map_err(|_| "ZCIO_EXAMPLE_CHANNEL is not set")?;
    let mut link = Channel::connect(&name, Duration::from_secs(30))?;
    link.set_profile(Profile::zero_copy());

    let (buf, acc) = link.recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)?;
    println!(
        "receiver: got {} bytes, path taken: {}",
        buf.len(),
        acc.path
    );

    let want = message();
    if buf.len() != LEN {
        return Err(format!("receiver: got {} bytes, expected {LEN}", buf.len()).into());
    }
    if let Some(i) = (0..LEN).find(|&i| buf[i] != want[i]) {
        return Err(format!(
            "receiver: byte {i} is {:#04x}, expected {:#04x}: the sender's overwrite leaked through",
            buf[i], want[i]
        )
        .into());
    }
    let (t, _) = link.send(Semantics::Copy, b"y")?;
    link.wait(t)?;
    Ok(())
}

/// Play the role the environment names, or start as the sender.
fn dispatch() -> Result<()> {
    roles::dispatch(run, &[("receiver", receiver)])
}

example::main_and_test!(example_memnet_emulated_copy, dispatch);
