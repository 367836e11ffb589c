//! What a splice run sends and how what arrives is checked: the stamped data, the stream a
//! sink must receive, the content errors, and the fault that spoils a sink on purpose.

use std::sync::Arc;

/// The increment both variants move per step: a `start_flow` of this many bytes, or a read
/// and a write of a buffer this large.
pub(super) const STEP: usize = 64 << 10;

/// The pairs of descriptors, in the order they run.
pub(super) const PAIRS: [&str; 3] = ["file_to_socket", "file_to_file", "socket_to_file"];
/// The ways of moving the data.
pub(super) const VARIANTS: [&str; 2] = ["splice", "read_write"];

/// The name of the file system holding `path`, from its magic number.
pub fn fs_name(path: &std::path::Path) -> String {
    let Ok(st) = rustix::fs::statfs(path) else {
        return "unknown".into();
    };
    match st.f_type as u64 {
        0xEF53 => "ext4".into(),
        0x0102_1994 => "tmpfs".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x794C_7630 => "overlayfs".into(),
        0x2FC1_2FC1 => "zfs".into(),
        0x6573_5546 => "fuse".into(),
        0x6969 => "nfs".into(),
        0xF2F5_2010 => "f2fs".into(),
        other => format!("unknown (magic {other:#x})"),
    }
}

/// Pin the calling thread to `cpu` (where there are at least two CPUs); whether it took.
pub(super) fn pin(cpu: usize) -> bool {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n < 2 {
        return false;
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

/// The calling thread's CPU time so far (ns): user and system, the kernel's work for its
/// system calls included.
pub(super) fn thread_cpu_ns() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// The CPUs the calling thread may run on now, to give back to it with [`restore_cpus`] after
/// [`pin`]. (Counting them afterwards would not do: once pinned, the thread sees one CPU, and
/// threads it starts, the rest of a report's included, inherit its set.)
pub(super) fn allowed_cpus() -> Option<rustix::thread::CpuSet> {
    rustix::thread::sched_getaffinity(None).ok()
}

/// Let the calling thread run on `cpus` again (what [`allowed_cpus`] said before it was
/// pinned).
pub(super) fn restore_cpus(cpus: Option<rustix::thread::CpuSet>) {
    if let Some(set) = cpus {
        let _ = rustix::thread::sched_setaffinity(None, &set);
    }
}

pub(super) fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(9) as u8)
        .collect()
}

/// Bytes from one stamp to the next in the data.
pub const STAMP_EVERY: usize = 4096;

/// The data the runs move: a pattern, every [`STAMP_EVERY`] bytes of it starting with an
/// 8-byte stamp of its offset, so that a byte out of place is a stamp out of place.
pub fn data(len: usize) -> Vec<u8> {
    let mut d = pattern(len);
    for (p, page) in d.chunks_mut(STAMP_EVERY).enumerate() {
        let stamp = (0x5a5a_5a5a_0000_0000 ^ (p * STAMP_EVERY) as u64).to_le_bytes();
        let n = page.len().min(8);
        page[..n].copy_from_slice(&stamp[..n]);
    }
    d
}

/// The stamp bytes among `len` bytes read from offset `at` of a stream: (their stream offset,
/// their index in what was read, how many).
pub(super) fn stamp_spans(len: usize, at: u64) -> impl Iterator<Item = (u64, usize, usize)> {
    let end = at + len as u64;
    let every = STAMP_EVERY as u64;
    (at / every..end.div_ceil(every)).filter_map(move |p| {
        let (lo, hi) = ((p * every).max(at), (p * every + 8).min(end));
        (lo < hi).then(|| (lo, (lo - at) as usize, (hi - lo) as usize))
    })
}

/// What a socket source's writer sends over and over: the data's first MiB.
pub(super) const CHUNK: usize = 1 << 20;

/// What a sink must receive: `data`'s first `period` bytes, over and over (a file source is
/// read to its end and rewound; a socket source's writer repeats its first MiB).
#[derive(Debug, Clone)]
pub struct Stream {
    pub(super) data: Arc<[u8]>,
    pub(super) period: usize,
}

impl Stream {
    /// The stream of `data`'s first `period` bytes (all of them where it has fewer), repeated;
    /// `data` must not be empty.
    pub fn new(data: Arc<[u8]>, period: usize) -> Stream {
        assert!(!data.is_empty(), "a stream of no data");
        let period = period.clamp(1, data.len());
        Stream { data, period }
    }

    /// The byte at offset `at` of the stream.
    pub fn byte(&self, at: u64) -> u8 {
        self.data[(at % self.period as u64) as usize]
    }

    /// The first byte of `got`, read from offset `at` of the stream, that is not the stream's.
    pub fn first_difference(&self, got: &[u8], at: u64) -> Option<Wrong> {
        let mut off = 0;
        while off < got.len() {
            let pos = ((at + off as u64) % self.period as u64) as usize;
            let n = (self.period - pos).min(got.len() - off);
            let (have, want) = (&got[off..off + n], &self.data[pos..pos + n]);
            if have != want {
                let i = have.iter().zip(want).position(|(a, b)| a != b)?;
                return Some(Wrong::Byte {
                    offset: at + (off + i) as u64,
                    read: have[i],
                    expected: want[i],
                });
            }
            off += n;
        }
        None
    }
}

/// What is wrong with what a sink received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrong {
    /// A byte is not the one sent there.
    Byte {
        /// Its offset in the stream (for a paced run, over every lap of the source).
        offset: u64,
        /// The byte received.
        read: u8,
        /// The byte sent.
        expected: u8,
    },
    /// Not as many bytes as were sent.
    Length {
        /// Bytes received.
        received: u64,
        /// Bytes sent.
        expected: u64,
    },
}

/// Data that did not arrive as it was sent: the pair, the variant and the run, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentError {
    /// The pair (`file_to_socket`, ...).
    pub pair: &'static str,
    /// The variant (`splice` or `read_write`).
    pub variant: &'static str,
    /// `throughput` or `paced`.
    pub run: &'static str,
    /// What was wrong.
    pub wrong: Wrong,
}

impl std::fmt::Display for ContentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ContentError {
            pair,
            variant,
            run,
            wrong,
        } = self;
        match *wrong {
            Wrong::Byte {
                offset,
                read,
                expected,
            } => write!(
                f,
                "{pair} by {variant}, {run} run: byte {offset} of the data differs at the sink: read {read:#04x}, expected {expected:#04x}"
            ),
            Wrong::Length { received, expected } => write!(
                f,
                "{pair} by {variant}, {run} run: the sink received {received} bytes of {expected}"
            ),
        }
    }
}

impl std::error::Error for ContentError {}

/// Check what a sink received, `got` from offset `at` of `stream`: the first byte that differs
/// is an error naming the pair, the variant and the run.
pub fn check(
    pair: &'static str,
    variant: &'static str,
    run: &'static str,
    stream: &Stream,
    got: &[u8],
    at: u64,
) -> Result<(), ContentError> {
    match stream.first_difference(got, at) {
        None => Ok(()),
        Some(wrong) => Err(ContentError {
            pair,
            variant,
            run,
            wrong,
        }),
    }
}

/// A contender made to deliver wrong data on purpose, to see the check notice (the tests,
/// through the hidden `--fault PAIR:VARIANT[:paced]`): one byte of what its sink receives
/// spoiled midway through its throughput runs (with `paced`, its paced runs). A file sink's
/// last byte so far is changed; a socket sink gets a stray byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The pair.
    pub pair: &'static str,
    /// The variant.
    pub variant: &'static str,
    /// In the paced runs instead of the throughput runs.
    pub paced: bool,
}

impl Fault {
    pub(super) fn hits(&self, pair: &str, variant: &str, paced: bool) -> bool {
        self.pair == pair && self.variant == variant && self.paced == paced
    }
}

impl std::str::FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Fault, String> {
        let bad = || {
            format!(
                "`{s}`: expected PAIR:VARIANT or PAIR:VARIANT:paced (pairs {}; variants {})",
                PAIRS.join(", "),
                VARIANTS.join(", ")
            )
        };
        let mut parts = s.split(':');
        let pair = parts
            .next()
            .and_then(|p| PAIRS.into_iter().find(|x| *x == p));
        let variant = parts
            .next()
            .and_then(|v| VARIANTS.into_iter().find(|x| *x == v));
        let paced = match parts.next() {
            None => false,
            Some("paced") => true,
            Some(_) => return Err(bad()),
        };
        match (pair, variant, parts.next()) {
            (Some(pair), Some(variant), None) => Ok(Fault {
                pair,
                variant,
                paced,
            }),
            _ => Err(bad()),
        }
    }
}
