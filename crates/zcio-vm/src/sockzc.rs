//! Socket calls at the ABI edge that `rustix` lacks: `SO_ZEROCOPY` and reading the error queue
//! where `MSG_ZEROCOPY` completions arrive (`recvmsg(MSG_ERRQUEUE)` with its `IP_RECVERR`
//! control message). Safe wrappers; the layers above stay free of `unsafe`.

use std::os::fd::{AsRawFd, BorrowedFd};

/// `ee_origin` of a `MSG_ZEROCOPY` completion (`SO_EE_ORIGIN_ZEROCOPY`, linux/errqueue.h).
pub const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `ee_code` bit saying the kernel copied the data anyway (`SO_EE_CODE_ZEROCOPY_COPIED`).
pub const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// One error-queue entry: the fields of `struct sock_extended_err` a zero-copy completion uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtendedErr {
    /// `ee_errno`.
    pub errno: u32,
    /// `ee_origin`.
    pub origin: u8,
    /// `ee_code`.
    pub code: u8,
    /// `ee_info`: first completion id of the range.
    pub info: u32,
    /// `ee_data`: last completion id of the range.
    pub data: u32,
}

/// `setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, 1)`.
pub fn set_zerocopy(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `fd` is an open socket borrowed for the call; the option value points to a live
    // `c_int` and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ZEROCOPY,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Control buffer for one error-queue message, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 128]);

/// Read one entry of `fd`'s error queue without waiting: `None` if it is empty. Returns the
/// `sock_extended_err` of its `IP_RECVERR` (or `IPV6_RECVERR`) control message.
pub fn recv_errqueue(fd: BorrowedFd<'_>) -> std::io::Result<Option<ExtendedErr>> {
    let mut control = Control([0; 128]);
    // SAFETY: `msghdr` is plain data (pointers, lengths, flags) for which all zeros is valid:
    // no name, no data vector, no control buffer.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<Control>() as _;
    loop {
        // SAFETY: `fd` is an open socket borrowed for the call; `msg` names no address and no
        // data buffers, and its control buffer is `control`, live, writable and of the length
        // given.
        let n = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &raw mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::Interrupted => {}
            std::io::ErrorKind::WouldBlock => return Ok(None),
            _ => return Err(e),
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(std::io::Error::other("control message truncated"));
    }
    // SAFETY: recvmsg set `msg.msg_control`/`msg.msg_controllen` to the part of `control` it
    // filled with control messages; `control` is aligned for `cmsghdr`, initialized, and
    // outlives the walk. CMSG_FIRSTHDR/CMSG_NXTHDR return headers within that length or null,
    // and a header's data is read (unaligned) only when its `cmsg_len` covers a
    // `sock_extended_err`.
    let ee = unsafe {
        let need = libc::CMSG_LEN(size_of::<libc::sock_extended_err>() as u32) as usize;
        let mut found = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        while !cmsg.is_null() {
            let h = &*cmsg;
            let recverr = (h.cmsg_level == libc::SOL_IP && h.cmsg_type == libc::IP_RECVERR)
                || (h.cmsg_level == libc::SOL_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
            if recverr && h.cmsg_len as usize >= need {
                found = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(cmsg).cast::<libc::sock_extended_err>(),
                ));
                break;
            }
            cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
        }
        found
    };
    match ee {
        Some(ee) => Ok(Some(ExtendedErr {
            errno: ee.ee_errno,
            origin: ee.ee_origin,
            code: ee.ee_code,
            info: ee.ee_info,
            data: ee.ee_data,
        })),
        None => Err(std::io::Error::other(
            "error-queue message without an IP_RECVERR/IPV6_RECVERR control message",
        )),
    }
}
