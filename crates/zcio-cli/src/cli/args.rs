//! The command line: the verbs and the arguments of those whose work is not in the library
//! (the library's verbs bring their own argument types: `TransferArgs`, `SoakArgs`,
//! `ReportArgs`, the benches' arguments).

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use zcio_cli::{memnet, transfer};

/// `zcio`.
#[derive(Parser)]
#[command(
    name = "zcio",
    version,
    about = "Copy-avoiding I/O: Genie's data-passing semantics on Linux"
)]
pub struct Cli {
    /// The verb.
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The verbs.
#[derive(Subcommand)]
pub enum Cmd {
    /// Move data from this process to a receiver process (or a file and back) and report.
    Transfer(transfer::TransferArgs),
    /// Measure the primitives on this machine and write the profile the library loads.
    Calibrate(CalibrateArgs),
    /// Probe the kernel features zcio uses and print them as JSON.
    Probe(ProbeArgs),
    /// The reproduction report: run every experiment, write index.html, REPORT.md,
    /// results.json and plots.
    Report(zcio_cli::report::ReportArgs),
    /// Random transfers (semantics, modules, lengths, offsets, overwrites) to receiving
    /// processes, every byte checked, for a given time; then the tally and the resources held.
    Soak(zcio_cli::soak::SoakArgs),
    /// Benchmarks, side by side in one run.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Internal: the receiving process of `zcio bench fbufs`.
    #[command(hide = true)]
    FbufSink {
        /// Unix socket path to connect to.
        #[arg(long)]
        connect: PathBuf,
        /// Contender name.
        #[arg(long)]
        contender: String,
        /// Message length.
        #[arg(long)]
        bytes: usize,
        /// Messages.
        #[arg(long)]
        count: usize,
        /// Touch pattern name.
        #[arg(long)]
        touch: String,
        /// The receiver behind the forwarding server (fbufs-cached-volatile-via-server).
        #[arg(long)]
        behind_server: bool,
    },
    /// Internal: the protocol or the receiving domain of `zcio bench fbufs-stack`.
    #[command(hide = true)]
    FbufStackDomain(zcio_cli::lab::fbufs::stack::measure::DomainArgs),
    /// Internal: a relay or the display of `zcio bench containers`.
    #[command(hide = true)]
    FrameStage(FrameStageArgs),
    /// Internal: the receiving process of `zcio bench fbufs`'s iceoryx2 contender.
    #[command(hide = true)]
    Iceoryx2Sink(Iceoryx2SinkArgs),
    /// Internal: the receiving process of `zcio transfer`.
    #[command(hide = true)]
    Peer(PeerArgs),
    /// Internal: the sending process of a run of `zcio bench channel`.
    #[command(hide = true)]
    ChannelSender(zcio_cli::lab::genie::channel::SenderArgs),
}

/// The benches.
#[derive(Subcommand)]
pub enum BenchCmd {
    /// Copy, emulated copy and emulated share (or any semantics) over the memory network.
    Memnet(memnet::BenchArgs),
    /// Genie's experiments alone (Figures 3, 6, 7): per semantics and input scheme, the
    /// fitted latency line and the measured points.
    Genie(zcio_cli::lab::genie::bench::GenieArgs),
    /// zcio's channel API between two processes against iceoryx2 and a Unix socket, 4 KiB to
    /// 256 MiB messages in 4 KiB or huge-page buffers, every byte checked: one-way latency,
    /// streamed throughput, time inside the send, CPU time.
    Channel(zcio_cli::lab::genie::channel::ChannelArgs),
    /// A numpy array from one Python process to another (8 and 128 MiB): zcio's Python
    /// module against multiprocessing's Pipe and Queue, shared_memory and iceoryx2; end-to-end
    /// time, time in the send, CPU, peak RSS, and whether the receiver saw a later change.
    Python(zcio_cli::lab::genie::python::PythonArgs),
    /// A channel's throughput from C (crates/zcio-c/c/bench.c compiled at run time with `cc
    /// -O2` against libzcio_c) against the Rust API's doing the same, two processes, every
    /// byte checked: MiB/s per message size and C over Rust.
    C(zcio_cli::lab::genie::c::CArgs),
    /// Fbufs (paper 001, Table 1, Figure 3): the four variants against page remapping,
    /// copies through a pipe and a Unix socket, and iceoryx2, two processes, per-page cost and
    /// throughput.
    #[command(alias = "fbufs-table1")]
    Fbufs(zcio_cli::lab::fbufs::measure::FbufsArgs),
    /// Fbufs through a UDP/IP stack (paper 001, Figures 4-6): datagrams from an application
    /// through a protocol domain (UDP, IP fragmenting) to a receiving domain (IP
    /// reassembling), by fbuf aggregates, by copies, and in one domain; throughput per
    /// datagram size, and the aggregate operations alone.
    FbufsStack(zcio_cli::lab::fbufs::stack::measure::StackArgs),
    /// VMMR (paper 002, Figures 4, 5, 7-10): a message in scattered 4 KiB or 2 MiB granules
    /// made contiguous by moving its pages (bitmap searches, size classes, buddy) against
    /// copying it, and the bitmap search on random maps.
    Vmmr(zcio_cli::lab::vmmr::measure::VmmrArgs),
    /// Paper 003's checksum: every kernel, the fused copy, the fastest crates.io peers and the
    /// memory read bandwidth, in Gbit/s per buffer size.
    Checksum(zcio_cli::lab::sequoia::checksum::measure::ChecksumArgs),
    /// Paper 003's peer-to-peer I/O: splice against a read/write loop for file→socket,
    /// file→file and socket→file: throughput, increment latency, CPU left to a task.
    Splice(zcio_cli::lab::sequoia::splice::measure::SpliceArgs),
    /// Paper 003's frame experiment: 640×480 frames from a sender through relays to a
    /// display process, by sealed or volatile containers or by read/write: frames per second.
    Containers(zcio_cli::lab::sequoia::containers::measure::FramesArgs),
    /// Paper 004's experiment: N concurrent SQLite scan queries on Wisconsin tables, by the
    /// kernel's buffered reads and by the user-level I/O layer (ring or system-call initiation,
    /// registered or per-request buffers), warm and cold; fio beside the layer alone.
    Uio(zcio_cli::lab::uio::measure::UioArgs),
}

/// Arguments of `zcio calibrate`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// Where to write the profile (default: $ZCIO_PROFILE or ~/.cache/zcio/profile.json).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Fewer samples (a second instead of several).
    #[arg(long)]
    pub quick: bool,
}

/// Arguments of `zcio probe`.
#[derive(clap::Args)]
pub struct ProbeArgs {
    /// Directory where file transfers go (for the O_DIRECT probe).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Hold the skips tests recorded in this file ($ZCIO_SKIP_LOG) against the probe: fail
    /// if a test skipped for a capability the probe finds here.
    #[arg(long, value_name = "SKIP_LOG")]
    pub check_skips: Option<PathBuf>,
}

/// Arguments of the hidden `zcio frame-stage`.
#[derive(clap::Args)]
pub struct FrameStageArgs {
    /// One of `zcio_cli::lab::sequoia::containers::measure::VARIANTS`.
    #[arg(long)]
    pub variant: String,
    /// Bytes of a frame.
    #[arg(long)]
    pub frame_bytes: usize,
    /// The socket path to take frames from (listened on).
    #[arg(long)]
    pub listen: PathBuf,
    /// A relay: the next stage's socket path.
    #[arg(long)]
    pub to: Option<PathBuf>,
    /// The display: the sender's socket path for volatile containers given back.
    #[arg(long)]
    pub release: Option<PathBuf>,
}

/// Arguments of the hidden `zcio iceoryx2-sink`.
#[derive(clap::Args)]
pub struct Iceoryx2SinkArgs {
    /// Unix socket path to connect to (control: ready, warm-up, done).
    #[arg(long)]
    pub connect: PathBuf,
    /// iceoryx2 service name.
    #[arg(long)]
    pub service: String,
    /// Touch pattern name.
    #[arg(long)]
    pub touch: String,
    /// Message length.
    #[arg(long)]
    pub bytes: usize,
    /// Messages, warm-up included.
    #[arg(long)]
    pub messages: u64,
}

/// Arguments of the hidden `zcio peer`.
#[derive(clap::Args)]
pub struct PeerArgs {
    /// Unix socket path to connect to.
    #[arg(long)]
    pub connect: PathBuf,
}

impl Cmd {
    /// Whether the command was asked for JSON on stdout (`--json`): its error then goes there
    /// too, as `{"error": ...}`, beside the message on stderr.
    pub fn json(&self) -> bool {
        match self {
            Cmd::Transfer(a) => a.json,
            Cmd::Soak(a) => a.json,
            Cmd::Bench(b) => b.json(),
            _ => false,
        }
    }
}

impl BenchCmd {
    /// The bench's `--json`.
    pub fn json(&self) -> bool {
        match self {
            BenchCmd::Memnet(a) => a.json,
            BenchCmd::Genie(a) => a.json,
            BenchCmd::Channel(a) => a.json,
            BenchCmd::Python(a) => a.json,
            BenchCmd::C(a) => a.json,
            BenchCmd::Fbufs(a) => a.json,
            BenchCmd::FbufsStack(a) => a.json,
            BenchCmd::Vmmr(a) => a.json,
            BenchCmd::Checksum(a) => a.json,
            BenchCmd::Splice(a) => a.json,
            BenchCmd::Containers(a) => a.json,
            BenchCmd::Uio(a) => a.json,
        }
    }
}
