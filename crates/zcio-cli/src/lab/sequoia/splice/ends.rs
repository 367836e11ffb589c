//! The two ends of a splice run for each pair of descriptors, and the mover between them.

use super::stream::*;
use crate::transfer::Res;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use zcio_sequoia::ppio::{Increment, Splice};

/// The source and sink of one run, and the thread at a socket's other end.
pub(super) struct Ends {
    pub(super) source: Endpoint,
    pub(super) sink: Endpoint,
    pub(super) peer: Option<std::thread::JoinHandle<Peer>>,
    pub(super) stop: Arc<AtomicBool>,
}

/// What the thread at a socket's other end did.
pub(super) struct Peer {
    /// Bytes it wrote (a socket source) or read (a socket sink).
    pub(super) moved: u64,
    /// A throughput run's socket sink: the stamps it read (8 bytes per [`STAMP_EVERY`]), up
    /// to the run's length, checked once the clock has stopped.
    pub(super) stamps: Vec<u8>,
    /// A paced run's socket sink: the first stamp byte that differed from the stream.
    pub(super) wrong: Option<Wrong>,
}

pub(super) enum Endpoint {
    File(File),
    Socket(UnixStream),
}

impl Endpoint {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Endpoint::File(f) => f.as_fd(),
            Endpoint::Socket(s) => s.as_fd(),
        }
    }
}

/// A throughput run of so many bytes, or a paced run (endless, until `stop`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Mode {
    Throughput(u64),
    Paced,
}

/// Set up `pair` for a run; `stream` is what its sink must receive. A socket source's writer
/// and a socket sink's reader run on CPU 1. A socket sink's reader reads into one buffer, as a
/// reader that discards would, and keeps the stamps it reads (8 bytes of every
/// [`STAMP_EVERY`], in memory written before the clock starts) for the check after the clock
/// stops; in a paced run it compares them as they come (on CPU 1, which the paced run does
/// not measure).
pub(super) fn ends(
    pair: &str,
    src_file: &File,
    dir: &std::path::Path,
    mode: Mode,
    stream: &Stream,
) -> Res<Ends> {
    let stop = Arc::new(AtomicBool::new(false));
    let file_source = || -> Res<Endpoint> {
        let mut f = src_file.try_clone()?;
        f.seek(SeekFrom::Start(0))?;
        Ok(Endpoint::File(f))
    };
    let file_sink = || -> Res<Endpoint> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("sink"))?;
        Ok(Endpoint::File(f))
    };
    Ok(match pair {
        "file_to_socket" => {
            let (tx, rx) = UnixStream::pair()?;
            let peer = match mode {
                Mode::Throughput(bytes) => stamp_keeper(rx, bytes),
                Mode::Paced => stamp_checker(rx, stream.clone()),
            };
            Ends {
                source: file_source()?,
                sink: Endpoint::Socket(tx),
                peer: Some(peer),
                stop,
            }
        }
        "file_to_file" => Ends {
            source: file_source()?,
            sink: file_sink()?,
            peer: None,
            stop,
        },
        _ => {
            let (tx, rx) = UnixStream::pair()?;
            let data = stream.data.clone();
            let halt = stop.clone();
            let bytes = match mode {
                Mode::Throughput(b) => Some(b),
                Mode::Paced => None,
            };
            let peer = writer(tx, data, halt, bytes);
            Ends {
                source: Endpoint::Socket(rx),
                sink: file_sink()?,
                peer: Some(peer),
                stop,
            }
        }
    })
}

/// A throughput run's socket sink: reads everything and keeps the stamps of the first `bytes`.
fn stamp_keeper(mut rx: UnixStream, bytes: u64) -> std::thread::JoinHandle<Peer> {
    // Written now, so that keeping the stamps costs no page fault later.
    let pages = (bytes as usize).div_ceil(STAMP_EVERY);
    let mut stamps = vec![0xa5u8; 8 * pages];
    std::thread::spawn(move || {
        pin(1);
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        while let Ok(k) = rx.read(&mut buf) {
            if k == 0 {
                break;
            }
            for (at, i, len) in stamp_spans(k, n) {
                let p = (at / STAMP_EVERY as u64) as usize;
                let into = 8 * p + (at % STAMP_EVERY as u64) as usize;
                if let Some(s) = stamps.get_mut(into..into + len) {
                    s.copy_from_slice(&buf[i..i + len]);
                }
            }
            n += k as u64;
        }
        Peer {
            moved: n,
            stamps,
            wrong: None,
        }
    })
}

/// A paced run's socket sink: reads everything and compares the stamps with `stream` as they
/// come.
fn stamp_checker(mut rx: UnixStream, stream: Stream) -> std::thread::JoinHandle<Peer> {
    std::thread::spawn(move || {
        pin(1);
        let mut buf = vec![0u8; 1 << 20];
        let (mut n, mut wrong) = (0u64, None);
        while let Ok(k) = rx.read(&mut buf) {
            if k == 0 {
                break;
            }
            if wrong.is_none() {
                wrong = stamp_spans(k, n)
                    .find_map(|(at, i, len)| stream.first_difference(&buf[i..i + len], at));
            }
            n += k as u64;
        }
        Peer {
            moved: n,
            stamps: Vec::new(),
            wrong,
        }
    })
}

/// A socket source: writes `data` over and over, `bytes` in all (a throughput run) or until
/// `halt` (a paced run).
fn writer(
    mut tx: UnixStream,
    data: Arc<[u8]>,
    halt: Arc<AtomicBool>,
    bytes: Option<u64>,
) -> std::thread::JoinHandle<Peer> {
    std::thread::spawn(move || {
        pin(1);
        let chunk = &data[..CHUNK.min(data.len())];
        let mut n = 0u64;
        while !halt.load(Ordering::Relaxed) && bytes.is_none_or(|b| n < b) {
            let k = bytes.map_or(chunk.len() as u64, |b| (b - n).min(chunk.len() as u64));
            if tx.write_all(&chunk[..k as usize]).is_err() {
                break;
            }
            n += k;
        }
        Peer {
            moved: n,
            stamps: Vec::new(),
            wrong: None,
        }
    })
}

/// What sink of `pair` must receive.
pub(super) fn stream_of(pair: &str, data: &Arc<[u8]>) -> Stream {
    match pair {
        "socket_to_file" => Stream::new(data.clone(), CHUNK),
        _ => Stream::new(data.clone(), data.len()),
    }
}

/// [`Fault`]: spoil what `e`'s sink has received, the first `at` bytes of `stream` (a file
/// sink holding the last `in_file` of them): the file's last byte changed, or a stray byte
/// into the socket (the stream then differs from offset `at`).
pub(super) fn spoil(e: &Ends, stream: &Stream, at: u64, in_file: u64) -> Res<()> {
    match &e.sink {
        Endpoint::File(f) => {
            use std::os::unix::fs::FileExt;
            let mut b = [0u8; 1];
            f.read_exact_at(&mut b, in_file - 1)?;
            f.write_all_at(&[b[0] ^ 0xff], in_file - 1)?;
        }
        Endpoint::Socket(s) => {
            let mut s = s;
            s.write_all(&[stream.byte(at) ^ 0xff])?;
        }
    }
    Ok(())
}

/// One step of `variant`: at most `step` bytes from `e.source` to `e.sink`; 0 at the end.
pub(super) struct Mover<'a> {
    pub(super) splice: Option<Splice<'a>>,
    /// The read/write variant's buffer (empty for splice).
    pub(super) buf: Vec<u8>,
    pub(super) step: usize,
}

impl<'a> Mover<'a> {
    pub(super) fn new(variant: &str, e: &'a Ends, step: usize) -> Res<Mover<'a>> {
        Ok(Mover {
            splice: if variant == "splice" {
                Some(Splice::new(e.source.fd(), e.sink.fd())?)
            } else {
                None
            },
            buf: if variant == "splice" {
                Vec::new()
            } else {
                vec![0u8; step]
            },
            step,
        })
    }

    pub(super) fn mechanism(&self) -> String {
        self.splice
            .as_ref()
            .map_or("read/write".into(), |s| s.mechanism().name().into())
    }

    pub(super) fn step(&mut self, e: &Ends) -> Res<u64> {
        if let Some(s) = &mut self.splice {
            return Ok(s.start_flow(Increment::Bytes(self.step as u64))?.bytes);
        }
        let n = loop {
            match rustix::io::read(e.source.fd(), &mut self.buf) {
                Ok(n) => break n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(err) => return Err(format!("read: {err}").into()),
            }
        };
        let mut done = 0;
        while done < n {
            match rustix::io::write(e.sink.fd(), &self.buf[done..n]) {
                Ok(k) => done += k,
                Err(rustix::io::Errno::INTR) => continue,
                Err(err) => return Err(format!("write: {err}").into()),
            }
        }
        Ok(n as u64)
    }
}

/// Check the `len` bytes of file `f`, which holds the stream from offset `start`, and that it
/// holds no more.
pub(super) fn check_file(f: &File, stream: &Stream, start: u64, len: u64) -> Result<(), Wrong> {
    use std::os::unix::fs::FileExt;
    let size = f.metadata().map_or(0, |m| m.len());
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let mut at = 0u64;
    while at < len.min(size) {
        let k = ((len.min(size) - at) as usize).min(buf.len());
        if f.read_exact_at(&mut buf[..k], at).is_err() {
            break;
        }
        if let Some(w) = stream.first_difference(&buf[..k], start + at) {
            return Err(w);
        }
        at += k as u64;
    }
    if size != len || at != len {
        return Err(Wrong::Length {
            received: start + size,
            expected: start + len,
        });
    }
    Ok(())
}
