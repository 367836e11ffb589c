//! The hidden verbs: the other processes of a multi-process run, started by this executable
//! (`zcio peer` for `zcio transfer`, the stages of `zcio bench containers`, the iceoryx2
//! receiver of `zcio bench fbufs`, the sender of `zcio bench channel`).

use super::args::{FrameStageArgs, Iceoryx2SinkArgs, PeerArgs};
use zcio_cli::Res;

/// `zcio peer`: the receiving process of a transfer.
pub fn peer(a: PeerArgs) -> Res<()> {
    zcio_cli::transfer::peer(&a.connect)
}

/// `zcio frame-stage`: a relay or the display of the frame experiment.
pub fn frame_stage(a: FrameStageArgs) -> Res<()> {
    zcio_cli::lab::sequoia::containers::measure::stage(
        &a.variant,
        a.frame_bytes,
        &a.listen,
        a.to.as_deref(),
        a.release.as_deref(),
    )
}

/// `zcio iceoryx2-sink`: the iceoryx2 contender's receiving process.
pub fn iceoryx2_sink(a: Iceoryx2SinkArgs) -> Res<()> {
    zcio_cli::lab::fbufs::iceoryx::sink(&a.connect, &a.service, &a.touch, a.bytes, a.messages)
}

/// `zcio fbuf-stack-domain`: the protocol or the receiving domain of `zcio bench fbufs-stack`.
pub fn fbuf_stack_domain(a: zcio_cli::lab::fbufs::stack::measure::DomainArgs) -> Res<()> {
    zcio_cli::lab::fbufs::stack::measure::domain(&a)
}

/// `zcio channel-sender`: the sending process of a run of `zcio bench channel`.
pub fn channel_sender(a: zcio_cli::lab::genie::channel::SenderArgs) -> Res<()> {
    zcio_cli::lab::genie::channel::sender::run(&a)
}
