//! `zcio bench containers`: paper 003's frame experiment (Figure 4). A sender process makes
//! 640×480 one-byte-per-pixel frames (the paper's; and 1920×1080 four-byte ones, today's
//! displays') and sends them over socket IPC through a pipeline of
//! relay processes to a display process owning the frame buffer, the way a compositor receives
//! its clients' buffers. By containers (`zcio_sequoia::container`: the pages move, each relay
//! maps them or not), sealed (a fresh memory file per frame: made on the frame's path, or
//! ahead by a thread of the sender's pool and then drawn in place or written from the
//! sender's buffer, or made ahead in 2 MiB pages and drawn in place) or volatile (a few
//! memory files going round: the display gives each back to the sender when the next frame
//! is shown, as a compositor releases a client's buffer, and every process keeps its mapping
//! of each), or by read/write (each hop copies the frame into and out of the kernel, and the
//! display copies it into its frame buffer). Frames per second at the display, and how many
//! 30 fps animations that sustains. Every frame's number is checked at every relay that maps
//! it and at the display (which reads a sealed frame's number without mapping it), and the
//! last frame's bytes whole. Asked to (`--shmem-policy`), the sealed variants in 4 KiB
//! pages run again under another shared memory policy, which zcio sets for each of their runs
//! and puts back after it (`zcio_vm::shmem`), alternating with the rest.

use crate::report::fit;
use crate::transfer::{Res, zcio_command};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};
use zcio_sequoia::container::{Cid, ContainerError, Domain};
use zcio_sequoia::pool::{Granules, Pool};
use zcio_vm::shmem::{PolicyOverride, ShmemPolicy, large_folio_allocs};

pub use super::frame::Frame;
use super::frame::{check, check_words, draw, draw_words, paper_frame};

/// Volatile containers going round between the sender and the display.
pub const IN_FLIGHT: usize = 8;

/// Arguments of `zcio bench containers`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FramesArgs {
    /// Frames per run (default 3000: 100 s of a 30 fps animation).
    #[arg(long)]
    pub frames: Option<u64>,
    /// Rounds: every variant once per round, alternating (default 5).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Pipelines to run, as numbers of relay processes between the sender and the display
    /// (default 1,3).
    #[arg(long, value_delimiter = ',')]
    pub relays: Option<Vec<usize>>,
    /// Frame sizes, as WIDTHxHEIGHTxBYTES_A_PIXEL (default 640x480x1,1920x1080x4). A run
    /// of a larger frame sends fewer frames, as many bytes as `--frames` of the paper's.
    #[arg(long = "frame", value_delimiter = ',')]
    pub frame_sizes: Option<Vec<Frame>>,
    /// Also measure the sealed variants in 4 KiB pages with the kernel's shared memory
    /// huge page policy (`shmem_enabled`) set to POLICY for their runs, e.g. `within_size`,
    /// under which their files get large folios. It holds for the whole machine: zcio sets it
    /// only when asked (it needs root) and puts the policy it found back after each run.
    #[arg(long, value_name = "POLICY")]
    pub shmem_policy: Option<ShmemPolicy>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl FramesArgs {
    fn pipelines(&self) -> Vec<usize> {
        let mut v = self.relays.clone().unwrap_or_else(|| vec![1, 3]);
        v.retain(|&r| (1..=8).contains(&r));
        v.sort_unstable();
        v.dedup();
        if v.is_empty() {
            v.push(1);
        }
        v
    }

    /// The frame sizes, each once, in the order given (the paper's first by default).
    pub fn frames(&self) -> Vec<Frame> {
        let mut v: Vec<Frame> = Vec::new();
        for f in self
            .frame_sizes
            .clone()
            .unwrap_or_else(|| vec![Frame::PAPER, Frame::HD])
        {
            if !v.contains(&f) {
                v.push(f);
            }
        }
        if v.is_empty() {
            v.push(Frame::PAPER);
        }
        v
    }

    /// Runs `measure` makes (for progress bars).
    pub fn runs(&self) -> usize {
        let policy = self.shmem_policy.map_or(0, |_| POLICY_VARIANTS.len());
        self.rounds.unwrap_or(5).max(1)
            * (VARIANTS.len() + policy)
            * self.pipelines().len()
            * self.frames().len()
    }
}

/// One variant on one pipeline.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    /// The frame's size.
    #[serde(default = "paper_frame")]
    pub frame: Frame,
    /// `read_write`; `containers` (sealed, every relay maps each frame and checks its number);
    /// `containers_unmapped` (sealed, the relays forward without mapping);
    /// `containers_pooled` (sealed, in files a thread of the sender made ahead, the frame
    /// drawn in place; the relays map) and `containers_pooled_copy` (the same, the frame
    /// drawn in the sender's buffer and written into the file), `containers_pooled_copy_unmapped`
    /// (that, the relays forwarding without mapping); `containers_huge` and
    /// `containers_huge_unmapped` (sealed, from a pool of files in 2 MiB pages, the frame drawn
    /// in place; the relays mapping or not); `volatile` and
    /// `volatile_unmapped` (the volatile containers going round, the relays mapping or not).
    pub variant: String,
    /// Relay processes between the sender and the display.
    pub relays: usize,
    /// Frames per run.
    pub frames: u64,
    /// Frames per second at the display, median over rounds.
    pub fps: f64,
    /// Lowest and highest round.
    pub fps_spread: [f64; 2],
    /// 30 fps animations sustained (fps / 30).
    pub animations: f64,
    /// Over read/write's frames per second on the same pipeline.
    pub over_read_write: f64,
    /// CPU time of every process of the pipeline (the sender, the relays and the display:
    /// user and system) per frame, in µs: median over rounds.
    pub cpu_us_per_frame: f64,
    /// Lowest and highest round.
    pub cpu_spread: [f64; 2],
    /// The same by process, µs a frame: medians over rounds, each on its own.
    #[serde(default)]
    pub cpu_parts_us: CpuParts,
    /// The variants in 2 MiB pages: the share of their files the kernel gave 2 MiB pages
    /// (over every round; else none).
    #[serde(default)]
    pub huge_share: Option<f64>,
    /// Why the kernel gave some of those files 4 KiB pages, if it did (its last refusal).
    #[serde(default)]
    pub huge_refused: Option<String>,
    /// The kernel's shared memory huge page policy during the runs (`shmem_enabled`), where
    /// it could be read.
    #[serde(default)]
    pub shmem_policy: Option<String>,
    /// Whether zcio set that policy for these runs (the machine's own is the section's).
    #[serde(default)]
    pub shmem_override: bool,
    /// Large folios the kernel gave shared memory during the runs, a frame: its counters of
    /// the whole machine (`hugepages-<size>kB/stats/shmem_alloc`, 2 MiB included), median over
    /// rounds; none where it keeps none.
    #[serde(default)]
    pub large_folios_per_frame: Option<f64>,
}

impl Row {
    /// The variant's name, and the policy zcio set for its runs if it set one.
    pub fn label(&self) -> String {
        let name = self.variant.replace('_', " ");
        match (&self.shmem_policy, self.shmem_override) {
            (Some(p), true) => format!("{name} (shmem {p})"),
            _ => name,
        }
    }
}

/// A frame's CPU time by process (user and system), in µs.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema)]
pub struct CpuParts {
    /// The sender's thread: drawing, and allocating, filling and sending the containers.
    pub sender: f64,
    /// The sender's pool thread, making files ahead (the pooled variants; else 0).
    pub pool: f64,
    /// The relays, together.
    pub relays: f64,
    /// The display.
    pub display: f64,
}

impl CpuParts {
    fn total(&self) -> f64 {
        self.sender + self.pool + self.relays + self.display
    }
}

/// Everything `zcio bench containers` measured.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FramesSection {
    /// Rounds.
    pub rounds: usize,
    /// Volatile containers going round between the sender and the display.
    pub in_flight: usize,
    /// Per pipeline, then variant.
    pub rows: Vec<Row>,
    /// The machine's shared memory huge page policy, as found (`shmem_enabled`).
    #[serde(default)]
    pub shmem_policy: Option<String>,
    /// Why the policy asked for could not be set for the sealed variants' runs, if it could
    /// not.
    #[serde(default)]
    pub shmem_policy_refused: Option<String>,
}

/// The variants, in the order of the rows.
pub const VARIANTS: [&str; 10] = [
    "read_write",
    "containers",
    "containers_unmapped",
    "containers_pooled",
    "containers_pooled_copy",
    "containers_pooled_copy_unmapped",
    "containers_huge",
    "containers_huge_unmapped",
    "volatile",
    "volatile_unmapped",
];

/// The variants also measured under another shared memory policy, when one is asked for: the
/// sealed ones in 4 KiB pages, whose files the policy changes.
pub const POLICY_VARIANTS: [&str; 5] = [
    "containers",
    "containers_unmapped",
    "containers_pooled",
    "containers_pooled_copy",
    "containers_pooled_copy_unmapped",
];

/// A variant, under the machine's own shared memory policy or one zcio sets for its runs.
#[derive(Clone, Copy)]
struct Contender {
    variant: &'static str,
    policy: Option<ShmemPolicy>,
}

/// Fresh files a sender's pool keeps ready (the pooled variants).
pub const POOL_DEPTH: usize = 8;

fn is_volatile(variant: &str) -> bool {
    variant.starts_with("volatile")
}

/// The sealed variants whose files come from a pool in 2 MiB pages.
fn is_huge(variant: &str) -> bool {
    variant.starts_with("containers_huge")
}

/// What one run measured: frames per second at the display, CPU by process, and the pages
/// of the pool's files.
struct Run {
    fps: f64,
    cpu: CpuParts,
    granules: Granules,
    /// Large folios the kernel gave shared memory during the run, a frame.
    large_folios: Option<f64>,
}

fn cpu_ns(clock: rustix::time::ClockId) -> u64 {
    let t = rustix::time::clock_gettime(clock);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Connect to a stage's socket, waiting for it to listen (at most 20 s).
fn connect(path: &Path) -> Res<UnixStream> {
    let t0 = Instant::now();
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(e) if t0.elapsed() > Duration::from_secs(20) => {
                return Err(format!("connect to {}: {e}", path.display()).into());
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// `zcio frame-stage`: a stage of frames of `frame` bytes listening on `listen` for one
/// connection. With `to`, a relay forwarding every frame there; without, the display: it
/// takes frames until the stream ends, gives volatile containers back to the sender at
/// `release`, and prints `{"frames":N,"seconds":S}`.
pub fn stage(
    variant: &str,
    frame: usize,
    listen: &Path,
    to: Option<&Path>,
    release: Option<&Path>,
) -> Res<()> {
    if !VARIANTS.contains(&variant) {
        return Err(format!("frame-stage: unknown variant {variant}").into());
    }
    if !(16..=64 << 20).contains(&frame) || frame % 8 != 0 {
        return Err(format!("frame-stage: a frame of {frame} bytes").into());
    }
    let containers = variant != "read_write";
    let volatile = is_volatile(variant);
    let listener = UnixListener::bind(listen)?;
    let output = to.map(connect).transpose()?;
    let (input, _) = listener.accept()?;
    let cpu0 = cpu_ns(rustix::time::ClockId::ProcessCPUTime);
    let mut d = if volatile {
        Domain::accepting_volatile().keeping_shown()
    } else {
        Domain::new()
    };
    let mut n = 0u64;
    let Some(output) = output else {
        return display(variant, frame, &input, release, d, cpu0);
    };
    let map = !variant.ends_with("_unmapped") && variant != "read_write";
    let mut buf = vec![0u8; frame];
    loop {
        if containers {
            match d.read(input.as_fd(), 0, map) {
                Ok(id) => {
                    if map && volatile {
                        check_words(n, d.map_words(id)?, None)?;
                    } else if map {
                        check(n, d.map_read(id)?, false)?;
                    }
                    d.write(output.as_fd(), id)?;
                }
                Err(ContainerError::End) => {
                    d.finish(output.as_fd())?;
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            match (&input).read_exact(&mut buf) {
                Ok(()) => (&output).write_all(&buf)?,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e.into()),
            }
        }
        n += 1;
    }
    let cpu = cpu_ns(rustix::time::ClockId::ProcessCPUTime) - cpu0;
    println!("{{\"cpu_ns\":{cpu}}}");
    Ok(())
}

fn display(
    variant: &str,
    frame: usize,
    input: &UnixStream,
    release: Option<&Path>,
    mut d: Domain,
    cpu0: u64,
) -> Res<()> {
    let containers = variant != "read_write";
    let volatile = is_volatile(variant);
    let release = match (volatile, release) {
        (true, Some(p)) => Some(connect(p)?),
        (true, None) => return Err("frame-stage: a volatile display needs --release".into()),
        (false, _) => None,
    };
    let mut surface = vec![0u8; frame];
    let mut shown: Option<Cid> = None;
    let mut n = 0u64;
    let mut first: Option<Instant> = None;
    loop {
        if containers {
            match d.read(input.as_fd(), 0, volatile) {
                Ok(id) => {
                    if volatile {
                        check_words(n, d.map_words(id)?, None)?;
                    } else {
                        // Only the number is checked: read, not mapped.
                        let mut number = [0u8; 8];
                        d.peek(id, 0, &mut number)?;
                        check(n, &number, false)?;
                    }
                    // The new frame is shown; the one before goes back (to the sender, if
                    // volatile, to be filled again).
                    if let Some(old) = shown.replace(id) {
                        match &release {
                            Some(r) => d.write(r.as_fd(), old)?,
                            None => d.free(old)?,
                        }
                    }
                }
                Err(ContainerError::End) => break,
                Err(e) => return Err(e.into()),
            }
        } else {
            match (&*input).read_exact(&mut surface) {
                Ok(()) => check(n, &surface, false)?,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e.into()),
            }
        }
        first.get_or_insert_with(Instant::now);
        n += 1;
    }
    // The last frame shown, whole.
    if n > 0 {
        match shown {
            Some(id) if volatile => check_words(n - 1, d.map_words(id)?, Some(frame))?,
            Some(id) => check(n - 1, d.map_read(id)?, true)?,
            None => check(n - 1, &surface, true)?,
        }
    }
    let seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let cpu = cpu_ns(rustix::time::ClockId::ProcessCPUTime) - cpu0;
    println!("{{\"frames\":{n},\"seconds\":{seconds},\"cpu_ns\":{cpu}}}");
    Ok(())
}

/// One run of `variant` through `relays` relays, `frames` frames of `frame` bytes.
fn run_once(variant: &str, frame: usize, frames: u64, relays: usize) -> Res<Run> {
    let dir = tempfile::tempdir()?;
    let sock = |k: usize| dir.path().join(format!("stage{k}"));
    let release_path = dir.path().join("release");
    let release_listener = UnixListener::bind(&release_path)?;
    let mut relay_procs = Vec::new();
    for k in 0..relays {
        relay_procs.push(
            zcio_command()?
                .args(["frame-stage", "--variant", variant, "--frame-bytes"])
                .arg(frame.to_string())
                .arg("--listen")
                .arg(sock(k))
                .arg("--to")
                .arg(sock(k + 1))
                .stdout(std::process::Stdio::piped())
                .spawn()?,
        );
    }
    let display = zcio_command()?
        .args(["frame-stage", "--variant", variant, "--frame-bytes"])
        .arg(frame.to_string())
        .arg("--listen")
        .arg(sock(relays))
        .arg("--release")
        .arg(&release_path)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let thread = rustix::time::ClockId::ThreadCPUTime;
    let cpu0 = cpu_ns(thread);
    let sent = send(variant, frame, frames, &sock(0), &release_listener);
    let sender = cpu_ns(thread) - cpu0;
    let (pool, granules) = sent
        .as_ref()
        .map_or((0, Granules::default()), |s| (s.1, s.2.clone()));
    let mut relays_cpu = 0;
    let mut ended = Vec::new();
    for r in relay_procs {
        ended.push(r.wait_with_output()?);
    }
    let out = display.wait_with_output()?;
    // The release connection stays open until the display is done giving frames back.
    drop(sent?);
    for r in &ended {
        if !r.status.success() {
            return Err(format!("{variant}: a relay ended {}", r.status).into());
        }
        let v: serde_json::Value = serde_json::from_slice(&r.stdout)?;
        relays_cpu += v["cpu_ns"]
            .as_u64()
            .ok_or("a relay did not say its CPU time")?;
    }
    if !out.status.success() {
        return Err(format!("{variant}: the display ended {}", out.status).into());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let got = v["frames"].as_u64().unwrap_or(0);
    if got != frames {
        return Err(format!("{variant}: the display showed {got} frames of {frames}").into());
    }
    let display_cpu = v["cpu_ns"]
        .as_u64()
        .ok_or("the display did not say its CPU time")?;
    let per_frame = |ns: u64| ns as f64 / 1e3 / frames as f64;
    Ok(Run {
        fps: frames as f64 / v["seconds"].as_f64().unwrap_or(f64::NAN),
        cpu: CpuParts {
            sender: per_frame(sender),
            pool: per_frame(pool),
            relays: per_frame(relays_cpu),
            display: per_frame(display_cpu),
        },
        granules,
        large_folios: None,
    })
}

/// The sender: `frames` frames of `size` bytes to the first stage at `first`. Volatile
/// containers come back on the display's release connection, returned to be kept open until
/// the display is done, with the CPU time (ns) of the sender's pool thread and the pages of
/// its files, if it had one.
fn send(
    variant: &str,
    size: usize,
    frames: u64,
    first: &Path,
    release: &UnixListener,
) -> Res<(Option<UnixStream>, u64, Granules)> {
    let sock = connect(first)?;
    let mut d = Domain::new().keeping_shown();
    let pool = if variant.starts_with("containers_pooled") {
        Some(Pool::new(size, POOL_DEPTH)?)
    } else if is_huge(variant) {
        Some(Pool::huge(size, POOL_DEPTH)?)
    } else {
        None
    };
    // Volatile containers come back on the display's release connection.
    let back = if is_volatile(variant) {
        Some(release.accept()?.0)
    } else {
        None
    };
    let mut made = 0;
    let mut frame = vec![0u8; size];
    for n in 0..frames {
        match (variant, &back, &pool) {
            ("read_write", _, _) => {
                draw(n, &mut frame);
                (&sock).write_all(&frame)?;
            }
            (v, _, Some(pool)) if v == "containers_pooled" || is_huge(v) => {
                let id = d.alloc_pooled(pool, size)?;
                draw(n, d.map(id)?);
                d.write(sock.as_fd(), id)?;
            }
            (_, _, Some(pool)) => {
                draw(n, &mut frame);
                let id = d.alloc_filled(pool, &frame)?;
                d.write(sock.as_fd(), id)?;
            }
            (_, Some(back), _) => {
                let id = if made < IN_FLIGHT {
                    made += 1;
                    d.alloc_volatile(size)?
                } else {
                    d.read(back.as_fd(), 0, true)?
                };
                draw_words(n, d.map_words(id)?, size);
                d.write(sock.as_fd(), id)?;
            }
            _ => {
                let id = d.alloc(size)?;
                draw(n, d.map(id)?);
                d.write(sock.as_fd(), id)?;
            }
        }
    }
    if variant != "read_write" {
        d.finish(sock.as_fd())?;
    }
    Ok((
        back,
        pool.as_ref().map_or(0, |p| p.maker_cpu_ns()),
        pool.map(|p| p.granules()).unwrap_or_default(),
    ))
}

/// Run every variant on every pipeline; `progress` is told each run.
pub fn measure(a: &FramesArgs, progress: &mut dyn FnMut(String)) -> Res<FramesSection> {
    let paper_frames = a.frames.unwrap_or(3000).max(2);
    let rounds = a.rounds.unwrap_or(5).max(1);
    if a.shmem_policy.is_some() {
        // What a run killed while it held the policy left behind goes back first.
        zcio_vm::shmem::restore_left();
    }
    let found = ShmemPolicy::current().ok();
    let mut contenders: Vec<Contender> = VARIANTS
        .iter()
        .map(|&variant| Contender {
            variant,
            policy: None,
        })
        .collect();
    // The policy asked for is tried once first: where it cannot be set, the sealed variants
    // run under the machine's own only, and the section says why.
    let refused = match a.shmem_policy {
        Some(p) if Some(p) != found => match PolicyOverride::set(p) {
            Ok(over) => {
                drop(over);
                contenders.extend(POLICY_VARIANTS.iter().map(|&variant| Contender {
                    variant,
                    policy: Some(p),
                }));
                None
            }
            Err(e) => Some(e.to_string()),
        },
        _ => None,
    };
    let mut rows = Vec::new();
    for frame in a.frames() {
        let frames = if frame == Frame::PAPER {
            paper_frames
        } else {
            frame.frames_for(paper_frames)
        };
        for relays in a.pipelines() {
            let runs = Runs {
                frame,
                frames,
                relays,
                rounds,
                found,
            };
            rows.extend(pipeline(&runs, &contenders, progress)?);
        }
    }
    Ok(FramesSection {
        rounds,
        in_flight: IN_FLIGHT,
        rows,
        shmem_policy: found.map(|p| p.name().to_string()),
        shmem_policy_refused: refused,
    })
}

/// The runs of one pipeline: `rounds` of `frames` frames of `frame` through `relays` relays,
/// under the machine's shared memory policy `found` unless a contender sets another.
struct Runs {
    frame: Frame,
    frames: u64,
    relays: usize,
    rounds: usize,
    found: Option<ShmemPolicy>,
}

/// One run of contender `c`: under the policy it sets, if it sets one, and with the kernel's
/// large folios counted.
fn run_under(c: Contender, at: &Runs) -> Res<Run> {
    let over = c.policy.map(PolicyOverride::set).transpose()?;
    let before = large_folio_allocs();
    let mut run = run_once(c.variant, at.frame.bytes(), at.frames, at.relays)?;
    run.large_folios = before
        .zip(large_folio_allocs())
        .map(|(b, a)| a.saturating_sub(b) as f64 / at.frames as f64);
    drop(over);
    Ok(run)
}

/// Every contender through `at.relays` relays, `at.rounds` times alternating: a row each.
fn pipeline(
    at: &Runs,
    contenders: &[Contender],
    progress: &mut dyn FnMut(String),
) -> Res<Vec<Row>> {
    let n = contenders.len();
    let (frame, relays) = (at.frame, at.relays);
    let mut fps: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut parts: Vec<Vec<CpuParts>> = vec![Vec::new(); n];
    let mut pages: Vec<Granules> = vec![Granules::default(); n];
    let mut folios: Vec<Vec<f64>> = vec![Vec::new(); n];
    for r in 0..at.rounds {
        for k in 0..n {
            let v = (k + r) % n;
            let run = run_under(contenders[v], at)?;
            folios[v].extend(run.large_folios);
            fps[v].push(run.fps);
            cpu[v].push(run.cpu.total());
            parts[v].push(run.cpu);
            pages[v].huge += run.granules.huge;
            pages[v].base += run.granules.base;
            if run.granules.refused.is_some() {
                pages[v].refused = run.granules.refused;
            }
            progress(format!(
                "frames {} ({}, {relays} relays)",
                contenders[v].variant,
                frame.name()
            ));
        }
    }
    let med: Vec<f64> = fps
        .iter()
        .map(|v| fit::median(v).unwrap_or(f64::NAN))
        .collect();
    Ok(contenders
        .iter()
        .enumerate()
        .map(|(v, c)| Row {
            frame,
            variant: c.variant.to_string(),
            relays,
            frames: at.frames,
            fps: med[v],
            fps_spread: fit::spread(&fps[v]),
            animations: med[v] / 30.0,
            over_read_write: med[v] / med[0],
            cpu_us_per_frame: fit::median(&cpu[v]).unwrap_or(f64::NAN),
            cpu_spread: fit::spread(&cpu[v]),
            cpu_parts_us: median_parts(&parts[v]),
            huge_share: is_huge(c.variant)
                .then(|| pages[v].huge as f64 / (pages[v].huge + pages[v].base).max(1) as f64),
            huge_refused: pages[v].refused.clone(),
            shmem_policy: c.policy.or(at.found).map(|p| p.name().to_string()),
            shmem_override: c.policy.is_some(),
            large_folios_per_frame: fit::median(&folios[v]),
        })
        .collect())
}

/// Each process's median over rounds.
fn median_parts(p: &[CpuParts]) -> CpuParts {
    let m = |f: fn(&CpuParts) -> f64| {
        fit::median(&p.iter().map(f).collect::<Vec<_>>()).unwrap_or(f64::NAN)
    };
    CpuParts {
        sender: m(|x| x.sender),
        pool: m(|x| x.pool),
        relays: m(|x| x.relays),
        display: m(|x| x.display),
    }
}

/// Run the benchmark and print it.
pub fn run(a: FramesArgs) -> Res<()> {
    let Some(s) = crate::run_bench("containers", a.runs() as u64, a.json, |p| measure(&a, p))?
    else {
        return Ok(());
    };
    println!(
        "640×480 frames, sender → relays → display (median of {} rounds; {} volatile containers going round)",
        s.rounds, s.in_flight
    );
    for r in &s.rows {
        println!(
            "{} {} relays  {:<50} {:>9.0} fps ({:.0}–{:.0}) {:>6.1} animations at 30 fps {:>6.2}× read/write {:>7.1} µs CPU a frame (sender {:.1}, pool {:.1}, relays {:.1}, display {:.1})",
            r.frame.name(),
            r.relays,
            r.label(),
            r.fps,
            r.fps_spread[0],
            r.fps_spread[1],
            r.animations,
            r.over_read_write,
            r.cpu_us_per_frame,
            r.cpu_parts_us.sender,
            r.cpu_parts_us.pool,
            r.cpu_parts_us.relays,
            r.cpu_parts_us.display
        );
    }
    Ok(())
}
