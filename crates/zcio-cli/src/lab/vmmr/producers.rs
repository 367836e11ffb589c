//! Paper 002's messages from real producers (§1: a device places the message in discontiguous
//! pages). The sweeps fill the store by CPU; here the pages are filled by
//! [`FileProducer`] (a file written once beforehand, read with `O_DIRECT` granule by granule
//! into the store's slots, handed out in a shuffled order) and by [`SocketProducer`] (two Unix
//! socket connections, a writer thread each, received through an io_uring provided-buffer ring
//! of slots, a granule from each connection in turn, so that the two messages interleave), and
//! each message is then reassembled by remapping, by copying and by the experiment's adaptive
//! policy.
//!
//! Per message two times are taken: the reassembly alone, and the whole read (or receive) and
//! reassembly. With sockets one receive brings a message on each connection: its time is
//! shared between the two. Every message is checked at the receiver, untimed, against what was
//! written: each 4 KiB page's stamp and the sum of the message's words; a wrong one fails the
//! run, naming the producer, the policy and the page. Where a producer cannot run here (a file
//! system that refuses `O_DIRECT`, no provided-buffer rings), its rows carry the reason and no
//! number.

use super::rig::Plan;
use super::section::ProducerRow;
use crate::report::fit;
use crate::transfer::Res;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;
use zcio_vm::remap::{Granule, PageStore, Slot};
use zcio_vmmr::pool::{BitmapPool, Rng, SplitMix64};
use zcio_vmmr::producer::{FileProducer, ProducerError, SocketProducer};
use zcio_vmmr::reassemble::{Path, Policy, Reassembler};

/// The policies every producer's messages are reassembled by.
pub const POLICIES: [&str; 3] = ["remap", "copy", "adaptive"];

/// The producers, as rows name them.
pub const PRODUCERS: [&str; 2] = ["file", "socket"];

const PAGE: usize = 4096;

/// Page `p`'s stamp: its first word.
fn stamp(p: u64) -> u64 {
    p.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED_0002
}

/// Word `i` of page `p`: the stamp, then a pattern of both.
fn word(p: u64, i: usize) -> u64 {
    if i == 0 {
        stamp(p)
    } else {
        stamp(p).rotate_left(i as u32 % 64) ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)
    }
}

/// Pages `first..` of the pattern, `len` bytes.
fn pattern(first: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.div_ceil(PAGE) * PAGE);
    for k in 0..len.div_ceil(PAGE) {
        for i in 0..PAGE / 8 {
            v.extend_from_slice(&word(first + k as u64, i).to_le_bytes());
        }
    }
    v.truncate(len);
    v
}

/// The wrapping sum of the words of pages `first..` over `len` bytes (a whole number of
/// words).
fn expected_sum(first: u64, len: usize) -> u64 {
    (0..len / 8).fold(0u64, |s, w| {
        s.wrapping_add(word(first + (w / (PAGE / 8)) as u64, w % (PAGE / 8)))
    })
}

/// Check a reassembled message against pages `first..`: every page's stamp, then the sum of
/// its words. The error names the first page wrong.
fn verify(bytes: &[u8], first: u64, len: usize) -> Result<(), String> {
    if bytes.len() != len {
        return Err(format!("{} bytes where {len} were written", bytes.len()));
    }
    let read = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    // A last page partly written has its stamp too (lengths are whole words).
    for k in 0..len.div_ceil(PAGE) {
        let found = read(k * PAGE);
        if found != stamp(first + k as u64) {
            return Err(format!(
                "page {k} has the stamp {found:#018x}, not {:#018x}",
                stamp(first + k as u64)
            ));
        }
    }
    let sum = (0..len / 8).fold(0u64, |s, w| s.wrapping_add(read(w * 8)));
    let want = expected_sum(first, len);
    if sum != want {
        return Err(format!(
            "the stamps are right but the words sum to {sum:#018x}, not {want:#018x}"
        ));
    }
    Ok(())
}

/// The policy named `name` for `granule`; `None` where the plan has no calibration for it.
fn policy(plan: &Plan, granule: Granule, name: &str) -> Option<Policy> {
    match name {
        "remap" => Some(Policy::Remap),
        "copy" => Some(Policy::Copy),
        _ => plan.policy(granule),
    }
}

/// What one producer, policy and size measured.
#[derive(Default)]
struct Taken {
    reassemble: Vec<f64>,
    cycle: Vec<f64>,
    runs: Vec<usize>,
    remapped: usize,
    verified: usize,
}

fn runs(slots: &[Slot]) -> usize {
    1 + slots
        .windows(2)
        .filter(|w| w[1].index() != w[0].index() + 1)
        .count()
}

/// Where the run stands, to name it in an error.
struct At<'a> {
    producer: &'static str,
    policy: &'a str,
    granule: Granule,
    granules: usize,
}

impl At<'_> {
    fn fail(&self, why: impl std::fmt::Display) -> crate::error::Error {
        crate::error::Error::msg(format!(
            "{} producer, {}, a message of {} granules of {}: {why}",
            self.producer,
            self.policy,
            self.granules,
            self.granule.name()
        ))
    }
}

/// Reassemble `slots` (`len` bytes of pages `first..`), check the message (spoiled first when
/// the plan says so), free it: the reassembly time (ns), whether it moved, and the slots.
fn reassemble_checked(
    r: &mut Reassembler<BitmapPool>,
    store: &mut PageStore,
    slots: Vec<Slot>,
    (first, len): (u64, usize),
    at: &At<'_>,
    spoil: bool,
) -> Res<(f64, bool, Vec<Slot>)> {
    let t = Instant::now();
    let m = r
        .reassemble(store, slots, len)
        .map_err(|e| at.fail(e.error))?;
    let ns = t.elapsed().as_nanos() as f64;
    if spoil {
        // Inside a page, past its stamp: only the sum can catch it.
        let b = r.bytes_mut(&m).map_err(|e| at.fail(e))?;
        let i = (len - 1).min(PAGE + 16);
        b[i] ^= 0x40;
    }
    let checked = verify(r.bytes(&m).map_err(|e| at.fail(e))?, first, len);
    let moved = m.path() == Path::Remapped;
    let slots = r
        .free(store, m)
        .map_err(|e| at.fail(format!("freeing: {}", e.error)))?;
    checked.map_err(|why| at.fail(format!("came out wrong: {why}")))?;
    Ok((ns, moved, slots))
}

/// The file's messages: a file of `len` bytes of pages `0..`, in a fresh directory, the
/// producer reading it, and how it reads.
fn file_producer(dir: &std::path::Path, len: usize) -> Res<(FileProducer, String)> {
    let path = dir.join("messages");
    let mut f = std::fs::File::create(&path)?;
    for chunk in (0..len).step_by(8 << 20) {
        let n = (8 << 20).min(len - chunk);
        f.write_all(&pattern((chunk / PAGE) as u64, n))?;
    }
    f.sync_all()?;
    drop(f);
    let p = FileProducer::open(&path)?;
    let how = match p.direct() {
        Ok(()) => format!(
            "O_DIRECT, the file under {}",
            std::env::temp_dir().display()
        ),
        Err(why) => why.to_string(),
    };
    Ok((p, how))
}

/// A store of `granules` granules whose free list is shuffled, so that a producer taking
/// slots in order gets them scattered.
fn shuffled_store(granules: usize, granule: Granule, rng: &mut SplitMix64) -> Res<PageStore> {
    let mut store = PageStore::new(granules, granule)?;
    let mut all: Vec<Slot> = (0..granules).filter_map(|_| store.take()).collect();
    while !all.is_empty() {
        let k = rng.below(all.len());
        store.put(all.swap_remove(k))?;
    }
    Ok(store)
}

/// A round's messages, each its slots and the first page of its stretch of the pattern; and
/// the time bringing them took (ns).
type Round = (f64, Vec<(Vec<Slot>, u64)>);

/// A producer as a series drives it: each round's messages, and where their slots go back.
trait Source {
    /// Round `round`'s messages.
    fn next(&mut self, store: &mut PageStore, round: usize) -> Res<Round>;

    /// Take back a freed message's slots.
    fn recycle(&mut self, store: &mut PageStore, slots: Vec<Slot>) -> Res<()>;
}

/// The file, each message read a granule further on than the one before, so that no message
/// finds the previous one's bytes.
struct FileSource<'a> {
    producer: &'a mut FileProducer,
    granule: usize,
    len: usize,
}

impl Source for FileSource<'_> {
    fn next(&mut self, store: &mut PageStore, round: usize) -> Res<Round> {
        let offset = round * self.granule;
        let t = Instant::now();
        let slots = self.producer.read_message(store, offset as u64, self.len)?;
        Ok((
            t.elapsed().as_nanos() as f64,
            vec![(slots, (offset / PAGE) as u64)],
        ))
    }

    fn recycle(&mut self, store: &mut PageStore, slots: Vec<Slot>) -> Res<()> {
        for s in slots {
            store.put(s)?;
        }
        Ok(())
    }
}

/// The first page of connection `conn`'s message in round `round`.
fn socket_first(conn: u64, round: usize) -> u64 {
    (conn << 40) + ((round as u64) << 24)
}

/// Two connections, a writer thread each making its next message, saying so, and sending it:
/// a receive is timed from when both are ready, so that making a message is not part of it.
struct SocketSource<'a> {
    producer: &'a mut SocketProducer,
    conns: [UnixStream; 2],
    ready: std::sync::mpsc::Receiver<()>,
    writers: Vec<std::thread::JoinHandle<std::io::Result<()>>>,
    len: usize,
}

impl<'a> SocketSource<'a> {
    fn new(producer: &'a mut SocketProducer, len: usize, rounds: usize) -> Res<Self> {
        let (a, a_peer) = UnixStream::pair()?;
        let (b, b_peer) = UnixStream::pair()?;
        let (ready, made) = std::sync::mpsc::channel::<()>();
        let writers = [(a_peer, 0u64), (b_peer, 1)]
            .into_iter()
            .map(|(mut peer, conn)| {
                let ready = ready.clone();
                std::thread::spawn(move || -> std::io::Result<()> {
                    for round in 0..rounds {
                        let message = pattern(socket_first(conn, round), len);
                        // The receiver gone, the write below fails and says why.
                        let _ = ready.send(());
                        peer.write_all(&message)?;
                    }
                    Ok(())
                })
            })
            .collect();
        Ok(SocketSource {
            producer,
            conns: [a, b],
            ready: made,
            writers,
            len,
        })
    }

    /// Close the connections (a writer blocked on a receive that failed then stops) and wait
    /// for the writers: the first writer's error, if any.
    fn finish(self) -> Res<()> {
        drop(self.conns);
        let mut first = Ok(());
        for w in self.writers {
            let written = w.join().map_err(|_| "a writer thread panicked")?;
            if first.is_ok() {
                first = written;
            }
        }
        Ok(first?)
    }
}

impl Source for SocketSource<'_> {
    fn next(&mut self, store: &mut PageStore, round: usize) -> Res<Round> {
        self.ready
            .recv()
            .and_then(|()| self.ready.recv())
            .map_err(|_| "a writer thread stopped")?;
        let [a, b] = &self.conns;
        let t = Instant::now();
        let got = self
            .producer
            .receive(store, &[a.as_fd(), b.as_fd()], &[self.len, self.len])?;
        let ns = t.elapsed().as_nanos() as f64;
        let messages = got
            .into_iter()
            .enumerate()
            .map(|(conn, slots)| (slots, socket_first(conn as u64, round)))
            .collect();
        Ok((ns, messages))
    }

    fn recycle(&mut self, store: &mut PageStore, slots: Vec<Slot>) -> Res<()> {
        Ok(self.producer.give_back(store, slots)?)
    }
}

/// One producer at one size and policy: a round untimed, then the plan's rounds; every
/// message reassembled, checked and freed. The cycle of a message is its share of the round's
/// bringing plus its reassembly.
fn series(
    plan: &Plan,
    source: &mut dyn Source,
    store: &mut PageStore,
    at: &At<'_>,
    policy: Policy,
) -> Res<Taken> {
    let len = at.granules * at.granule.bytes();
    let spoil = plan.spoil_producer.as_deref() == Some(at.producer);
    let mut r = Reassembler::with_policy(BitmapPool::new(store.capacity()), at.granule, policy)?;
    let mut out = Taken::default();
    for round in 0..=plan.producer_iterations {
        let (brought, messages) = source.next(store, round).map_err(|e| at.fail(e))?;
        let count = messages.len() as f64;
        let mut spent = 0.0;
        for (slots, first) in messages {
            let layout = runs(&slots);
            let (ns, moved, slots) =
                reassemble_checked(&mut r, store, slots, (first, len), at, spoil)?;
            source.recycle(store, slots).map_err(|e| at.fail(e))?;
            out.verified += len;
            spent += ns;
            // The first round is not timed (page tables, first faults).
            if round > 0 {
                out.reassemble.push(ns);
                out.runs.push(layout);
                out.remapped += usize::from(moved);
            }
        }
        if round > 0 {
            out.cycle.push((brought + spent) / count);
        }
    }
    Ok(out)
}

fn stats(ns: &[f64]) -> (Option<f64>, Option<[f64; 2]>) {
    if ns.is_empty() {
        return (None, None);
    }
    (
        fit::median(ns),
        Some([
            ns.iter().copied().fold(f64::INFINITY, f64::min),
            ns.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ]),
    )
}

/// A row of `taken`, or of the reason the producer cannot run.
fn row(at: &At<'_>, how: &str, taken: Result<Taken, String>) -> ProducerRow {
    let g = at.granule.bytes();
    let (t, refused) = match taken {
        Ok(t) => (t, None),
        Err(why) => (Taken::default(), Some(why)),
    };
    let (reassemble_ns, reassemble_spread_ns) = stats(&t.reassemble);
    let (cycle_ns, cycle_spread_ns) = stats(&t.cycle);
    let mut runs = t.runs.clone();
    runs.sort_unstable();
    ProducerRow {
        producer: at.producer.into(),
        how: how.into(),
        granule: at.granule.name().into(),
        policy: at.policy.into(),
        granules: at.granules,
        pages: at.granules * g / PAGE,
        bytes: at.granules * g,
        iterations: t.reassemble.len(),
        refused,
        reassemble_ns,
        reassemble_spread_ns,
        cycle_ns,
        cycle_spread_ns,
        runs: runs.get(runs.len() / 2).copied().unwrap_or(0),
        remapped: t.remapped,
        verified_bytes: t.verified,
    }
}

/// The producers' sizes, per granule: the plan's own, else the sweeps'.
fn sizes(plan: &Plan) -> [(Granule, &[usize]); 2] {
    let [s4, s2] = match &plan.producer_sizes {
        Some([a, b]) => [a, b],
        None => [&plan.sizes_4k, &plan.sizes_2m],
    };
    [(Granule::Page, s4), (Granule::Huge, s2)]
}

/// Progress units of the producers' series.
pub fn units(plan: &Plan) -> u64 {
    if plan.producer_iterations == 0 {
        return 0;
    }
    let n: usize = sizes(plan).iter().map(|(_, s)| s.len()).sum();
    (n * PRODUCERS.len()) as u64
}

/// Both producers at every size of the plan, by every policy (none if the plan's
/// `producer_iterations` is 0).
pub fn measure(plan: &Plan, progress: &mut dyn FnMut(String)) -> Res<Vec<ProducerRow>> {
    let mut rows = Vec::new();
    if plan.producer_iterations == 0 {
        return Ok(rows);
    }
    let largest = sizes(plan)
        .iter()
        .flat_map(|(g, s)| s.iter().map(|n| n * g.bytes()))
        .max()
        .unwrap_or(0);
    let dir = tempfile::tempdir()?;
    // Each message is read a granule further on than the one before.
    let file_len = largest + (plan.producer_iterations + 1) * Granule::Huge.bytes();
    let (mut file, file_how) = file_producer(dir.path(), file_len)?;
    let why_not_direct = file.direct().err().map(str::to_string);
    for (granule, sizes) in sizes(plan) {
        for &n in sizes {
            progress(format!(
                "producers: file, {n} granules of {}",
                granule.name()
            ));
            for name in POLICIES {
                let at = At {
                    producer: "file",
                    policy: name,
                    granule,
                    granules: n,
                };
                let Some(policy) = policy(plan, granule, name) else {
                    continue;
                };
                let taken = match &why_not_direct {
                    Some(why) => Err(why.clone()),
                    None => {
                        // The same shuffled store for every policy: the same layouts, message
                        // by message.
                        let mut rng = SplitMix64::new(plan.seed ^ n as u64);
                        let mut store = shuffled_store(2 * n + 2, granule, &mut rng)?;
                        let mut source = FileSource {
                            producer: &mut file,
                            granule: granule.bytes(),
                            len: n * granule.bytes(),
                        };
                        Ok(series(plan, &mut source, &mut store, &at, policy)?)
                    }
                };
                rows.push(row(&at, &file_how, taken));
            }
            progress(format!(
                "producers: socket, {n} granules of {}",
                granule.name()
            ));
            rows.extend(socket_rows(plan, granule, n)?);
        }
    }
    Ok(rows)
}

/// The socket producer's rows at one size: every policy, or the reason it cannot run.
fn socket_rows(plan: &Plan, granule: Granule, n: usize) -> Res<Vec<ProducerRow>> {
    let how = "two Unix socket connections, io_uring provided-buffer ring";
    let mut rows = Vec::new();
    for name in POLICIES {
        let Some(policy) = policy(plan, granule, name) else {
            continue;
        };
        let at = At {
            producer: "socket",
            policy: name,
            granule,
            granules: n,
        };
        // A store and a ring of their own per policy: the ring's order, and so the messages'
        // layouts, evolve from one round to the next the same way for every policy.
        let mut store = PageStore::new(2 * n + 2, granule)?;
        let mut producer = match SocketProducer::new(&mut store, 2 * n) {
            Ok(p) => p,
            Err(ProducerError::Vm(e @ zcio_vm::VmError::Unsupported { .. })) => {
                rows.push(row(&at, how, Err(e.to_string())));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let len = n * granule.bytes();
        let mut source = SocketSource::new(&mut producer, len, plan.producer_iterations + 1)?;
        let taken = series(plan, &mut source, &mut store, &at, policy);
        let finished = source
            .finish()
            .map_err(|e| at.fail(format!("writing: {e}")));
        rows.push(row(&at, how, Ok(taken?)));
        finished?;
        producer.close(&mut store)?;
    }
    Ok(rows)
}

/// The terminal summary of the producers' rows.
pub fn print(rows: &[ProducerRow]) {
    if rows.is_empty() {
        return;
    }
    println!("real producers: µs per message (median), reassembly / with the read or receive");
    for r in rows {
        let us = |x: Option<f64>| x.map_or("-".to_string(), crate::report::text::us);
        match &r.refused {
            Some(why) => println!(
                "{:<7} {:>3} {:>6} pages {:<9} not measured: {why}",
                r.producer, r.granule, r.pages, r.policy
            ),
            None => println!(
                "{:<7} {:>3} {:>6} pages {:<9} {:>10} / {:>10}  runs {:>5}  remapped {} of {}",
                r.producer,
                r.granule,
                r.pages,
                r.policy,
                us(r.reassemble_ns),
                us(r.cycle_ns),
                r.runs,
                r.remapped,
                r.iterations
            ),
        }
    }
    println!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_catches_a_wrong_stamp_a_wrong_word_and_a_wrong_length() {
        let len = 3 * PAGE - 8;
        let mut b = pattern(7, len);
        assert_eq!(verify(&b, 7, len), Ok(()));
        assert!(verify(&b, 8, len).unwrap_err().contains("page 0"));
        b[2 * PAGE] ^= 1;
        assert!(verify(&b, 7, len).unwrap_err().contains("page 2"));
        b[2 * PAGE] ^= 1;
        b[PAGE + 100] ^= 1;
        assert!(verify(&b, 7, len).unwrap_err().contains("sum"));
        assert!(verify(&b[..PAGE], 7, len).unwrap_err().contains("bytes"));
    }
}
