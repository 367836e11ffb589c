//! The `zcio` command: pass data between two processes (or a process and a file) with the
//! semantics of your choice and see what it cost; calibrate; probe the kernel.
//!
//! Parse, dispatch ([`cli::run`]), and show a failure once ([`cli::report_error`]).

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match cli::args::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return cli::report_usage_error(&e),
    };
    let json = cli.cmd.json();
    match cli::run(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            cli::report_error(&e, json);
            ExitCode::FAILURE
        }
    }
}
