//! The control connection between the sender and the receiving process: length-prefixed
//! frames and passed descriptors.

use super::Res;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

pub(super) fn send_frame(s: &mut UnixStream, data: &[u8]) -> Res<()> {
    s.write_all(&(data.len() as u64).to_ne_bytes())?;
    s.write_all(data)?;
    Ok(())
}

pub(super) fn recv_frame(s: &mut UnixStream) -> Res<Vec<u8>> {
    let mut l = [0u8; 8];
    s.read_exact(&mut l)?;
    let n = u64::from_ne_bytes(l) as usize;
    if n > 1 << 20 {
        return Err(format!("control frame of {n} bytes").into());
    }
    let mut v = vec![0u8; n];
    s.read_exact(&mut v)?;
    Ok(v)
}

pub(super) fn send_fd(s: &UnixStream, fd: &OwnedFd) -> Res<()> {
    zcio_vm::wire::send_with_fds(s.as_fd(), b"F", &[fd.as_fd()])?;
    Ok(())
}

pub(super) fn recv_fd(s: &UnixStream) -> Res<OwnedFd> {
    let mut b = [0u8; 1];
    let (_, mut fds) = zcio_vm::wire::recv_with_fds(s.as_fd(), &mut b)?;
    Ok(fds.pop().ok_or("no descriptor received")?)
}
