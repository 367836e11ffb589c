//! The Rust API's side of `c/bench.c`: the same sender and receiver, through `zcio::Channel`
//! instead of the C interface, so that the two throughputs can be set side by side.
//!
//! ```text
//! cargo run --release -p zcio-c --example channel_bench -- receiver NAME SIZE TOTAL
//! cargo run --release -p zcio-c --example channel_bench -- sender NAME SIZE TOTAL
//! ```

use std::time::{Duration, Instant};
use zcio::{AppBuffer, Channel, InputBuffering, Semantics};

fn size(s: &str) -> usize {
    let (n, shift) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 20),
        _ => (s, 0),
    };
    n.parse::<usize>().expect("a size: 4096, 64k, 1m") << shift
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [role, name, s, t] = args.as_slice() else {
        return Err("usage: channel_bench receiver|sender NAME SIZE TOTAL".into());
    };
    let (len, total) = (size(s), size(t));
    let count = total / len;
    let mut buf = AppBuffer::for_message(len)?;
    if role == "receiver" {
        let l = Channel::listen(name)?;
        let mut ch = l.accept(Some(Duration::from_secs(30)))?;
        drop(l);
        let mut start = Instant::now();
        for k in 0..count {
            let (n, _) = ch.recv(
                Semantics::EmulatedCopy,
                &mut buf,
                InputBuffering::EarlyDemux,
            )?;
            if n != len || buf[0] != k as u8 {
                return Err(format!("message {k} is wrong").into());
            }
            if k == 0 {
                start = Instant::now();
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let mibs = (count - 1) as f64 * len as f64 / (1 << 20) as f64 / secs;
        println!("rust {len} {mibs:.1}");
    } else {
        let mut ch = Channel::connect(name, Duration::from_secs(30))?;
        buf.fill(1);
        for k in 0..count {
            buf[0] = k as u8;
            ch.send(Semantics::EmulatedCopy, &buf)?;
        }
        ch.flush()?;
    }
    Ok(())
}
