//! Kill tests of the user-level I/O layer (paper 004).
//!
//! The layer has no peer process: a request goes from the issuing thread to the kernel and its
//! completion comes back to that thread's handler. So the parties killed are the two that can
//! die with requests in flight:
//!
//! - **The process issuing I/O**, killed with SIGKILL at a random point (while it sets its ring
//!   up, or while reads and writes stream through it) under every initiation and translation.
//!   Checked from outside: the process ends within [`DETECT`] (a request in flight must not
//!   keep it), the file it read is unchanged and every block of the file it wrote holds either
//!   what was there or one whole block it wrote (no torn or stray bytes), no `/dev/shm` object
//!   of zcio's is left, and a layer of the test process reading the same file meanwhile (the
//!   survivor) gets every byte right, no error, and all its buffers back.
//! - **An issuing thread** (one of several sharing a layer, each running its own handlers),
//!   which ends with requests in flight: its handler panics, or it returns without waiting.
//!   A thread cannot be killed alone, and these are the ways one ends early. The survivors are
//!   the layer's other threads: they must go on without an error or a hang, and the ended
//!   thread's completions must be dropped (its handlers cannot run anywhere else) so that
//!   every buffer comes back to the layer.
//!
//! Each round checks the test process's descriptors, memory files and mappings against what
//! they were before the rounds. `$ZCIO_KILL_SEED` (hexadecimal, as a run prints it) replays a
//! run.

use std::io::{BufRead, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use zcio_testkit::kill::{Baseline, PEER_ENV, Rng, Tolerance, is_party, watchdog};
use zcio_uio::{
    Completion, Config, Initiation, NotQueued, Opcode, Request, Translation, Uio, UioError,
};

/// Longest a killed process may take to end, and a survivor to be done after a kill.
const DETECT: Duration = Duration::from_secs(3);
/// Longest a round may take before it counts as hung.
const HANG: Duration = Duration::from_secs(15);
/// Bytes of the file read and of the file written.
const FILE: usize = 4 << 20;
/// Bytes of a block (the `O_DIRECT` alignment the layer asks for).
const BLOCK: usize = 4096;
/// What the process killed says once its first read has been checked.
const GO: &str = "zcio-kill: first read checked";
/// Exit status of a killed process that found damage or failed before it was killed.
const FAILED: i32 = 5;
/// Exit status of a process that cannot make a layer of this configuration here.
const NO_LAYER: i32 = 6;
/// Mappings a round may leave beyond the baseline: glibc keeps the stacks of exited threads
/// for reuse and gives a new thread its own malloc arena, so the threads of a round may leave a
/// stack or an arena mapped (each a mapping and its guard). A leak per round (a ring, a buffer
/// region) would pass this bound within a few rounds.
const VMA_SLACK: usize = 8;

/// The two tests count this process's descriptors and mappings: they take turns.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

const CONFIGS: [(Initiation, Translation); 4] = [
    (Initiation::Syscall, Translation::Registered),
    (Initiation::Syscall, Translation::PerRequest),
    (Initiation::Polled, Translation::Registered),
    (Initiation::Polled, Translation::PerRequest),
];

/// What both tests start from, unless this process is the one killed (`None`): their turn
/// ([`ALONE`]), the run's seed, and a directory on the target's file system (where `O_DIRECT`
/// works; tmpfs refuses it) that holds the file read, `data`.
fn start() -> Option<(
    std::sync::MutexGuard<'static, ()>,
    u64,
    tempfile::TempDir,
    std::path::PathBuf,
)> {
    if is_party() {
        return None;
    }
    let alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let seed = zcio_testkit::kill::seed();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a directory");
    let data = dir.path().join("data");
    let bytes: Vec<u8> = (0..FILE).map(data_byte).collect();
    std::fs::write(&data, &bytes).expect("write the data file");
    Some((alone, seed, dir, data))
}

/// Byte `i` of the file read.
fn data_byte(i: usize) -> u8 {
    ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Whether a read of the file read got the file's bytes at its offset.
fn holds_the_data(c: &Completion) -> bool {
    let off = c.record.offset as usize;
    c.data()
        .iter()
        .enumerate()
        .all(|(k, b)| *b == data_byte(off + k))
}

/// Block `b` of the file written, as generation `g` writes it (generation 0 is what the test
/// puts there first): its first 16 bytes say which block and generation, the rest follows.
fn block(b: u64, g: u64, out: &mut [u8]) {
    out[..8].copy_from_slice(&b.to_le_bytes());
    out[8..16].copy_from_slice(&g.to_le_bytes());
    for (i, x) in out[16..].iter_mut().enumerate() {
        *x = (b.wrapping_mul(31) ^ g.wrapping_mul(131) ^ i as u64) as u8;
    }
}

/// Whether block `b` of the file written is one whole block some generation wrote.
fn whole_block(b: u64, got: &[u8]) -> Result<(), String> {
    let at = u64::from_le_bytes(got[..8].try_into().expect("8 bytes"));
    let g = u64::from_le_bytes(got[8..16].try_into().expect("8 bytes"));
    let mut want = vec![0u8; BLOCK];
    block(b, g, &mut want);
    if at != b || got != want.as_slice() {
        let first = got.iter().zip(&want).position(|(x, y)| x != y).unwrap_or(0);
        return Err(format!(
            "block {b} is torn or stray (says block {at}, generation {g}; differs at byte {first})"
        ));
    }
    Ok(())
}

fn layer(initiation: Initiation, translation: Translation, buffers: usize) -> Result<Uio, String> {
    Uio::new(Config {
        initiation,
        translation,
        entries: 16,
        buffers,
        buf_size: 64 << 10,
        ..Config::default()
    })
    .map_err(|e| format!("({initiation:?}, {translation:?}): {e}"))
}

/// The process killed: stream reads of the data file (each checked) and writes of whole blocks
/// to the scratch file, saying [`GO`] once the first read has been checked. Ends only by the
/// kill, or with [`FAILED`] on damage or an error. What it plays is in [`PEER_ENV`]:
/// `CONFIG DATA SCRATCH`.
#[test]
fn peer() {
    let Ok(spec) = std::env::var(PEER_ENV) else {
        return; // an ordinary run: this is only the killed processes' entry
    };
    let f: Vec<&str> = spec.split(' ').collect();
    let (i, t) = CONFIGS[f[0].parse::<usize>().expect("configuration")];
    let fail = |what: String| -> ! {
        eprintln!("{what}");
        std::process::exit(FAILED);
    };
    let uio = match layer(i, t, 16) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(NO_LAYER);
        }
    };
    let data = uio
        .open(std::path::Path::new(f[1]), false)
        .unwrap_or_else(|e| fail(e.to_string()));
    let scratch = uio
        .open(std::path::Path::new(f[2]), true)
        .unwrap_or_else(|e| fail(e.to_string()));
    let said = Arc::new(AtomicBool::new(false));
    let s2 = said.clone();
    let h = uio.handler(move |c| {
        if let Some(e) = &c.error {
            fail(format!("request {}: {e}", c.record.argument));
        }
        if c.record.opcode == Opcode::Read as u8 {
            let off = c.record.offset as usize;
            let ok = c
                .data()
                .iter()
                .enumerate()
                .all(|(k, b)| *b == data_byte(off + k));
            if !ok || c.data().len() != c.record.length as usize {
                fail(format!("read at {off} damaged"));
            }
            if !s2.swap(true, Ordering::Relaxed) {
                println!("{GO}");
                std::io::stdout().flush().ok();
            }
        } else if c.record.status != c.record.length as i32 {
            fail(format!("write at {}: {}", c.record.offset, c.record.status));
        }
    });
    let blocks = (FILE / BLOCK) as u64;
    for n in 0u64.. {
        let Some(mut buf) = uio.buffer() else {
            uio.wait().unwrap_or_else(|e| fail(e.to_string()));
            continue;
        };
        // Requests of 1 to 16 blocks, reads and writes in turn.
        let k = 1 + (n.wrapping_mul(7) % 16);
        let at = n.wrapping_mul(97) % (blocks - k);
        let len = (k as usize) * BLOCK;
        let rec = if n % 2 == 0 {
            Request::new(
                Opcode::Read,
                data,
                at * BLOCK as u64,
                buf.addr(),
                len as u32,
                h,
                n,
            )
        } else {
            for j in 0..k {
                let o = j as usize * BLOCK;
                block(at + j, n, &mut buf.bytes_mut()[o..o + BLOCK]);
            }
            Request::new(
                Opcode::Write,
                scratch,
                at * BLOCK as u64,
                buf.addr(),
                len as u32,
                h,
                n,
            )
        };
        match uio.submit(rec, buf) {
            Ok(()) => {}
            Err(NotQueued::Full { .. }) => {
                uio.wait().unwrap_or_else(|e| fail(e.to_string()));
            }
            Err(e) => fail(e.to_string()),
        }
        uio.poll();
    }
}

/// What the test process's accounting must come back to: as many descriptors and memory
/// files, mappings within [`VMA_SLACK`], and zcio's `/dev/shm` objects. Threads are left out:
/// io_uring's worker threads of the survivor's layer linger a while after its ring is gone, as
/// the kernel decides.
const TOLERANCE: Tolerance = Tolerance {
    vma_slack: VMA_SLACK,
    vma_shrink: None,
    exact_descriptors: true,
    threads: false,
    all_shm_objects: false,
};

/// The survivor of a kill: a layer of this process reading `path` (the file the killed
/// process reads) until `stop`, checking every byte; how many reads it made.
fn read_alongside(path: &std::path::Path, stop: &AtomicBool) -> u64 {
    let uio = layer(Initiation::Syscall, Translation::Registered, 8).expect("the survivor's layer");
    let t = uio.open(path, false).expect("open the file read");
    let bad = Arc::new(AtomicU64::new(0));
    let b2 = bad.clone();
    let h = uio.handler(move |c| {
        let ok =
            c.error.is_none() && c.data().len() == c.record.length as usize && holds_the_data(&c);
        if !ok {
            b2.fetch_add(1, Ordering::Relaxed);
        }
    });
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(buf) = uio.buffer() else {
            uio.wait().expect("the survivor's wait");
            continue;
        };
        let at = (n.wrapping_mul(61) % (FILE / BLOCK - 16) as u64) * BLOCK as u64;
        let rec = Request::new(Opcode::Read, t, at, buf.addr(), 16 * BLOCK as u32, h, n);
        match uio.submit(rec, buf) {
            Ok(()) => n += 1,
            Err(NotQueued::Full { .. }) => {
                uio.wait().expect("the survivor's wait");
            }
            Err(e) => panic!("the survivor's submit: {e}"),
        }
    }
    uio.wait_all()
        .unwrap_or_else(|e| panic!("the survivor's wait: {e}"));
    assert_eq!(bad.load(Ordering::Relaxed), 0, "the survivor's reads");
    assert_eq!(uio.buffers_free(), 8, "the survivor's buffers");
    n
}

/// One round of the process kill; returns whether I/O went through before the kill.
fn process_round(
    rng: &mut Rng,
    n: usize,
    data: &std::path::Path,
    scratch: &std::path::Path,
) -> bool {
    let c = rng.usize(..CONFIGS.len());
    let early = rng.u64(..6) == 0;
    let delay = Duration::from_micros(rng.u64(..if early { 8_000 } else { 30_000 }));
    let what = format!(
        "round {n}: {:?}, killed {delay:?} after {}",
        CONFIGS[c],
        if early { "its start" } else { "its first read" }
    );
    let stop = Arc::new(AtomicBool::new(false));
    let survivor = {
        let (path, stop) = (data.to_path_buf(), stop.clone());
        std::thread::spawn(move || read_alongside(&path, &stop))
    };
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "peer", "--nocapture", "--test-threads=1"])
        .env(
            PEER_ENV,
            format!("{c} {} {}", data.display(), scratch.display()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the process to kill");
    let pid = child.id();
    let mut out = std::io::BufReader::new(child.stdout.take().expect("its output"));
    let (said_tx, said_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        // The test harness speaks first; then the word, or the end of the output.
        let mut line = String::new();
        let mut go = false;
        while !go && out.read_line(&mut line).is_ok_and(|n| n > 0) {
            go = line.contains(GO); // after the harness's "test peer ... "
            line.clear();
        }
        let _ = said_tx.send(go);
        let mut rest = String::new();
        let _ = out.read_to_string(&mut rest);
    });
    let went = if early {
        false
    } else {
        // The first read checked, or the process ended (it says why on stderr).
        said_rx.recv_timeout(HANG).unwrap_or(false)
    };
    std::thread::sleep(delay);
    let killed_at = Instant::now();
    let _ = child.kill(); // SIGKILL
    let status = loop {
        if let Some(s) = child.try_wait().expect("the killed process") {
            break s;
        }
        assert!(
            killed_at.elapsed() <= DETECT,
            "{what}: the process still runs {DETECT:?} after SIGKILL (its requests in flight keep it)"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let took = killed_at.elapsed();
    reader.join().expect("the output reader");
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    if status.code() == Some(NO_LAYER) {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::IoUring,
            &format!("{what}: {}", stderr.trim()),
        );
    } else {
        assert_eq!(
            status.signal(),
            Some(9),
            "{what}: the process ended before it was killed ({status}): {stderr}"
        );
    }
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "{what}: the process (or a thread of its rings) is still there after it was reaped"
    );
    // The survivor goes on a little after the kill, then stops.
    std::thread::sleep(Duration::from_millis(5));
    stop.store(true, Ordering::Relaxed);
    let reads = survivor.join().expect("the survivor");
    // The file read is as it was; the file written holds only whole blocks.
    let got = std::fs::read(data).expect("read the data file");
    assert!(
        got.iter().enumerate().all(|(i, b)| *b == data_byte(i)),
        "{what}: the file read changed"
    );
    let got = std::fs::read(scratch).expect("read the scratch file");
    assert_eq!(got.len(), FILE, "{what}: the file written changed size");
    for (b, blk) in got.chunks_exact(BLOCK).enumerate() {
        if let Err(e) = whole_block(b as u64, blk) {
            panic!("{what}: {e}");
        }
    }
    println!("{what}: ended {took:?} after SIGKILL; the survivor made {reads} reads");
    went
}

#[test]
fn a_process_killed_mid_request_leaves_its_files_whole_and_nothing_behind() {
    let Some((_alone, seed, dir, data)) = start() else {
        return;
    };
    let scratch = dir.path().join("scratch");
    let mut f = std::fs::File::create(&scratch).expect("the scratch file");
    let mut b = vec![0u8; BLOCK];
    for k in 0..(FILE / BLOCK) as u64 {
        block(k, 0, &mut b);
        f.write_all(&b).expect("write the scratch file");
    }
    f.sync_all().expect("sync");
    drop(f);
    let rounds = 20;
    // Each round on a thread of its own, under the watchdog, with a generator of its own.
    let went = zcio_testkit::kill::rounds(seed, rounds, &TOLERANCE, |rng, n| {
        let (data, scratch) = (data.clone(), scratch.clone());
        let mut rng = rng.fork();
        watchdog(&format!("round {n} (seed {seed:#x})"), HANG, move || {
            process_round(&mut rng, n, &data, &scratch)
        })
    });
    let written = std::fs::read(&scratch)
        .expect("read the scratch file")
        .chunks_exact(BLOCK)
        .filter(|b| b[8..16] != [0; 8])
        .count();
    assert!(
        written > 0,
        "no write landed before a kill (seed {seed:#x})"
    );
    assert!(
        went >= rounds / 2,
        "I/O went through in {went} rounds of {rounds} only (seed {seed:#x})"
    );
}

/// How the thread that ends early ends.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// Its handler panics at its `n`th completion.
    HandlerPanics(u64),
    /// It returns after `n` submissions, with requests in flight.
    Returns(u64),
}

/// One round of the thread ending: three issuing threads share a layer, thread 0 ends early,
/// the others make `per` reads each. Returns the completions the layer dropped for thread 0.
fn thread_round(uio: Arc<Uio>, path: &std::path::Path, ending: Ending, per: u64) -> u64 {
    let threads = 3u64;
    let target = uio.open(path, false).expect("open the file read");
    let bad = Arc::new(AtomicU64::new(0));
    let handled = Arc::new(AtomicU64::new(0));
    let (b2, h2) = (bad.clone(), handled.clone());
    let h = uio.handler(move |c| {
        let me: u64 = std::thread::current()
            .name()
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX);
        let ok = c.error.is_none() && c.record.argument / 1_000_000 == me && holds_the_data(&c);
        if !ok {
            b2.fetch_add(1, Ordering::Relaxed);
        }
        if me == 0 {
            let k = h2.fetch_add(1, Ordering::Relaxed) + 1;
            if let Ending::HandlerPanics(at) = ending {
                if k == at {
                    panic!("the handler of thread 0 gives up");
                }
            }
        }
    });
    let mut joins = Vec::new();
    for th in 0..threads {
        let uio = uio.clone();
        joins.push(
            std::thread::Builder::new()
                .name(th.to_string())
                .spawn(move || {
                    let count = match (th, ending) {
                        (0, Ending::Returns(k)) => k,
                        (0, Ending::HandlerPanics(_)) => u64::MAX,
                        _ => per,
                    };
                    let mut k = 0;
                    while k < count {
                        let Some(buf) = uio.buffer() else {
                            // Another thread holds every buffer: what it gets back comes here.
                            if let Err(UioError::NothingInFlight) = uio.wait() {
                                std::thread::yield_now();
                            }
                            continue;
                        };
                        let at = ((th * 97 + k * 13) % (FILE / BLOCK - 4) as u64) * BLOCK as u64;
                        let arg = th * 1_000_000 + k;
                        let rec = Request::new(
                            Opcode::Read,
                            target,
                            at,
                            buf.addr(),
                            4 * BLOCK as u32,
                            h,
                            arg,
                        );
                        match uio.submit(rec, buf) {
                            Ok(()) => k += 1,
                            Err(NotQueued::Full { .. }) => {
                                let _ = uio.wait();
                            }
                            Err(e) => panic!("{e}"),
                        }
                        // Thread 0 takes buffers without waiting much: it holds many when it
                        // ends.
                        if th != 0 {
                            uio.poll();
                        }
                    }
                    if th == 0 {
                        return; // with requests in flight (or the panic came first)
                    }
                    uio.wait_all().unwrap_or_else(|e| panic!("{e}"));
                })
                .expect("spawn a thread"),
        );
    }
    let mut results = joins.into_iter().map(|j| j.join());
    let first = results.next().expect("thread 0");
    if let Ending::HandlerPanics(_) = ending {
        // Its handler's panic ended it (or it never got that far and ran on: then u64::MAX
        // submissions would not end, so it did panic).
        assert!(first.is_err(), "{ending:?}: thread 0 did not end");
    }
    for r in results {
        r.expect("a surviving thread");
    }
    assert_eq!(
        bad.load(Ordering::Relaxed),
        0,
        "{ending:?}: a read went wrong"
    );
    // What thread 0 left in flight completes into nobody's hands; the layer drops it and its
    // buffers come back, once some thread takes completions in.
    let t0 = Instant::now();
    while uio.buffers_free() < uio.config().buffers {
        uio.poll();
        assert!(
            t0.elapsed() < DETECT,
            "{ending:?}: {} of {} buffers never came back from the thread that ended",
            uio.config().buffers - uio.buffers_free(),
            uio.config().buffers
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    uio.close(target).expect("close");
    uio.stats().orphaned
}

#[test]
fn an_issuing_thread_that_ends_mid_stream_leaves_the_others_going_and_every_buffer_back() {
    let Some((_alone, seed, _dir, data)) = start() else {
        return;
    };
    let mut rng = zcio_testkit::kill::rng(seed);
    // The panics are the test's: keep them off the output.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() != Some("0") {
            hook(info);
        }
    }));
    let mut before = None;
    let mut orphaned = 0;
    for (n, (i, t)) in CONFIGS.iter().copied().cycle().take(4 * 6).enumerate() {
        let uio = match layer(i, t, 8) {
            Ok(u) => Arc::new(u),
            Err(e) => {
                zcio_vm::skip::skip(zcio_vm::skip::Capability::IoUring, &e);
                continue;
            }
        };
        let ending = if rng.u64(..2) == 0 {
            Ending::HandlerPanics(1 + rng.u64(..40))
        } else {
            Ending::Returns(1 + rng.u64(..40))
        };
        let what = format!("round {n}: ({i:?}, {t:?}), thread 0 {ending:?} (seed {seed:#x})");
        let path = data.clone();
        let dropped = watchdog(&what, HANG, move || thread_round(uio, &path, ending, 60));
        orphaned += dropped;
        println!("{what}: the others went on, every buffer came back ({dropped} dropped)");
        // The first round warms up the thread caches.
        match &before {
            None => before = Some(Baseline::take()),
            Some(b) => b.check(&what, &TOLERANCE),
        }
    }
    let _ = std::panic::take_hook();
    assert!(
        orphaned > 0,
        "no round ended a thread with requests in flight (seed {seed:#x})"
    );
}
