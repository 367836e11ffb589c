//! Container shipping (paper 003, Sequoia 2000): a container is pages owned by one domain at a
//! time. Writing it to an I/O path gives it up; reading one from a path gains it. No bytes are
//! copied on the way: on Linux a container is a memory file that travels, sealed, over a Unix
//! socket.
//!
//! The two domains here sit in one process for brevity; each would normally be a process of
//! its own, holding one end of the socket.
//!
//! Run it with `cargo run -p zcio --example container_shipping`.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use zcio_sequoia::container::{ContainerError, Domain};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn run() -> Result<()> {
    let (a_end, b_end) = UnixStream::pair()?;
    let mut sender = Domain::new();
    let mut receiver = Domain::new();

    // alloc + map: a container of three pages (less five bytes), filled by its owner.
    let data: Vec<u8> = (0..3 * 4096 - 5).map(|i| (i % 253) as u8).collect();
    let id = sender.alloc(data.len())?;
    sender.map(id)?.copy_from_slice(&data);

    // write: the container goes to the other domain and the sender loses it.
    sender.write(a_end.as_fd(), id)?;
    match sender.map(id) {
        Err(ContainerError::NotOwned(_)) => println!("sender: the container is gone from here"),
        Ok(_) => return Err("the sender can still map a container it gave away".into()),
        Err(e) => return Err(e.into()),
    }

    // read: the next container on the socket, mapped at once (`true`).
    let got = receiver.read(b_end.as_fd(), 0, true)?;
    let bytes = receiver.map_read(got)?;
    if bytes != data.as_slice() {
        let at = bytes.iter().zip(&data).position(|(a, b)| a != b);
        return Err(format!(
            "the receiver got {} bytes, {} were sent; first difference at {at:?}",
            bytes.len(),
            data.len()
        )
        .into());
    }
    println!("receiver: {} bytes arrived intact", bytes.len());

    // free: done with it.
    receiver.free(got)?;
    if sender.owned() + receiver.owned() != 0 {
        return Err("a container is still owned after being freed".into());
    }
    Ok(())
}

fn main() -> Result<()> {
    run()
}

#[test]
fn example_container_shipping() {
    if let Err(e) = run() {
        panic!("{e}");
    }
}
