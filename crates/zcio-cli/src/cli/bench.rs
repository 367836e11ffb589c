//! `zcio bench`: one benchmark per subcommand, each in the library.

use super::args::BenchCmd;
use zcio_cli::Res;
use zcio_cli::error::Context;
use zcio_cli::lab::{fbufs, genie, sequoia, uio, vmmr};

/// Run the chosen bench.
pub fn run(b: BenchCmd) -> Res<()> {
    match b {
        BenchCmd::Memnet(a) => zcio_cli::memnet::run(a).context("bench memnet"),
        BenchCmd::Genie(a) => genie::bench::run(a),
        BenchCmd::Channel(a) => genie::channel::run(a),
        BenchCmd::Python(a) => genie::python::run(a),
        BenchCmd::C(a) => genie::c::run(a),
        BenchCmd::Fbufs(a) => fbufs::measure::run(a),
        BenchCmd::FbufsStack(a) => fbufs::stack::measure::run(a),
        BenchCmd::Vmmr(a) => vmmr::measure::run(a),
        BenchCmd::Checksum(a) => sequoia::checksum::measure::run(a),
        BenchCmd::Splice(a) => sequoia::splice::measure::run(a),
        BenchCmd::Containers(a) => sequoia::containers::measure::run(a),
        BenchCmd::Uio(a) => uio::measure::run(a),
    }
}
