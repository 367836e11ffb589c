//! What a remapped message costs over its whole life (paper 002, §4.4: the reassembled range is
//! the application's until it gives it back, and the device needs its pages again for the next
//! message).
//!
//! Moving a message's pages into the remap space is half the work: when the message is freed
//! they move back out into their slots and its run goes back to the pool, so that the producer
//! can fill the slots again. A copied message leaves its slots holding their pages; freeing it
//! only gives its run back. A policy that weighs the move-in alone against a copy favours
//! remapping by the cost of the move-out; [`CycleCalibration`] times the whole cycle (search,
//! move in, move out, free), per call and per granule, and [`Policy::AdaptiveCycle`] chooses on
//! it.

use crate::pool::BitmapPool;
use crate::reassemble::{Calibration, Policy, Reassembler, VmmrError};
use std::time::Instant;
use zcio_vm::remap::{Granule, PageStore, Slot};

/// The costs of a remapped message's whole cycle, beside the move-in and copy costs of
/// [`Calibration`].
#[derive(Debug, Clone, PartialEq)]
pub struct CycleCalibration {
    /// Moving in alone, and copying (the copy's cost per byte by length).
    pub move_in: Calibration,
    /// A whole cycle's cost per run of adjacent granules (a move call in and one out, the
    /// search and the free), beyond its granules (ns).
    pub cycle_call_ns: f64,
    /// Each granule of a whole cycle (moved in and back out) (ns).
    pub cycle_granule_ns: f64,
}

impl CycleCalibration {
    /// Measure the whole cycle on this machine beside `move_in` (costs measured before, or
    /// [`Calibration::measure`]d now): a reassembler that always remaps, over a store of a
    /// few granules, reassembling and freeing one granule and a run of adjacent granules (64
    /// pages or 4 huge pages). Each is timed in 15 rounds after an untimed one; of three
    /// passes the lowest median is kept (a disturbance lasting a pass only adds time).
    pub fn measure(move_in: Calibration, granule: Granule) -> Result<CycleCalibration, VmmrError> {
        let run = match granule {
            Granule::Page => 64,
            Granule::Huge => 4,
        };
        let g = granule.bytes();
        let mut store = PageStore::new(run, granule)?;
        let mut r = Reassembler::with_policy(BitmapPool::new(run), granule, Policy::Remap)?;
        let mut slots: Vec<Slot> = (0..run).filter_map(|i| store.take_index(i)).collect();
        for s in &slots {
            store.bytes_mut(s)?.fill(1);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (mut one, mut many) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..3 {
            for (n, best) in [(1, &mut one), (run, &mut many)] {
                let mut times = Vec::with_capacity(16);
                for round in 0..16 {
                    let rest = slots.split_off(n);
                    let t = Instant::now();
                    let m = r
                        .reassemble(&mut store, slots, n * g)
                        .map_err(|e| e.error)?;
                    slots = r.free(&mut store, m).map_err(|e| e.error)?;
                    let ns = t.elapsed().as_nanos() as f64;
                    slots.extend(rest);
                    if round > 0 {
                        times.push(ns);
                    }
                }
                *best = best.min(median(times));
            }
        }
        let per_granule = ((many - one) / (run - 1) as f64).max(0.0);
        Ok(CycleCalibration {
            move_in,
            cycle_call_ns: (one - per_granule).max(0.0),
            cycle_granule_ns: per_granule,
        })
    }

    /// Predicted time of the whole cycle of `granules` granules in `calls` runs (ns).
    pub fn remap_ns(&self, granules: usize, calls: usize) -> f64 {
        calls as f64 * self.cycle_call_ns + granules as f64 * self.cycle_granule_ns
    }

    /// Predicted time to move `granules` granules in `calls` calls, in only (ns).
    pub fn move_in_ns(&self, granules: usize, calls: usize) -> f64 {
        self.move_in.remap_ns(granules, calls)
    }

    /// Predicted time to copy `bytes` (ns).
    pub fn copy_ns(&self, bytes: usize) -> f64 {
        self.move_in.copy_ns(bytes)
    }
}
