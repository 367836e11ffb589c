//! Container shipping between two processes (paper 003, Sequoia 2000): a container is pages
//! owned by one domain at a time. Writing it to an I/O path gives it up; reading one from a
//! path gains it. No bytes are copied on the way: on Linux a container is a memory file that
//! travels, sealed against writes, over a Unix socket.
//!
//! Run it with `cargo run -p zcio --example container_shipping`. The receiving domain is this
//! same program started again (`std::env::current_exe()`) with `ZCIO_EXAMPLE_ROLE=receiver`.

#[path = "common/example.rs"]
mod example;
#[path = "common/roles.rs"]
mod roles;

use example::Result;
use roles::peer_command;
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use zcio::sequoia::container::{ContainerError, Domain};

/// The socket the receiver connects to: the I/O path containers travel on.
const SOCKET: &str = "ZCIO_EXAMPLE_SOCKET";

/// The container's bytes: three pages less five bytes.
fn data() -> Vec<u8> {
    (0..3 * 4096 - 5).map(|i| (i % 253) as u8).collect()
}

/// The sending domain (the process you start).
fn run() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sock_path = dir.path().join("path");
    let listener = UnixListener::bind(&sock_path)?;
    let mut receiver = peer_command("receiver", "example_container_shipping")?
        .env(SOCKET, &sock_path)
        .spawn()?;
    let sock = roles::accept_from(&listener, &mut receiver, "receiver")?;

    // alloc + map: a container, filled by its owner.
    let mut domain = Domain::new();
    let data = data();
    let id = domain.alloc(data.len())?;
    domain.map(id)?.copy_from_slice(&data);

    // write: the container goes to the receiver and this domain loses it.
    domain.write(sock.as_fd(), id)?;
    match domain.map(id) {
        Err(ContainerError::NotOwned(_)) => println!("sender: the container is gone from here"),
        Ok(_) => return Err("the sender can still map a container it gave away".into()),
        Err(e) => return Err(e.into()),
    }
    // finish: no more containers on this path. The receiver reads the end as an end; a
    // socket that closes without it would read as a sender that died mid-stream.
    domain.finish(sock.as_fd())?;

    let status = receiver.wait()?;
    if !status.success() {
        return Err(format!("the receiver failed ({status}); see its message above").into());
    }
    Ok(())
}

/// The receiving domain (the second process).
fn receiver() -> Result<()> {
    let sock_path = std::env::var_os(SOCKET).ok_or("ZCIO_EXAMPLE_SOCKET is not set")?;
    let sock = UnixStream::connect(sock_path)?;
    let mut domain = Domain::new();

    // read: the next container on the path, mapped at once (`true`).
    let id = domain.read(sock.as_fd(), 0, true)?;
    let (got, want) = (domain.map_read(id)?, data());
    example::same("receiver", got, &want)?;
    println!("receiver: {} bytes arrived intact", got.len());
    domain.free(id)?; // done with it
    match domain.read(sock.as_fd(), 0, true) {
        Err(ContainerError::End) => println!("receiver: the sender finished the path"),
        Ok(_) => return Err("a second container came, one was sent".into()),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Play the role the environment names, or start as the sender.
fn dispatch() -> Result<()> {
    roles::dispatch(run, &[("receiver", receiver)])
}

example::main_and_test!(example_container_shipping, dispatch);
