//! The command layer of `zcio`: the arguments ([`args`]), one module per verb whose work is not
//! in the library, the dispatch, and how a failure is shown.

pub mod args;
mod bench;
mod calibrate;
mod internal;
mod probe;

use args::Cmd;
use zcio_cli::Res;
use zcio_cli::error::Context;

/// Carry out one verb.
pub fn run(cmd: Cmd) -> Res<()> {
    match cmd {
        Cmd::Transfer(a) => zcio_cli::transfer::run(a).context("transfer"),
        Cmd::Calibrate(a) => calibrate::run(a),
        Cmd::Probe(a) => probe::run(a),
        Cmd::Report(a) => zcio_cli::report::run(a),
        Cmd::Soak(a) => zcio_cli::soak::run(a),
        Cmd::Bench(b) => bench::run(b),
        Cmd::FbufSink {
            connect,
            contender,
            bytes,
            count,
            touch,
            behind_server,
        } => zcio_cli::lab::fbufs::measure::sink(
            &connect,
            &contender,
            bytes,
            count,
            &touch,
            behind_server,
        ),
        Cmd::FbufStackDomain(a) => internal::fbuf_stack_domain(a),
        Cmd::FrameStage(a) => internal::frame_stage(a),
        Cmd::Iceoryx2Sink(a) => internal::iceoryx2_sink(a),
        Cmd::Peer(a) => internal::peer(a),
        Cmd::ChannelSender(a) => internal::channel_sender(a),
    }
}

/// Show a failure once: its message and the context it went through (`transfer: receiver:
/// ...`) on stderr; with `--json`, also as the one JSON object on stdout, `{"error": ...}`,
/// or the command's result with `"error"` added when the command got as far as a result
/// ([`zcio_cli::error::FailedWith`]).
pub fn report_error(e: &zcio_cli::error::Error, json: bool) {
    eprintln!("zcio: {e}");
    if json {
        println!("{}", zcio_cli::error::json_object(e));
    }
}

/// Show a command-line error as clap words it (on stderr, with the usage); with `--json`
/// among the arguments, also as `{"error": ...}` on stdout. Help and version go to stdout as
/// usual.
pub fn report_usage_error(e: &clap::Error) -> std::process::ExitCode {
    let json = std::env::args_os().any(|a| a == "--json");
    let _ = e.print();
    if json && e.use_stderr() {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default();
        let first = first.strip_prefix("error: ").unwrap_or(first);
        println!("{}", serde_json::json!({ "error": first }));
    }
    std::process::ExitCode::from(e.exit_code().clamp(0, 255) as u8)
}
