//! The Rust side of `zcio bench c`: what `crates/zcio-c/c/bench.c` does through the C
//! interface, done through the Rust channel API (as the example `channel_bench` of `zcio-c`
//! does), run as `zcio bench c --peer receiver|sender --peer-name NAME --bytes SIZE --volume
//! TOTAL`, so that the bench needs nothing but this executable.
//!
//! The protocol is bench.c's: a ring of [`ring_len`] buffers of [`AppBuffer::for_message`]
//! (what `zcio_alloc` makes) at both ends; the sender writes a batch of messages into its ring
//! ([`fill_message`]) and sends each under emulated copy; the receiver receives the batch into
//! its ring (early demultiplexing, as `zcio_channel_recv` does), its clock running from the end
//! of the batch's first message to the end of its last, then checks every byte of the batch
//! ([`check_message`]), poisons it and sends a one-byte go-ahead where more batches are due.
//! Before each call the channel's waits are set as the C interface sets them before each of
//! its calls: interruptible by a signal, the timeout of the call (the C program's 30 s for a
//! receive, 60 s for the go-ahead and the flush, none for a send). The receiver prints
//! `rust SIZE MIB_PER_S MESSAGES`, as bench.c prints `c ...`.

use crate::transfer::Res;
use std::time::{Duration, Instant};
use zcio_genie::channel::Channel;
use zcio_genie::{AppBuffer, InputBuffering, Semantics, Waits};

/// The most bytes a ring holds (bench.c's `RING_BYTES`).
pub const RING_BYTES: usize = 256 << 20;

/// The buffers of a ring for `count` messages of `size` bytes: 256 MiB's worth at most, one at
/// least, no more than the messages.
pub fn ring_len(size: usize, count: usize) -> usize {
    (RING_BYTES / size).max(1).min(count)
}

/// Word `w` of message `k` (bench.c's `message_word`).
pub fn message_word(k: u64, w: u64) -> u64 {
    (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)
}

/// Write message `k` into `b`: word `w` is `message_word(k, w)` in this host's byte order,
/// a tail shorter than a word its word's first bytes.
pub fn fill_message(b: &mut [u8], k: u64) {
    let words = b.len() / 8;
    let mut chunks = b.chunks_exact_mut(8);
    for (w, c) in (&mut chunks).enumerate() {
        c.copy_from_slice(&message_word(k, w as u64).to_ne_bytes());
    }
    let tail = chunks.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&message_word(k, words as u64).to_ne_bytes()[..n]);
}

/// The first byte of `b` that is not message `k`'s, or `b.len()` where all are.
pub fn check_message(b: &[u8], k: u64) -> usize {
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

/// Run one side: `receiver` prints its line on standard output.
pub fn run(role: &str, name: &str, size: usize, total: usize) -> Res<()> {
    if size == 0 || total < size {
        return Err(format!(
            "invalid argument `--volume {total}`: at least `--bytes` ({size}), which is at least 1"
        )
        .into());
    }
    let count = total / size;
    let ring = ring_len(size, count);
    let mut bufs = (0..ring)
        .map(|_| AppBuffer::for_message(size))
        .collect::<Result<Vec<_>, _>>()?;
    match role {
        "receiver" => {
            let (mibs, count) = receiver(name, size, count, &mut bufs)?;
            println!("rust {size} {mibs:.1} {count}");
            Ok(())
        }
        "sender" => sender(name, count, &mut bufs),
        r => Err(format!("invalid argument `--peer {r}`: receiver or sender").into()),
    }
}

/// Receive `count` messages into `bufs` by batches, check them; (MiB/s, messages).
fn receiver(name: &str, size: usize, count: usize, bufs: &mut [AppBuffer]) -> Res<(f64, usize)> {
    // Every page touched before the clock, and a byte no message leaves alone.
    for b in bufs.iter_mut() {
        b.fill(0xA5);
    }
    let ring = bufs.len();
    let l = Channel::listen(name)?;
    let mut ch = l.accept(Some(Duration::from_millis(30_000)))?;
    drop(l);
    let mut secs = 0.0;
    let mut timed = 0usize;
    for b in (0..count).step_by(ring) {
        let n = ring.min(count - b);
        let mut start = Instant::now();
        for (j, buf) in bufs[..n].iter_mut().enumerate() {
            ch.set_waits(waits(30_000));
            let (got, _) = ch.recv(Semantics::EmulatedCopy, buf, InputBuffering::EarlyDemux)?;
            if got != size {
                return Err(format!("message {} has {got} bytes, not {size}", b + j).into());
            }
            if j == 0 {
                start = Instant::now();
            }
        }
        secs += start.elapsed().as_secs_f64();
        timed += n - 1;
        for (j, buf) in bufs[..n].iter_mut().enumerate() {
            let at = check_message(buf, (b + j) as u64);
            if at != size {
                return Err(format!("message {} is wrong at byte {at} of {size}", b + j).into());
            }
            buf.fill(0xA5);
        }
        if b + n < count {
            ch.set_waits(waits(-1));
            ch.send(Semantics::Copy, &[1])?;
        }
    }
    let mibs = if timed > 0 {
        timed as f64 * size as f64 / (1 << 20) as f64 / secs
    } else {
        0.0
    };
    Ok((mibs, count))
}

/// Send `count` messages from `bufs` by batches, each batch written before it goes.
fn sender(name: &str, count: usize, bufs: &mut [AppBuffer]) -> Res<()> {
    let ring = bufs.len();
    let mut ch = None;
    for b in (0..count).step_by(ring) {
        let n = ring.min(count - b);
        for (j, buf) in bufs[..n].iter_mut().enumerate() {
            fill_message(buf, (b + j) as u64);
        }
        let ch = match &mut ch {
            Some(c) => c,
            None => ch.insert(Channel::connect(name, Duration::from_millis(30_000))?),
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_checks_as_itself_and_not_as_another_and_a_changed_byte_is_named() {
        for len in [1, 7, 8, 9, 4096, 4099] {
            let mut b = vec![0u8; len];
            fill_message(&mut b, 5);
            assert_eq!(check_message(&b, 5), len);
            assert!(check_message(&b, 6) < len, "{len}");
            b[len - 1] ^= 1;
            assert_eq!(check_message(&b, 5), len - 1);
        }
        assert_eq!(ring_len(64 << 10, 10), 10);
        assert_eq!(ring_len(64 << 10, 1 << 20), 4096);
        assert_eq!(ring_len(1 << 30, 2), 1);
    }
}
