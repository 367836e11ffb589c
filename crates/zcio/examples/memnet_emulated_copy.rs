//! Emulated copy between two processes over the memory network (paper 000, Genie).
//!
//! The sender passes a buffer with `Semantics::EmulatedCopy`: the call returns as soon as the
//! data is queued, without copying it, and the sender may then write into its buffer at once.
//! Copy semantics is kept all the same: the receiver gets the bytes as they were when `send`
//! was called, because the pages were write-protected (TCOW) and the overwrite went to new
//! copies of them.
//!
//! Run it with `cargo run -p zcio --example memnet_emulated_copy`. The receiver is this same
//! program started again (`std::env::current_exe()`) with `ZCIO_EXAMPLE_ROLE=receiver`.

#[path = "common/example.rs"]
mod example;
#[path = "common/roles.rs"]
mod roles;

use example::Result;
use roles::peer_command;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use zcio_genie::memnet::{LinkParts, MemnetEndpoint};
use zcio_genie::profile::Profile;
use zcio_genie::{AppBuffer, InputBuffering, Semantics};

/// The control socket the receiver connects to.
const SOCKET: &str = "ZCIO_EXAMPLE_SOCKET";
/// The message: 16 pages, small enough to sit in the link's pipes while nobody reads them.
const LEN: usize = 16 * 4096;

/// The bytes the sender sends: the receiver regenerates them to check what it got.
fn message() -> Vec<u8> {
    (0..LEN).map(|i| (i % 251) as u8).collect()
}

/// The sender (the process you start).
fn run() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sock_path = dir.path().join("ctl");
    let listener = UnixListener::bind(&sock_path)?;
    // The calibration profile (costs of copying and of the VM's primitives) this process
    // loaded, or measured if it found none: handed to the receiver so that it need not measure.
    let profile = dir.path().join("profile.json");
    Profile::current().save(&profile)?;
    let mut receiver = peer_command("receiver", "example_memnet_emulated_copy")?
        .env(SOCKET, &sock_path)
        .env(zcio_genie::profile::PROFILE_ENV, &profile)
        .spawn()?;
    let mut ctl = roles::accept_from(&listener, &mut receiver, "receiver")?;

    // Make a link and hand the receiver its side (descriptors over the Unix socket).
    let (mine, theirs, arena) = zcio_genie::memnet::link_parts()?;
    theirs.send_over(&ctl)?;
    let mut link = MemnetEndpoint::join(mine, Some(arena))?;
    // Take the VM path even where this machine finds copying 16 pages cheaper: that path is
    // what this example is about (the default profile would choose by cost).
    link.set_profile(Profile::zero_copy());

    let mut buf = AppBuffer::new(LEN)?; // page-aligned, as TCOW wants
    buf.copy_from_slice(&message());
    let (ticket, acc) = link.send(Semantics::EmulatedCopy, &buf)?;
    println!("sender: send returned, path taken: {}", acc.path);

    // Overwrite the buffer right away. The write takes a fault that gives this process fresh
    // copies of the pages (TCOW: with userfaultfd page by page, without it the whole protected
    // range at the first write) while the output keeps the originals, so it is done before the
    // receiver has read anything.
    let runtime = zcio_vm::VmRuntime::get();
    let before = runtime.stats().tcow_copies;
    buf.fill(0xEE);
    ctl.write_all(b"g")?; // only now may the receiver take the message
    link.wait(ticket)?; // the receiver has it
    let copies = runtime.stats().tcow_copies - before;
    println!("sender: overwrote its buffer ({copies} pages copied on write)");

    let mut verdict = [0u8; 1];
    ctl.read_exact(&mut verdict)?;
    let status = receiver.wait()?;
    if !status.success() || verdict != *b"y" {
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
    let sock_path = std::env::var_os(SOCKET).ok_or("ZCIO_EXAMPLE_SOCKET is not set")?;
    let mut ctl = UnixStream::connect(sock_path)?;
    let mut link = MemnetEndpoint::join(LinkParts::recv_from(&ctl)?, None)?;
    link.set_profile(Profile::zero_copy());

    let mut go = [0u8; 1];
    ctl.read_exact(&mut go)?; // the sender's go-ahead (given after its overwrite, with TCOW)
    let mut buf = AppBuffer::new(LEN)?;
    let (len, acc) = link.recv(
        Semantics::EmulatedCopy,
        &mut buf,
        InputBuffering::EarlyDemux,
    )?;
    println!("receiver: got {len} bytes, path taken: {}", acc.path);

    let want = message();
    if len != LEN {
        return Err(format!("receiver: got {len} bytes, expected {LEN}").into());
    }
    if let Some(i) = (0..LEN).find(|&i| buf[i] != want[i]) {
        return Err(format!(
            "receiver: byte {i} is {:#04x}, expected {:#04x}: the sender's overwrite leaked through",
            buf[i], want[i]
        )
        .into());
    }
    ctl.write_all(b"y")?;
    Ok(())
}

/// Play the role the environment names, or start as the sender.
fn dispatch() -> Result<()> {
    roles::dispatch(run, &[("receiver", receiver)])
}

example::main_and_test!(example_memnet_emulated_copy, dispatch);
