//! The Rust API's side of `c/bench.c`: the same sender and receiver, through `zcio::Channel`
//! instead of the C interface, so that the two throughputs can be set side by side (`zcio
//! bench c` runs both, its Rust side the same code as this). bench.c's comment has the
//! protocol: a ring of buffers (256 MiB at most) at both ends, batches written, sent, received,
//! then checked byte for byte outside the clock, a one-byte go-ahead between batches. Before
//! each call the channel's waits are set as the C interface sets them before each of its calls
//! (interruptible, the call's timeout), so that the two differ by the C interface alone.
//!
//! ```text
//! cargo run --release -p zcio-c --example channel_bench -- receiver NAME SIZE TOTAL
//! cargo run --release -p zcio-c --example channel_bench -- sender NAME SIZE TOTAL
//! ```

use std::time::{Duration, Instant};
use zcio::{AppBuffer, Channel, InputBuffering, Semantics, Waits};

const RING_BYTES: usize = 256 << 20;

fn size(s: &str) -> usize {
    let (n, shift) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 20),
        _ => (s, 0),
    };
    n.parse::<usize>().expect("a size: 4096, 64k, 1m") << shift
}

/// Word `w` of message `k` (bench.c's `message_word`).
fn message_word(k: u64, w: u64) -> u64 {
    (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)
}

fn fill_message(b: &mut [u8], k: u64) {
    let words = b.len() / 8;
    let mut chunks = b.chunks_exact_mut(8);
    for (w, c) in (&mut chunks).enumerate() {
        c.copy_from_slice(&message_word(k, w as u64).to_ne_bytes());
    }
    let tail = chunks.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&message_word(k, words as u64).to_ne_bytes()[..n]);
}

/// The first byte of `b` that is not message `k`'s, or `b.len()`.
fn check_message(b: &[u8], k: u64) -> usize {
    let mut w = 0;
    for c in b.chunks_exact(8) {
        let got = u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        if got != message_word(k, w as u64) {
            break;
        }
        w += 1;
    }
    (8 * w..b.len())
        .find(|&i| b[i] != message_word(k, (i / 8) as u64).to_ne_bytes()[i % 8])
        .unwrap_or(b.len())
}

/// The waits the C interface sets before a call with `timeout_ms` (negative: none).
fn waits(timeout_ms: i64) -> Waits {
    Waits {
        timeout: u64::try_from(timeout_ms).ok().map(Duration::from_millis),
        interruptible: true,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [role, name, s, t] = args.as_slice() else {
        return Err("usage: channel_bench receiver|sender NAME SIZE TOTAL".into());
    };
    let (len, total) = (size(s), size(t));
    if len == 0 || total < len {
        return Err("SIZE at least 1 and TOTAL at least SIZE".into());
    }
    let count = total / len;
    let ring = (RING_BYTES / len).max(1).min(count);
    let mut bufs = (0..ring)
        .map(|_| AppBuffer::for_message(len))
        .collect::<Result<Vec<_>, _>>()?;
    if role == "receiver" {
        for b in bufs.iter_mut() {
            b.fill(0xA5);
        }
        let l = Channel::listen(name)?;
        let mut ch = l.accept(Some(Duration::from_secs(30)))?;
        drop(l);
        let (mut secs, mut timed) = (0.0, 0usize);
        for b in (0..count).step_by(ring) {
            let n = ring.min(count - b);
            let mut start = Instant::now();
            for (j, buf) in bufs[..n].iter_mut().enumerate() {
                ch.set_waits(waits(30_000));
                let (got, _) = ch.recv(Semantics::EmulatedCopy, buf, InputBuffering::EarlyDemux)?;
                if got != len {
                    return Err(format!("message {} has {got} bytes, not {len}", b + j).into());
                }
                if j == 0 {
                    start = Instant::now();
                }
            }
            secs += start.elapsed().as_secs_f64();
            timed += n - 1;
            for (j, buf) in bufs[..n].iter_mut().enumerate() {
                let at = check_message(buf, (b + j) as u64);
                if at != len {
                    return Err(format!("message {} is wrong at byte {at} of {len}", b + j).into());
                }
                buf.fill(0xA5);
            }
            if b + n < count {
                ch.set_waits(waits(-1));
                ch.send(Semantics::Copy, &[1])?;
            }
        }
        let mibs = if timed > 0 {
            timed as f64 * len as f64 / (1 << 20) as f64 / secs
        } else {
            0.0
        };
        println!("rust {len} {mibs:.1} {count}");
    } else {
        let mut ch = None;
        for b in (0..count).step_by(ring) {
            let n = ring.min(count - b);
            for (j, buf) in bufs[..n].iter_mut().enumerate() {
                fill_message(buf, (b + j) as u64);
            }
            let ch = match &mut ch {
                Some(c) => c,
                None => ch.insert(Channel::connect(name, Duration::from_secs(30))?),
            };
            for buf in &bufs[..n] {
                ch.set_waits(waits(-1));
                ch.send(Semantics::EmulatedCopy, buf)?;
            }
            if b + n < count {
                let mut go = [0u8; 1];
                ch.set_waits(waits(60_000));
                ch.recv(Semantics::EmulatedCopy, &mut go, InputBuffering::EarlyDemux)?;
            }
        }
        if let Some(ch) = ch.as_mut() {
            ch.set_waits(waits(60_000));
            ch.flush()?;
        }
    }
    Ok(())
}
