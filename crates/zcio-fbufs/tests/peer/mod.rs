//! The second process of the fbuf tests: this test binary, run again in peer mode, as a
//! receiver on a path another process created, or an originator that misbehaves ([`modes`]
//! says what each mode does).
//!
//! [`peer`] makes the command: the test binary itself, told to run only [`entry`] (which does
//! nothing in an ordinary run) with the mode and its arguments in `$ZCIO_FBUF_PEER`. What the
//! test harness prints before the entry runs ("running 1 test") is taken off the peer's
//! standard output before the caller reads it, so that a test reads what the peer printed and
//! nothing else. The peer leaves with `exit` (status 0 once its mode is done; a mode that
//! fails panics, status 101, as a program's `main` would).

// Each test binary that starts peers uses part of this module.
#![allow(dead_code)]

pub mod modes;

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixListener;
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use zcio_fbufs::link::ReceiverEnd;

/// The environment variable that makes this test binary a peer: the mode and its arguments,
/// separated by [`SEP`].
const PEER_ENV: &str = "ZCIO_FBUF_PEER";
/// Separates the arguments in [`PEER_ENV`] (the ASCII unit separator: no path has one).
const SEP: u8 = 0x1f;
/// The test harness's last line before the entry runs.
const PREAMBLE: &[u8] = b"running 1 test\n";

/// The peer's entry: in an ordinary run nothing; in a peer (`$ZCIO_FBUF_PEER` set) the mode,
/// then exit.
#[test]
fn entry() {
    let Some(spec) = std::env::var_os(PEER_ENV) else {
        return; // an ordinary run: this is only the peer's entry
    };
    let args: Vec<String> = std::iter::once("fbuf-peer".to_string())
        .chain(
            spec.as_bytes()
                .split(|b| *b == SEP)
                .map(|a| String::from_utf8(a.to_vec()).expect("a UTF-8 argument")),
        )
        .collect();
    modes::run(&args);
    std::io::stdout().flush().ok();
    std::process::exit(0);
}

/// A peer to start: [`Peer::arg`] and [`Peer::args`] give the mode and its arguments, the
/// standard streams are set as with a [`Command`].
pub struct Peer {
    args: Vec<OsString>,
    stdin: Option<Stdio>,
    stdout: Option<Stdio>,
    stderr: Option<Stdio>,
}

/// A peer, to be given its mode and arguments.
pub fn peer() -> Peer {
    Peer {
        args: Vec::new(),
        stdin: None,
        stdout: None,
        stderr: None,
    }
}

impl Peer {
    /// The next argument (the first is the mode).
    pub fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Peer {
        self.args.push(a.as_ref().to_owned());
        self
    }

    /// The next arguments.
    pub fn args<S: AsRef<OsStr>>(&mut self, a: impl IntoIterator<Item = S>) -> &mut Peer {
        self.args
            .extend(a.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Its standard input.
    pub fn stdin(&mut self, s: impl Into<Stdio>) -> &mut Peer {
        self.stdin = Some(s.into());
        self
    }

    /// Its standard output.
    pub fn stdout(&mut self, s: impl Into<Stdio>) -> &mut Peer {
        self.stdout = Some(s.into());
        self
    }

    /// Its standard error.
    pub fn stderr(&mut self, s: impl Into<Stdio>) -> &mut Peer {
        self.stderr = Some(s.into());
        self
    }

    /// The command: this test binary running only [`entry`], the arguments in its environment.
    fn command(&mut self) -> Command {
        let spec: Vec<u8> = self.args.join(OsStr::from_bytes(&[SEP])).into_vec();
        let mut c = Command::new(std::env::current_exe().expect("this test binary"));
        c.args([
            "--exact",
            "peer::entry",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(PEER_ENV, OsString::from_vec(spec));
        if let Some(s) = self.stdin.take() {
            c.stdin(s);
        }
        if let Some(s) = self.stdout.take() {
            c.stdout(s);
        }
        if let Some(s) = self.stderr.take() {
            c.stderr(s);
        }
        c
    }

    /// Start it, as [`Command::spawn`] does; its standard output, if piped, starts with what
    /// the peer printed.
    pub fn spawn(&mut self) -> std::io::Result<Child> {
        let mut child = self.command().spawn()?;
        if let Some(out) = child.stdout.as_mut() {
            skip_preamble(out)?;
        }
        Ok(child)
    }

    /// Run it to its end, as [`Command::output`] does (standard output and error collected
    /// unless set, no standard input unless set).
    pub fn output(&mut self) -> std::io::Result<Output> {
        self.stdin.get_or_insert_with(Stdio::null);
        self.stdout.get_or_insert_with(Stdio::piped);
        self.stderr.get_or_insert_with(Stdio::piped);
        self.spawn()?.wait_with_output()
    }

    /// Start it as an originator that connects to `l`, its standard output piped, and join the
    /// path it offers: the peer, and this process's end of the path.
    pub fn offering(&mut self, l: &UnixListener) -> (Child, ReceiverEnd) {
        let child = self.stdout(Stdio::piped()).spawn().unwrap();
        let (s, _) = l.accept().unwrap();
        (child, ReceiverEnd::connect(s).unwrap())
    }
}

/// Read the test harness's lines off the peer's standard output, up to [`PREAMBLE`], a byte at
/// a time so that nothing the peer prints is taken with them.
fn skip_preamble(out: &mut ChildStdout) -> std::io::Result<()> {
    let mut seen = Vec::new();
    let mut b = [0u8; 1];
    while !seen.ends_with(PREAMBLE) {
        if out.read(&mut b)? == 0 {
            return Ok(()); // it ended before the entry ran
        }
        seen.push(b[0]);
        if seen.len() > 4096 {
            return Err(std::io::Error::other(format!(
                "the peer's test harness printed no {PREAMBLE:?}: {}",
                String::from_utf8_lossy(&seen)
            )));
        }
    }
    Ok(())
}
