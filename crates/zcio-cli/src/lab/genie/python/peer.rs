//! The bench's job done by Rust processes through the Rust channel: the baseline that
//! Python's overhead is read against.
//!
//! The script runs A as `zcio bench python --peer a --contenders rust --bytes N` (the
//! executable it is given in `$ZCIO_BENCH_PEER`); A starts B the same way (`--peer b`) and
//! talks to it over B's standard input and output, one line each way per step, as the script's
//! A and B talk over a pipe: B listens on a unique name and says `listening`; A connects, B
//! accepts and says `ready`; A's clock starts, it sends, changes its buffer and stops its CPU
//! clock; B, having received, says `got <its CLOCK_MONOTONIC ns>`; A says `changed`; B checks
//! its bytes and says `done <json>`. The exchange from `ready` runs twice, with two buffers
//! made before the clock, as the script's does: the second is measured. A prints the run's
//! JSON object as the script's A does. A and B are pinned to two different CPUs, as the
//! script's are.
//!
//! - `rust`: A's bytes are private memory in 2 MiB pages where the kernel gives them (as numpy
//!   makes a large array's, `MADV_HUGEPAGE`); its send is what
//!   zcio's Python module does with such an object: a loan taken, the bytes copied in, the
//!   loan sent ([`Channel::send_loan`]); B receives with [`Channel::recv_loan`].
//! - `rust-alloc`: A's bytes are a [`Loan`] filled before the clock (as `zcio.alloc` memory
//!   is); its send is [`Channel::send_loan_copy`], the loan kept and changed after.
//! - `rust-volatile`: as `rust`, both ends having said they trust each other with volatile
//!   loans ([`Channel::set_volatile_loans`]): the loan is a memory file B gives back when it
//!   drops the message, which A's next loan reuses.

use crate::lab::genie::channel::{Pinned, cpus, monotonic_ns, process_cpu_ns};
use crate::transfer::Res;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;
use zcio_genie::channel::Channel;
use zcio_genie::memnet::LinkOptions;
use zcio_genie::memnet::loan::Loan;
use zcio_vm::mapping::{MapOptions, Mapping};

/// The contenders this module runs, in the script's names.
pub const RUST_CONTENDERS: [&str; 3] = ["rust", "rust-alloc", "rust-volatile"];

/// The script's constants: word k of the pattern is `k * K ^ SEED`, little-endian.
const K: u64 = 0x9E37_79B9_7F4A_7C15;
const SEED: u64 = 0x7A63_696F;
const PATIENCE: Duration = Duration::from_secs(120);

/// Transfers per run, each of an array of its own, as the script makes them: the last is
/// measured, the first runs the code paths once.
const TRANSFERS: usize = 2;

fn byte_at(i: usize) -> u8 {
    let w = (i as u64 / 8).wrapping_mul(K) ^ SEED;
    (w >> ((i % 8) * 8)) as u8
}

fn fill(b: &mut [u8]) {
    for (k, w) in b.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&((k as u64).wrapping_mul(K) ^ SEED).to_le_bytes());
    }
}

/// A's change right after its send: every 4096th byte and the last, flipped.
fn change(b: &mut [u8]) {
    for i in (0..b.len()).step_by(4096) {
        b[i] ^= 0xFF;
    }
    if let Some(l) = b.last_mut() {
        *l ^= 0xFF;
    }
}

/// (verified, saw A's change, why not verified) of B's bytes, sampled where A changes them.
fn check(b: &[u8], n: usize) -> (bool, bool, Option<String>) {
    if b.len() != n {
        return (
            false,
            false,
            Some(format!("B has {} bytes, not {n}", b.len())),
        );
    }
    let mut saw = false;
    for i in (0..n).step_by(4096).chain([n - 1]) {
        let want = byte_at(i);
        if b[i] == want ^ 0xFF {
            saw = true;
        } else if b[i] != want {
            return (
                false,
                saw,
                Some(format!(
                    "byte {i} is neither the original nor A's change of it"
                )),
            );
        }
    }
    (true, saw, None)
}

/// This process's peak resident set (KiB).
fn peak_rss_kib() -> i64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes one `rusage` into the pointer given, which points at one.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    if r != 0 {
        return 0;
    }
    // SAFETY: written by the successful call above (and zeroed before it).
    unsafe { u.assume_init() }.ru_maxrss
}

/// A line from `r`, without its newline; an error naming `what` was due if none came.
fn line(r: &mut impl BufRead, what: &str) -> Res<String> {
    let mut s = String::new();
    if r.read_line(&mut s)? == 0 {
        return Err(format!("the peer ended before saying {what}").into());
    }
    Ok(s.trim_end().to_string())
}

/// `line`, which must start with `tag`: what follows it.
fn said(r: &mut impl BufRead, tag: &str) -> Res<String> {
    let l = line(r, tag)?;
    match l.strip_prefix(tag) {
        Some(rest) => Ok(rest.trim().to_string()),
        None => Err(format!("the peer said {l:?} where {tag:?} was due").into()),
    }
}

/// Run one side: `a` prints the run's JSON object on standard output.
pub fn run(role: &str, contender: &str, n: usize, name: Option<&str>) -> Res<()> {
    if !RUST_CONTENDERS.contains(&contender) {
        return Err(format!(
            "invalid argument `--contenders {contender}`: with --peer, one of {}",
            RUST_CONTENDERS.join(", ")
        )
        .into());
    }
    if n == 0 || n % 8 != 0 {
        return Err(format!("invalid argument `--bytes {n}`: a positive multiple of 8").into());
    }
    match (role, name) {
        ("a", _) => {
            let v = a(contender, n)?;
            println!("{v}");
            Ok(())
        }
        ("b", Some(name)) => b(contender, n, name),
        ("b", None) => Err("invalid argument `--peer b`: needs --peer-name".into()),
        (r, _) => Err(format!("invalid argument `--peer {r}`: a or b").into()),
    }
}

/// B: listen, say so, accept, say ready, receive, report, wait for A's change, check.
fn b(contender: &str, n: usize, name: &str) -> Res<()> {
    // On the second of two CPUs, A on the first (as the script pins its processes).
    let _pinned = cpus().map(|[_, b]| Pinned::to(b));
    let mut out = std::io::stdout().lock();
    let mut input = std::io::stdin().lock();
    let mut lst = Channel::listen(name)?;
    // The window the script's B asks for (loans need none).
    lst.set_link_options(LinkOptions {
        window: n.clamp(16 << 20, 256 << 20),
    });
    writeln!(out, "listening")?;
    out.flush()?;
    let mut ch = lst.accept(Some(PATIENCE))?;
    ch.set_volatile_loans(contender == "rust-volatile");
    drop(lst);
    for _ in 0..TRANSFERS {
        writeln!(out, "ready")?;
        out.flush()?;
        let c0 = process_cpu_ns();
        let (mut got, _) = ch.recv_loan()?;
        let t_b = monotonic_ns();
        let c1 = process_cpu_ns();
        writeln!(out, "got {t_b}")?;
        out.flush()?;
        said(&mut input, "changed")?;
        let (ok, saw, why) = check(&got, n);
        // B's bytes are its own: it may write them.
        if let Some(b) = got.first_mut() {
            *b ^= 0;
        }
        drop(got);
        let done = serde_json::json!({
            "cpu_ns": (c1 - c0) as i64,
            "rss_kib": peak_rss_kib(),
            "verified": ok,
            "saw_later_change": saw,
            "why": why,
        });
        writeln!(out, "done {done}")?;
        out.flush()?;
    }
    Ok(())
}

/// B's process, its input and output.
struct PeerB {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Drop for PeerB {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A: start B, make the bytes, connect, send, change, gather B's report.
fn a(contender: &str, n: usize) -> Res<serde_json::Value> {
    let name = format!(
        "zcio-bench-rs-{}-{:x}",
        std::process::id(),
        fastrand::u64(..)
    );
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["bench", "python", "--peer", "b", "--contenders", contender])
        .args(["--bytes", &n.to_string(), "--peer-name", &name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut peer = PeerB {
        to: child.stdin.take().ok_or("B's stdin")?,
        from: BufReader::new(child.stdout.take().ok_or("B's stdout")?),
        child,
    };
    // B started free to choose its CPU, it takes the second of two; A the first.
    let _pinned = cpus().map(|[a, _]| Pinned::to(a));
    let mut arrays = (0..TRANSFERS)
        .map(|_| Array::made(contender, n))
        .collect::<Res<Vec<_>>>()?;
    said(&mut peer.from, "listening")?;
    let mut ch = Channel::connect(&name, PATIENCE)?;
    ch.set_volatile_loans(contender == "rust-volatile");
    let mut runs = Vec::new();
    for a in &mut arrays {
        said(&mut peer.from, "ready")?;
        let c0 = process_cpu_ns();
        let t0 = monotonic_ns();
        match a {
            Array::Loan(l) => {
                ch.send_loan_copy(l, 0..n)?;
            }
            Array::Private(m) => {
                let mut l = ch.loan(n)?;
                l.copy_from_slice(m.as_slice());
                ch.send_loan(l)?;
            }
        }
        let t1 = monotonic_ns();
        change(a.bytes_mut());
        let c1 = process_cpu_ns();
        let t_b: u64 = said(&mut peer.from, "got")?.parse()?;
        writeln!(peer.to, "changed")?;
        peer.to.flush()?;
        let done: serde_json::Value = serde_json::from_str(&said(&mut peer.from, "done")?)?;
        runs.push((
            t_b as i64 - t0 as i64,
            (t1 - t0) as i64,
            (c1 - c0) as i64,
            done,
        ));
    }
    let _ = peer.child.wait();
    // The last transfer is the one measured; the first's times are kept beside it.
    let (first_latency, first_send) = (runs[0].0, runs[0].1);
    let (latency, send, cpu, done) = runs.last().ok_or("no transfer")?;
    let why = runs.iter().map(|r| &r.3["why"]).find(|w| !w.is_null());
    Ok(serde_json::json!({
        "latency_ns": latency,
        "send_ns": send,
        "cpu_ns": cpu + done["cpu_ns"].as_i64().unwrap_or(0),
        "first_latency_ns": first_latency,
        "first_send_ns": first_send,
        "rss_a_kib": peak_rss_kib(),
        "rss_b_kib": done["rss_kib"],
        "verified": runs.iter().all(|r| r.3["verified"] == true),
        "saw_later_change": runs.iter().any(|r| r.3["saw_later_change"] == true),
        "why": why.unwrap_or(&serde_json::Value::Null),
    }))
}

/// One of A's arrays, made and filled before the clock: private memory in 2 MiB pages where
/// the kernel gives them, as numpy makes a large array's (`rust`), or a loan (`rust-alloc`).
enum Array {
    Private(Mapping),
    Loan(Loan),
}

impl Array {
    fn made(contender: &str, n: usize) -> Res<Array> {
        let mut a = if contender == "rust-alloc" {
            Array::Loan(Loan::new(n)?)
        } else {
            Array::Private(Mapping::anonymous(n, MapOptions::HUGE)?)
        };
        fill(a.bytes_mut());
        Ok(a)
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Array::Private(m) => m.as_mut_slice(),
            Array::Loan(l) => l,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_the_scripts_and_the_check_tells_the_change_from_corruption() {
        let n = 3 * 4096 + 8;
        let mut b = vec![0u8; n];
        fill(&mut b);
        assert!((0..n).all(|i| b[i] == byte_at(i)));
        assert_eq!(check(&b, n), (true, false, None));
        change(&mut b);
        assert_eq!(check(&b, n), (true, true, None));
        b[4096] = b[4096].wrapping_add(1);
        let (ok, _, why) = check(&b, n);
        assert!(!ok && why.unwrap().contains("byte 4096"));
        assert!(!check(&b, n - 8).0);
    }
}
