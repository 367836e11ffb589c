//! The `zcio` command: pass data between two processes (or a process and a file) with the
//! semantics of your choice and see what it cost; calibrate; probe the kernel.

use zcio::{memnet, transfer};

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "zcio",
    version,
    about = "Copy-avoiding I/O: Genie's data-passing semantics on Linux"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Move data from this process to a receiver process (or a file and back) and report.
    Transfer(transfer::TransferArgs),
    /// Measure the primitives on this machine and write the profile the library loads.
    Calibrate {
        /// Where to write the profile (default: $ZCIO_PROFILE or ~/.cache/zcio/profile.json).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Fewer samples (a second instead of several).
        #[arg(long)]
        quick: bool,
    },
    /// Probe the kernel features zcio uses and print them as JSON.
    Probe {
        /// Directory where file transfers go (for the O_DIRECT probe).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Hold the skips tests recorded in this file ($ZCIO_SKIP_LOG) against the probe: fail
        /// if a test skipped for a capability the probe finds here.
        #[arg(long, value_name = "SKIP_LOG")]
        check_skips: Option<PathBuf>,
    },
    /// The reproduction report: run every experiment, write index.html, REPORT.md,
    /// results.json and plots.
    Report(zcio::report::ReportArgs),
    /// Random transfers (semantics, modules, lengths, offsets, overwrites) to receiving
    /// processes, every byte checked, for a given time; then the tally and the resources held.
    Soak(zcio::soak::SoakArgs),
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
    /// Internal: a relay or the display of `zcio bench containers`.
    #[command(hide = true)]
    FrameStage {
        /// One of `zcio::lab::sequoia::containers::measure::VARIANTS`.
        #[arg(long)]
        variant: String,
        /// The socket path to take frames from (listened on).
        #[arg(long)]
        listen: PathBuf,
        /// A relay: the next stage's socket path.
        #[arg(long)]
        to: Option<PathBuf>,
        /// The display: the sender's socket path for volatile containers given back.
        #[arg(long)]
        release: Option<PathBuf>,
    },
    /// Internal: the receiving process of `zcio bench fbufs`'s iceoryx2 contender.
    #[command(hide = true)]
    Iceoryx2Sink {
        /// Unix socket path to connect to (control: ready, warm-up, done).
        #[arg(long)]
        connect: PathBuf,
        /// iceoryx2 service name.
        #[arg(long)]
        service: String,
        /// Touch pattern name.
        #[arg(long)]
        touch: String,
        /// Message length.
        #[arg(long)]
        bytes: usize,
        /// Messages, warm-up included.
        #[arg(long)]
        messages: u64,
    },
    /// Internal: the receiving process of `zcio transfer`.
    #[command(hide = true)]
    Peer {
        /// Unix socket path to connect to.
        #[arg(long)]
        connect: PathBuf,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Copy, emulated copy and emulated share (or any semantics) over the memory network.
    Memnet(memnet::BenchArgs),
    /// Genie's experiments alone (Figures 3, 6, 7): per semantics and input scheme, the
    /// fitted latency line and the measured points.
    Genie(zcio::lab::genie::bench::GenieArgs),
    /// Fbufs (paper 001, Table 1, Figure 3): the four variants against page remapping,
    /// copies through a pipe and a Unix socket, and iceoryx2, two processes, per-page cost and
    /// throughput.
    #[command(alias = "fbufs-table1")]
    Fbufs(zcio::lab::fbufs::measure::FbufsArgs),
    /// VMMR (paper 002, Figures 4, 5, 7-10): a message in scattered 4 KiB or 2 MiB granules
    /// made contiguous by moving its pages (bitmap searches, size classes, buddy) against
    /// copying it, and the bitmap search on random maps.
    Vmmr(zcio::lab::vmmr::measure::VmmrArgs),
    /// Paper 003's checksum: every kernel, the fused copy, the fastest crates.io peers and the
    /// memory read bandwidth, in Gbit/s per buffer size.
    Checksum(zcio::lab::sequoia::checksum::measure::ChecksumArgs),
    /// Paper 003's peer-to-peer I/O: splice against a read/write loop for file→socket,
    /// file→file and socket→file: throughput, increment latency, CPU left to a task.
    Splice(zcio::lab::sequoia::splice::measure::SpliceArgs),
    /// Paper 003's frame experiment: 640×480 frames from a sender through relays to a
    /// display process, by sealed or volatile containers or by read/write: frames per second.
    Containers(zcio::lab::sequoia::containers::measure::FramesArgs),
    /// Paper 004's experiment: N concurrent SQLite scan queries on Wisconsin tables, by the
    /// kernel's buffered reads and by the user-level I/O layer (ring or system-call initiation,
    /// registered or per-request buffers), warm and cold; fio beside the layer alone.
    Uio(zcio::lab::uio::measure::UioArgs),
}

/// `zcio probe --check-skips`: every recorded skip must be for a capability the probe finds
/// absent.
fn check_skips_against(
    p: &zcio_genie::probe::Probe,
    log: &std::path::Path,
) -> zcio::transfer::Res<()> {
    let text = match std::fs::read_to_string(log) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(), // nothing skipped
        Err(e) => return Err(format!("cannot read the skip log {}: {e}", log.display()).into()),
    };
    let skips = zcio_vm::skip::read_log(&text)?;
    let (ok, failures) = p.check_skips(&skips);
    for l in &ok {
        eprintln!("{l}");
    }
    for l in &failures {
        eprintln!("SKIP FAILED: {l}");
    }
    eprintln!(
        "{} test skip(s): {} for capabilities absent here, {} failing",
        skips.len(),
        ok.len(),
        failures.len()
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} test(s) skipped for capabilities this machine has",
            failures.len()
        )
        .into())
    }
}

impl Cmd {
    /// Whether the command was asked for JSON on stdout (`--json`): its error then goes there
    /// too, as `{"error": ...}`, beside the message on stderr.
    fn json(&self) -> bool {
        match self {
            Cmd::Transfer(a) => a.json,
            Cmd::Soak(a) => a.json,
            Cmd::Bench(b) => match b {
                BenchCmd::Memnet(a) => a.json,
                BenchCmd::Genie(a) => a.json,
                BenchCmd::Fbufs(a) => a.json,
                BenchCmd::Vmmr(a) => a.json,
                BenchCmd::Checksum(a) => a.json,
                BenchCmd::Splice(a) => a.json,
                BenchCmd::Containers(a) => a.json,
                BenchCmd::Uio(a) => a.json,
            },
            _ => false,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.cmd.json();
    let r = match cli.cmd {
        Cmd::Transfer(a) => transfer::run(a),
        Cmd::Peer { connect } => transfer::peer(&connect),
        Cmd::Bench(BenchCmd::Memnet(b)) => memnet::run(b),
        Cmd::Bench(BenchCmd::Genie(b)) => zcio::lab::genie::bench::run(b),
        Cmd::Bench(BenchCmd::Fbufs(b)) => zcio::lab::fbufs::measure::run(b),
        Cmd::Bench(BenchCmd::Vmmr(b)) => zcio::lab::vmmr::measure::run(b),
        Cmd::Bench(BenchCmd::Checksum(b)) => zcio::lab::sequoia::checksum::measure::run(b),
        Cmd::Bench(BenchCmd::Splice(b)) => zcio::lab::sequoia::splice::measure::run(b),
        Cmd::Bench(BenchCmd::Containers(b)) => zcio::lab::sequoia::containers::measure::run(b),
        Cmd::Bench(BenchCmd::Uio(b)) => zcio::lab::uio::measure::run(b),
        Cmd::FrameStage {
            variant,
            listen,
            to,
            release,
        } => zcio::lab::sequoia::containers::measure::stage(
            &variant,
            &listen,
            to.as_deref(),
            release.as_deref(),
        ),
        Cmd::FbufSink {
            connect,
            contender,
            bytes,
            count,
            touch,
            behind_server,
        } => zcio::lab::fbufs::measure::sink(
            &connect,
            &contender,
            bytes,
            count,
            &touch,
            behind_server,
        ),
        Cmd::Iceoryx2Sink {
            connect,
            service,
            touch,
            bytes,
            messages,
        } => zcio::lab::fbufs::iceoryx::sink(&connect, &service, &touch, bytes, messages),
        Cmd::Report(a) => zcio::report::run(a),
        Cmd::Soak(a) => zcio::soak::run(a),
        Cmd::Probe { dir, check_skips } => {
            let p = zcio_genie::probe::probe(&dir);
            println!(
                "{}",
                serde_json::to_string_pretty(&p).expect("probe serializes")
            );
            match check_skips {
                Some(log) => check_skips_against(&p, &log),
                None => Ok(()),
            }
        }
        Cmd::Calibrate { out, quick } => calibrate(out, quick),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zcio: {e}");
            if json {
                println!("{}", serde_json::json!({ "error": e.to_string() }));
            }
            ExitCode::FAILURE
        }
    }
}

fn calibrate(out: Option<PathBuf>, quick: bool) -> Result<(), Box<dyn std::error::Error>> {
    let bar = indicatif::ProgressBar::new(100);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>12} [{bar:40}] {percent}%")
            .expect("template"),
    );
    let p = zcio_genie::profile::Profile::calibrate(quick, |step, frac| {
        bar.set_message(step.to_string());
        bar.set_position((frac * 100.0) as u64);
    })?;
    bar.finish_and_clear();
    let path = out.unwrap_or_else(zcio_genie::profile::Profile::default_path);
    p.save(&path)?;
    eprintln!("profile written to {}", path.display());
    println!("{}", serde_json::to_string_pretty(&p)?);
    Ok(())
}
