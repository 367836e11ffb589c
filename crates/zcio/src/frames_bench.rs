//! `zcio bench containers`: paper 003's frame experiment (Figure 4). A sender process makes
//! 640×480 one-byte-per-pixel frames and sends them over socket IPC to a relay process, which
//! outputs them to a display process owning the frame buffer, the way a compositor receives
//! its clients' buffers. By containers (`zcio_sequoia::container`: the pages move, the relay
//! maps them or not) or by read/write (each hop copies the frame into and out of the kernel,
//! and the display copies it into its frame buffer). Frames per second at the display, and
//! how many 30 fps animations that sustains. Every frame's number is checked at the display,
//! and the last frame's bytes whole.

use crate::report::fit;
use crate::transfer::{Res, zcio_command};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};
use zcio_sequoia::container::{ContainerError, Domain};

/// Bytes of a frame: 640 × 480, one byte per pixel.
pub const FRAME: usize = 640 * 480;

/// Arguments of `zcio bench containers`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FramesArgs {
    /// Frames per run (default 600: 20 s of a 30 fps animation).
    #[arg(long)]
    pub frames: Option<u64>,
    /// Rounds: every variant once per round, alternating (default 3).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One variant.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    /// `read_write`, `containers` (the relay maps each frame and reads its header) or
    /// `containers_unmapped` (the relay forwards without mapping).
    pub variant: String,
    /// Frames per run.
    pub frames: u64,
    /// Frames per second at the display, median over rounds.
    pub fps: f64,
    /// Lowest and highest round.
    pub fps_spread: [f64; 2],
    /// 30 fps animations sustained (fps / 30).
    pub animations: f64,
    /// Over read/write's frames per second.
    pub over_read_write: f64,
}

/// Everything `zcio bench containers` measured.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FramesSection {
    /// Rounds.
    pub rounds: usize,
    /// Per variant.
    pub rows: Vec<Row>,
}

const VARIANTS: [&str; 3] = ["read_write", "containers", "containers_unmapped"];

/// The frame `n`: its number in the first 8 bytes, then a pattern of it.
fn draw(n: u64, frame: &mut [u8]) {
    frame[..8].copy_from_slice(&n.to_le_bytes());
    let salt = n as u8;
    for (i, b) in frame[8..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_add(salt);
    }
}

fn check(n: u64, frame: &[u8], whole: bool) -> Res<()> {
    let got = u64::from_le_bytes(frame[..8].try_into().expect("8 bytes"));
    if got != n {
        return Err(format!("frame {n} arrived as frame {got}").into());
    }
    if whole {
        let salt = n as u8;
        if let Some(i) = frame[8..]
            .iter()
            .enumerate()
            .position(|(i, b)| *b != (i as u8).wrapping_add(salt))
        {
            return Err(format!("frame {n}: byte {} differs", i + 8).into());
        }
    }
    Ok(())
}

/// `zcio frame-stage`: the relay (`--to` given: from `--connect` to `--to`) or the display
/// (`--listen`: accept one connection, take frames until it ends, print
/// `{"frames":N,"seconds":S}`).
pub fn stage(
    variant: &str,
    connect: Option<&Path>,
    to: Option<&Path>,
    listen: Option<&Path>,
) -> Res<()> {
    let containers = variant != "read_write";
    if let Some(l) = listen {
        let listener = UnixListener::bind(l)?;
        let (sock, _) = listener.accept()?;
        let mut d = Domain::new();
        let mut surface = vec![0u8; FRAME];
        let mut shown: Option<zcio_sequoia::container::Cid> = None;
        let mut n = 0u64;
        let mut first: Option<Instant> = None;
        loop {
            if containers {
                match d.read(sock.as_fd(), 0, true) {
                    Ok(id) => {
                        check(n, d.map_read(id)?, false)?;
                        // The new frame is shown; the one before goes back.
                        if let Some(old) = shown.replace(id) {
                            d.free(old)?;
                        }
                    }
                    Err(ContainerError::End) => break,
                    Err(e) => return Err(e.into()),
                }
            } else {
                match (&sock).read_exact(&mut surface) {
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
                Some(id) => check(n - 1, d.map_read(id)?, true)?,
                None => check(n - 1, &surface, true)?,
            }
        }
        let seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
        println!("{{\"frames\":{n},\"seconds\":{seconds}}}");
        return Ok(());
    }
    let (Some(from), Some(to)) = (connect, to) else {
        return Err("frame-stage: --listen, or --connect and --to".into());
    };
    let input = UnixStream::connect(from)?;
    let output = loop {
        match UnixStream::connect(to) {
            Ok(s) => break s,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let map = variant == "containers";
    let mut d = Domain::new();
    let mut buf = vec![0u8; FRAME];
    let mut n = 0u64;
    loop {
        if containers {
            match d.read(input.as_fd(), 0, map) {
                Ok(id) => {
                    if map {
                        check(n, d.map_read(id)?, false)?;
                    }
                    d.write(output.as_fd(), id)?;
                }
                Err(ContainerError::End) => break,
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
    Ok(())
}

/// One run of `variant`: frames per second at the display.
fn run_once(variant: &str, frames: u64) -> Res<f64> {
    let dir = tempfile::tempdir()?;
    let src = dir.path().join("frames");
    let disp = dir.path().join("display");
    let listener = UnixListener::bind(&src)?;
    let display = zcio_command()?
        .args(["frame-stage", "--variant", variant, "--listen"])
        .arg(&disp)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut relay = zcio_command()?
        .args(["frame-stage", "--variant", variant, "--connect"])
        .arg(&src)
        .arg("--to")
        .arg(&disp)
        .spawn()?;
    let (sock, _) = listener.accept()?;
    let mut d = Domain::new();
    let mut frame = vec![0u8; FRAME];
    for n in 0..frames {
        if variant == "read_write" {
            draw(n, &mut frame);
            (&sock).write_all(&frame)?;
        } else {
            let id = d.alloc(FRAME)?;
            draw(n, d.map(id)?);
            d.write(sock.as_fd(), id)?;
        }
    }
    drop(sock);
    let r = relay.wait()?;
    let out = display.wait_with_output()?;
    if !r.success() || !out.status.success() {
        return Err(format!("{variant}: the relay ended {r}, the display {}", out.status).into());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let got = v["frames"].as_u64().unwrap_or(0);
    if got != frames {
        return Err(format!("{variant}: the display showed {got} frames of {frames}").into());
    }
    Ok(frames as f64 / v["seconds"].as_f64().unwrap_or(f64::NAN))
}

/// Run every variant; `progress` is told each run.
pub fn measure(a: &FramesArgs, progress: &mut dyn FnMut(String)) -> Res<FramesSection> {
    let frames = a.frames.unwrap_or(600).max(2);
    let rounds = a.rounds.unwrap_or(3).max(1);
    let mut fps: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    for r in 0..rounds {
        for k in 0..VARIANTS.len() {
            let v = (k + r) % VARIANTS.len();
            fps[v].push(run_once(VARIANTS[v], frames)?);
            progress(format!("frames {}", VARIANTS[v]));
        }
    }
    let med: Vec<f64> = fps
        .iter()
        .map(|v| fit::median(v).unwrap_or(f64::NAN))
        .collect();
    let rows = VARIANTS
        .iter()
        .enumerate()
        .map(|(v, name)| Row {
            variant: name.to_string(),
            frames,
            fps: med[v],
            fps_spread: [
                fps[v].iter().copied().fold(f64::INFINITY, f64::min),
                fps[v].iter().copied().fold(0.0, f64::max),
            ],
            animations: med[v] / 30.0,
            over_read_write: med[v] / med[0],
        })
        .collect();
    Ok(FramesSection { rounds, rows })
}

/// Run the benchmark and print it.
pub fn run(a: FramesArgs) -> Res<()> {
    let bar = crate::bench_bar((a.rounds.unwrap_or(3).max(1) * VARIANTS.len()) as u64);
    let s = measure(&a, &mut |m| {
        bar.set_message(m);
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    if a.json {
        return crate::print_bench_json("containers", &s);
    }
    println!(
        "640×480 frames, sender → relay → display (median of {} rounds)",
        s.rounds
    );
    for r in &s.rows {
        println!(
            "{:<20} {:>9.0} fps ({:.0}–{:.0}) {:>6.1} animations at 30 fps {:>6.2}× read/write",
            r.variant, r.fps, r.fps_spread[0], r.fps_spread[1], r.animations, r.over_read_write
        );
    }
    Ok(())
}
