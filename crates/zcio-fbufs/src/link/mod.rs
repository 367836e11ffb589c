//! Fbufs between processes (paper 001, §3.3): references go out and deallocation notices come
//! back through shared rings beside a Unix socket, and a process that dies gives back every
//! reference it held.
//!
//! - The originator offers the path to a receiver once: its geometry and the link's rings
//!   ([`offer_path`], `SCM_RIGHTS`; [`crate::ring`]); then each chunk made so far, one frame
//!   each carrying a read-only descriptor of the chunk's memory (`SCM_RIGHTS` again).
//! - Chunks come and go ([`crate::path`]): a chunk made later is announced the same way, and a
//!   chunk retired under the path's budget gets a frame of its own that tells the receiver to
//!   unmap it and close its descriptor. Both go on the socket, never the ring, and count among
//!   the frames that hold references off the ring (below): a reference sent after an
//!   announcement can reach the receiver only after it, on the socket behind it, or on the
//!   ring once the receiver has taken it. The originator announces before it sends a reference
//!   into a chunk, and retires a chunk only once every fbuf in it is back from every receiver,
//!   so a receiver takes each chunk frame as it reads it. A reference into a chunk it was not
//!   told of, or was told to retire, is refused by name ([`FbufError::NoChunk`]), never read;
//!   an announcement over a chunk it knows, or outside the path, and a retirement of a chunk
//!   it does not know or holds an fbuf (or a message's root) in, are protocol errors, and it
//!   keeps its mapping of what it holds. A receiver that ignores a retirement keeps alive only
//!   pages it could read already.
//! - A send puts a three-word reference on the sends ring: no system call, and the data never
//!   moves. A receiver asleep on the socket is woken with one frame; when the ring is full the
//!   reference goes over the socket as a 24-byte frame instead, and so do the ones after it
//!   until the receiver has taken those from the socket (it reads the ring first), so that
//!   references arrive in the order sent.
//! - No end ever waits for the other to read: a frame the socket does not take now waits in a
//!   backlog for that peer, in order, and goes out when the end next touches that peer (a send,
//!   a poll, an allocation; a receive, a free) or, while the end sleeps, when the peer's socket
//!   takes more. One stuck receiver thus holds up no send and no other receiver of the path.
//!   The backlog is bounded: the references waiting for a receiver are at most those it holds
//!   (each fbuf is at least a page, and is sent to a receiver once until it comes back), and
//!   past an explicit limit ([`DEFAULT_BACKLOG_FRAMES`]) the peer counts as failed: an
//!   originator drops that receiver and releases its references as if it had died, a receiver
//!   gives up on its originator. A backlog goes with its end when that is dropped
//!   ([`OriginatorEnd::backlog_bytes`] tells what still waits). Nor does an end wait for the
//!   rest of a frame cut short: it keeps the part until the rest comes. Only
//!   [`ReceiverEnd::secure`] waits for the originator, for its answer.
//! - A receiver frees fbufs locally; each notice goes on the frees ring at once, so the
//!   originator never starves for free fbufs and gets no message for notices at all. Where the
//!   ring is full, the notices wait: they ride along with any request the receiver sends
//!   (piggybacked), and go out on their own when 64 have accumulated, a quarter of the path is
//!   held back, or before the receiver blocks for the next fbuf. Each side reads every frame
//!   queued on the socket with one system call.
//! - Before sleeping, an end looks at its ring for a while (yielding the CPU), since a wake-up
//!   costs more than a few looks when the other end is about to answer.
//! - A receiver that exits or is killed releases every reference it held (the paper: "its
//!   termination will cause the destruction of a communication endpoint, which will in turn
//!   cause the deallocation of all associated fbufs"). The originator sees the end through a
//!   pidfd of the receiving process (taken from the socket's peer credentials), so a socket
//!   that outlives its process in a child does not keep the fbufs, and through the socket's
//!   close where no pidfd can be had. An originator that exits leaves its memory to the
//!   receivers that map it: the kernel keeps the pages while any mapping holds them.
//! - A forwarding process (the server of a three-process path) is a receiver that offers the
//!   same path onward, with rings of its own, announces downstream the chunks it knows and
//!   passes every chunk frame on in the order it came, before any reference after it, and
//!   frees an fbuf upstream when its own receiver frees it. A path may also be offered onward
//!   outside a link ([`ReceiverEnd::mirror`]): its chunk frames then follow on a socket of
//!   their own, each written there before the end goes on, and the process there
//!   ([`PathMirror`]) reads them when it meets a reference into a chunk it does not know. It announces the process it forwards to (a frame with its pid; a forwarder
//!   further down announces its own, passed on), and the originator watches those processes:
//!   a forwarder that dies without a goodbye leaves what it held quarantined, not reused,
//!   until every process downstream of it has ended, since those may still be reading it
//!   ([`OriginatorEnd::quarantined`]). A downstream process in another pid namespace cannot
//!   be watched, and is not waited for. A forwarder that announces no one (one not built on
//!   [`Forwarder`], or a hostile one) is taken for a last receiver: what it held is reused
//!   when it dies, and only the processes it forwarded to, which trust it with all they
//!   receive, can read the recycled bytes.
//! - An end that closes its link in order says goodbye first (a frame of its own): dropping an
//!   [`OriginatorEnd`] or a [`ReceiverEnd`] does, and so does a [`Forwarder`] whose run ended
//!   well. A socket that closes without it lost its process (killed, crashed) or an end that
//!   failed, and the other side says so instead of taking it for the end of the stream: a
//!   receiver's next [`ReceiverEnd::recv`] fails with [`LinkError::PeerGone`], a forwarding
//!   server's run fails, and an originator's send to no receiver left fails.

use crate::aggregate::{Msg, NODE_BYTES};
use crate::path::{Fbuf, FbufError, FbufRef, Originator, PathInfo, Receiver, Variant};
use crate::region::RegionRead;
use crate::ring::{Dir, Rings};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

const SEND: u64 = 1;
const FREED: u64 = 2;
const SECURE: u64 = 3;
const SECURED: u64 = 4;
/// An aggregate message: the frame carries its root node and length.
const MSG: u64 = 5;
/// A wake-up for an end asleep on the socket (something is on its ring).
const WAKE: u64 = 6;
/// Goodbye: the sender of this frame closes its end of the link in order (it is done, not
/// killed), and sends nothing more.
const BYE: u64 = 8;
/// The sender of this frame forwards what it receives to the process whose pid the frame
/// carries (in its address word): if the sender dies, the fbufs it held may still be read
/// there, and must not be reused before that process has ended.
const DOWNSTREAM: u64 = 9;
/// A chunk made: the frame names it (its address and length) and carries a read-only
/// descriptor of its memory (`SCM_RIGHTS`).
const CHUNK: u64 = 10;
/// A chunk retired: the receiver unmaps it and closes its descriptor.
const RETIRE: u64 = 11;
/// Most downstream processes an originator watches for one receiver (a path of forwarders
/// announces each of them; more is a receiver flooding the originator).
const MAX_DOWNSTREAM: usize = 64;
/// What a receiver whose sender went without a goodbye gets (after "peer closed the
/// connection").
const SENDER_GONE: &str = "without a goodbye (killed, crashed or failed) while receiving";
pub(crate) const FRAME: usize = 24;

/// What went wrong on a link.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The fbuf layer refused.
    #[error(transparent)]
    Fbuf(#[from] FbufError),
    /// The socket failed.
    #[error("fbuf link: {0}")]
    Io(#[from] std::io::Error),
    /// The VM layer refused (descriptor passing).
    #[error(transparent)]
    Vm(#[from] zcio_vm::VmError),
    /// Meeting by name failed: a name taken or malformed, nobody there within the time, a
    /// process of another user.
    #[error("fbuf link: {0}")]
    Rendezvous(#[from] zcio_vm::rendezvous::RendezvousError),
    /// The peer sent something that is not this protocol.
    #[error("fbuf link: peer broke the protocol: {0}")]
    Protocol(String),
    /// The peer is gone.
    #[error("fbuf link: peer closed the connection {during}")]
    PeerGone {
        /// What we were doing.
        during: &'static str,
    },
    /// The peer stopped reading its socket: more frames wait for it than the limit allows.
    #[error(
        "fbuf link: {peer} stopped reading its socket: {frames} frames wait for it, more than the limit of {limit}"
    )]
    Stalled {
        /// Which peer ("the originator", "the downstream receiver").
        peer: &'static str,
        /// Frames waiting for it.
        frames: usize,
        /// The most allowed.
        limit: usize,
    },
}

/// Most frames that may wait for a peer whose socket is full before the peer counts as failed
/// (1.5 MiB of frames). References alone never reach it on a path of up to 256 MiB (65536
/// pages): a peer has each fbuf at most once at a time. Only a receiver that also floods
/// requests, or an originator that sends what it has not had back, gets that far.
pub const DEFAULT_BACKLOG_FRAMES: usize = 1 << 16;

mod channel;
mod forward;
mod mirror;
mod named;
mod originator;
mod peer;
mod receiver;
mod wire;

use channel::Channel;
pub use forward::Forwarder;
pub use mirror::PathMirror;
pub use named::PathName;
pub use originator::{DEFAULT_SPIN, OriginatorEnd};
use peer::{Failure, Held, Peer};
pub use receiver::{Received, ReceiverEnd};
pub(crate) use wire::{
    Frames, Next, frame, offer_path_now, parse, peer_pidfd, poll_ends, send_now,
};
use wire::{Outbox, readable, wait_in_or_out, wake};
pub use wire::{accept_path, offer_path};
