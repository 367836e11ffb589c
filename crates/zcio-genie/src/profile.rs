//! Calibration: the cost of the primitives on this machine (paper 000, §7, Table 5), and the
//! thresholds derived from them. Every threshold the library uses comes from here; where a VM
//! operation costs more than copying the same bytes, the threshold says "copy".

use crate::error::{GenieError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use zcio_vm::remap::{Calibration, Granule};
use zcio_vm::staging::Staging;
use zcio_vm::{MapOptions, Mapping, VmRuntime, page_size};

/// Cost of one primitive: `per_call + per_unit * units` nanoseconds, with the spread of the samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Fixed cost per call, ns.
    pub per_call_ns: f64,
    /// Cost per unit (byte or page), ns.
    pub per_unit_ns: f64,
    /// Relative spread of the samples behind the larger measurement ((p90 - p10) / median).
    pub spread: f64,
}

impl Cost {
    /// Predicted cost of `units`.
    pub fn at(&self, units: f64) -> f64 {
        self.per_call_ns + self.per_unit_ns * units
    }
}

/// Thresholds derived from the costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Emulated copy outputs shorter than this are converted to copy (protecting and
    /// referencing pages costs more than copying them). `usize::MAX`: always copy.
    pub short_output_bytes: usize,
    /// Emulated copy inputs with fewer full pages than this copy instead of swapping.
    pub swap_min_pages: usize,
    /// Reverse copyout: a partial page holding at least this many bytes of input is completed
    /// with the application's bytes and swapped instead of copied out. `usize::MAX`: never.
    #[serde(default = "never")]
    pub reverse_copyout_bytes: usize,
}

fn never() -> usize {
    usize::MAX
}

impl Thresholds {
    /// The smallest thresholds: take the VM paths from one page up, reverse copyout just above
    /// half a page (the paper's setting), whatever the costs (`--force-zero-copy`).
    pub fn zero_copy(ps: usize) -> Thresholds {
        Thresholds {
            short_output_bytes: ps,
            swap_min_pages: 1,
            reverse_copyout_bytes: ps / 2 + 1,
        }
    }
}

/// What the VM primitives cost at 2 MiB (whole PMDs of transparent huge pages), and the
/// thresholds derived from them: Genie's primitives at the granule where they pay.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HugeCosts {
    /// Reference + write-protect an output range of whole PMDs and release it, per PMD.
    pub protect: Cost,
    /// Swap whole PMDs into an application buffer (`UFFDIO_MOVE`), per PMD.
    pub swap: Cost,
    /// One TCOW fault on a huge page (the PMD out, a 2 MiB copy, the copy in), per fault.
    pub tcow_fault_ns: f64,
    /// Emulated copy outputs of huge buffers shorter than this are copied. `usize::MAX`: always.
    pub short_output_bytes: usize,
    /// Emulated copy inputs with fewer whole PMDs than this copy instead of swapping.
    pub swap_min_pmds: usize,
}

/// A calibration profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Profile format version.
    pub version: u32,
    /// Whether this was a quick calibration (few samples).
    pub quick: bool,
    /// Kernel release the profile was measured on.
    pub kernel: String,
    /// Page size.
    pub page_size: usize,
    /// User-space copy, per byte (warm cache, up to 256 KiB).
    pub copy: Cost,
    /// Copy cost per byte by length: `(bytes, ns per byte)` for copies of `bytes` between two
    /// buffers of that size, each copied repeatedly, so that a length beyond the caches is paid
    /// at memory speed. Thresholds compare the VM paths with this, not with the warm `copy`.
    pub copy_by_size: Vec<(usize, f64)>,
    /// Reference + write-protect an output range and release it, per page.
    pub protect: Cost,
    /// Swap pages into an application buffer (`UFFDIO_MOVE`, two moves per page), per page.
    pub swap: Cost,
    /// One TCOW fault (write to a page under output: move out + copy in), per fault.
    pub tcow_fault_ns: f64,
    /// Derived thresholds.
    pub thresholds: Thresholds,
    /// Moving and copying whole granules (4 KiB, and 2 MiB where it could be measured), for
    /// reassemblers choosing between remapping and copying (paper 002).
    pub remap: Vec<Calibration>,
    /// The same primitives at 2 MiB, where huge pages and TCOW at 2 MiB are available here
    /// (`None` otherwise: every transfer takes the 4 KiB paths).
    pub huge: Option<HugeCosts>,
}

const VERSION: u32 = 4;

/// The pages of the large sample of the 4 KiB fits (copy, protect, swap).
const BIG_PAGES: usize = 64;

/// Environment variable naming the profile file.
pub const PROFILE_ENV: &str = "ZCIO_PROFILE";

fn median_spread(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v[v.len() / 2];
    let p10 = v[v.len() / 10];
    let p90 = v[(v.len() * 9) / 10];
    (m, if m > 0.0 { (p90 - p10) / m } else { 0.0 })
}

fn sample(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    try_sample(reps, || {
        f();
        Ok(())
    })
    .unwrap_or((0.0, 0.0))
}

/// [`sample`] of a step that can fail: the first failure ends the sampling and is returned.
fn try_sample(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<(f64, f64)> {
    f()?; // warm
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_nanos() as f64);
    }
    Ok(median_spread(v))
}

/// Median and spread of `reps` timings of a step that can fail.
fn try_timings(reps: usize, mut f: impl FnMut() -> Result<f64>) -> Result<(f64, f64)> {
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        v.push(f()?);
    }
    Ok(median_spread(v))
}

/// Fit per-call and per-unit cost from two sizes.
fn fit(small: (f64, f64), small_units: f64, large: (f64, f64), large_units: f64) -> Cost {
    let per_unit = ((large.0 - small.0) / (large_units - small_units)).max(0.0);
    Cost {
        per_call_ns: (small.0 - per_unit * small_units).max(0.0),
        per_unit_ns: per_unit,
        spread: large.1,
    }
}

impl Profile {
    /// Measure the primitives. `progress` is told the step being measured and the fraction done.
    pub fn calibrate(quick: bool, mut progress: impl FnMut(&str, f64)) -> Result<Profile> {
        let ps = page_size();
        let reps = if quick { 15 } else { 201 };
        let rt = VmRuntime::get();

        let (copy, copy_by_size) = Self::measure_copy(quick, reps, &mut progress)?;
        progress("protect", 0.25);
        let (protect, mut m) = Self::measure_protect(reps)?;
        progress("tcow fault", 0.5);
        let tcow_fault_ns = Self::measure_tcow_fault(reps, &mut m)?;
        progress("swap", 0.75);
        let swap = Self::measure_swap(reps)?;
        progress("2 MiB", 0.85);
        let huge = if rt.huge_tcow() {
            Some(Self::measure_huge(reps.min(31), &copy_by_size)?)
        } else {
            None
        };
        progress("remap", 0.9);
        let remap = [Granule::Page, Granule::Huge]
            .into_iter()
            .filter_map(|g| Calibration::measure(g).ok())
            .collect();
        progress("done", 1.0);

        let thresholds = Self::derive(ps, &copy_by_size, &protect, &swap);
        Ok(Profile {
            version: VERSION,
            quick,
            kernel: rustix::system::uname()
                .release()
                .to_string_lossy()
                .into_owned(),
            page_size: ps,
            copy,
            copy_by_size,
            protect,
            swap,
            tcow_fault_ns,
            thresholds,
            remap,
            huge,
        })
    }

    /// The copy: a fit of 64 bytes and [`BIG_PAGES`] pages in cache, and the per-byte cost by
    /// size from 4 KiB to 16 MiB (64 MiB when not quick).
    fn measure_copy(
        quick: bool,
        reps: usize,
        progress: &mut impl FnMut(&str, f64),
    ) -> Result<(Cost, Vec<(usize, f64)>)> {
        let ps = page_size();
        progress("copy", 0.0);
        let src = vec![7u8; BIG_PAGES * ps];
        let mut dst = vec![0u8; BIG_PAGES * ps];
        let c_small = sample(reps, || {
            dst[..64].copy_from_slice(std::hint::black_box(&src[..64]))
        });
        let c_large = sample(reps, || dst.copy_from_slice(std::hint::black_box(&src)));
        let copy = fit(c_small, 64.0, c_large, (BIG_PAGES * ps) as f64);
        drop((src, dst));
        let mut copy_by_size = Vec::new();
        let sizes: &[usize] = if quick {
            &[4 << 10, 1 << 20, 16 << 20]
        } else {
            &[4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
        };
        for (k, &n) in sizes.iter().enumerate() {
            progress("copy", 0.25 * k as f64 / sizes.len() as f64);
            let src = Mapping::anonymous(n, MapOptions::default())?;
            let mut dst = Mapping::anonymous(n, MapOptions::default())?;
            let mut s = src;
            s.as_mut_slice().fill(7);
            dst.as_mut_slice().fill(1);
            let r = if n >= 16 << 20 { reps.min(21) } else { reps };
            let (t, _) = sample(r, || {
                dst.as_mut_slice()
                    .copy_from_slice(std::hint::black_box(s.as_slice()))
            });
            copy_by_size.push((n, t / n as f64));
        }
        Ok((copy, copy_by_size))
    }

    /// Page referencing with write protection (TCOW's prepare step) and its release: a fit of
    /// 1 and [`BIG_PAGES`] pages. Returns the populated 4 KiB mapping measured, for the fault.
    fn measure_protect(reps: usize) -> Result<(Cost, Mapping)> {
        let ps = page_size();
        let rt = VmRuntime::get();
        let mut m = Mapping::anonymous(BIG_PAGES * ps, MapOptions::POPULATED_4K)?;
        m.as_mut_slice().fill(1);
        let one = m.range().sub(0, ps)?;
        let p_small = try_sample(reps, || {
            rt.reference_output(one, true)?.release();
            Ok(())
        })?;
        let all = m.range();
        let p_large = try_sample(reps, || {
            rt.reference_output(all, true)?.release();
            Ok(())
        })?;
        Ok((fit(p_small, 1.0, p_large, BIG_PAGES as f64), m))
    }

    /// One write to a page under output (median ns): a TCOW fault, or with sleep-on-write the
    /// writer's wait for the output's completion.
    fn measure_tcow_fault(reps: usize, m: &mut Mapping) -> Result<f64> {
        let ps = page_size();
        let rt = VmRuntime::get();
        let one = m.range().sub(0, ps)?;
        let mut faults = Vec::with_capacity(reps);
        if rt.capabilities().tcow == zcio_vm::runtime::TcowMode::UffdMove {
            for _ in 0..reps {
                let r = rt.reference_output(one, true)?;
                let t = Instant::now();
                m.as_mut_slice()[0] = 2; // one write fault, resolved by TCOW
                faults.push(t.elapsed().as_nanos() as f64);
                r.release();
            }
        } else {
            // Sleep on write: the writer waits for the output's completion, so it must be
            // another thread; what it costs is the wait (here, until a 200 us output ends).
            for _ in 0..reps.min(5) {
                let r = rt.reference_output(one, true)?;
                let page = &mut m.as_mut_slice()[..1];
                let waited = std::thread::scope(|s| {
                    let w = s.spawn(move || {
                        let t = Instant::now();
                        page[0] = 2;
                        t.elapsed().as_nanos() as f64
                    });
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    r.release();
                    w.join()
                });
                faults.push(waited.map_err(|_| {
                    GenieError::Protocol("calibration: the writing thread panicked".into())
                })?);
            }
        }
        Ok(median_spread(faults).0)
    }

    /// Page swapping from aligned staging into an application buffer: a fit of 1 and
    /// [`BIG_PAGES`] pages (priced above a copy where swaps are copies).
    fn measure_swap(reps: usize) -> Result<Cost> {
        let ps = page_size();
        let mut staging = Staging::new(BIG_PAGES * ps)?;
        let mut app = Mapping::anonymous(BIG_PAGES * ps, MapOptions::POPULATED_4K)?;
        let mut swap_once = |pages: usize| -> Result<f64> {
            let a = &mut app.as_mut_slice()[..pages * ps];
            let w = staging.window(a.as_ptr() as usize, a.len())?;
            w.fill(3); // the whole window, as an input writes it (untimed)
            let t = Instant::now();
            staging.deliver(a, 1)?;
            Ok(t.elapsed().as_nanos() as f64)
        };
        let s_small = try_timings(reps, || swap_once(1))?;
        let s_large = try_timings(reps, || swap_once(BIG_PAGES))?;
        Ok(if VmRuntime::get().capabilities().swap {
            fit(s_small, 1.0, s_large, BIG_PAGES as f64)
        } else {
            // Swaps are copies here: say so by costing them above a copy.
            Cost {
                per_call_ns: 1e12,
                per_unit_ns: 1e12,
                spread: 0.0,
            }
        })
    }

    /// The 2 MiB primitives: protect and release 1 and 8 PMDs, swap 1 and 8 PMDs in, one TCOW
    /// fault on a huge page (taken by this thread: TCOW never waits at 2 MiB).
    fn measure_huge(reps: usize, copy_by_size: &[(usize, f64)]) -> Result<HugeCosts> {
        use zcio_vm::page::HUGE_PAGE_SIZE as H;
        let rt = VmRuntime::get();
        let big = 8usize;
        let huge = MapOptions::POPULATED_2M;
        let mut m = Mapping::anonymous(big * H, huge)?;
        m.as_mut_slice().fill(1);
        let one = m.range().sub(0, H)?;
        let all = m.range();
        let p_small = try_sample(reps, || {
            rt.reference_output(one, true)?.release();
            Ok(())
        })?;
        let p_large = try_sample(reps, || {
            rt.reference_output(all, true)?.release();
            Ok(())
        })?;
        let protect = fit(p_small, 1.0, p_large, big as f64);
        let mut faults = Vec::with_capacity(reps);
        for k in 0..reps {
            let r = rt.reference_output(one, true)?;
            let t = Instant::now();
            m.as_mut_slice()[k % H] = 2; // one write fault, resolved by TCOW at 2 MiB
            faults.push(t.elapsed().as_nanos() as f64);
            r.release();
        }
        let (tcow_fault_ns, _) = median_spread(faults);
        let mut staging = Staging::new_huge(big * H)?;
        let mut app = Mapping::anonymous(big * H, huge)?;
        let mut swap_once = |pmds: usize| -> Result<f64> {
            let a = &mut app.as_mut_slice()[..pmds * H];
            let w = staging.window_huge(a.as_ptr() as usize, a.len())?;
            // The whole window, as an input writes it (untimed): an empty staging PMD would
            // move as a hole and time something no input does.
            w.fill(3);
            let t = Instant::now();
            staging.deliver_huge(a, 1)?;
            Ok(t.elapsed().as_nanos() as f64)
        };
        let s_small = try_timings(reps, || swap_once(1))?;
        let s_large = try_timings(reps, || swap_once(big))?;
        let swap = fit(s_small, 1.0, s_large, big as f64);
        let first = |vm: &Cost| {
            (1..=512usize)
                .find(|&p| vm.at(p as f64) < Self::copy_ns(copy_by_size, p * H))
                .unwrap_or(usize::MAX)
        };
        let short = first(&protect);
        Ok(HugeCosts {
            protect,
            swap,
            tcow_fault_ns,
            short_output_bytes: short.saturating_mul(H),
            swap_min_pmds: first(&swap),
        })
    }

    /// Predicted cost of copying `bytes`, from the per-size measurements (per-byte cost
    /// interpolated linearly in the logarithm of the length, held at the ends).
    pub fn copy_ns(table: &[(usize, f64)], bytes: usize) -> f64 {
        zcio_vm::remap::copy_ns_by_size(table, bytes)
    }

    /// Thresholds from costs: the smallest size at which the VM path is cheaper than copying,
    /// searched up to 1 GiB.
    pub fn derive(ps: usize, copy: &[(usize, f64)], protect: &Cost, swap: &Cost) -> Thresholds {
        let max_pages = (1usize << 30) / ps;
        let first = |vm: &dyn Fn(f64) -> f64| {
            let cheaper = |p: usize| vm(p as f64) < Self::copy_ns(copy, p * ps);
            // Pages 1..=4096 one by one, then doubling (the costs are smooth there).
            (1..=4096usize).find(|&p| cheaper(p)).or_else(|| {
                std::iter::successors(Some(8192usize), |p| Some(p * 2))
                    .take_while(|&p| p <= max_pages)
                    .find(|&p| cheaper(p))
            })
        };
        let short_output_bytes = first(&|p| protect.at(p)).map_or(usize::MAX, |p| p * ps);
        let swap_min_pages = first(&|p| swap.at(p)).unwrap_or(usize::MAX);
        // Reverse copyout of b bytes copies the other ps - b and swaps one page.
        let reverse_copyout_bytes = (ps / 2..=ps)
            .step_by(64)
            .find(|&b| Self::copy_ns(copy, ps - b) + swap.at(1.0) < Self::copy_ns(copy, b))
            .unwrap_or(usize::MAX);
        Thresholds {
            short_output_bytes,
            swap_min_pages,
            reverse_copyout_bytes,
        }
    }

    /// The remapping costs measured for `granule`, if they could be.
    pub fn remap_for(&self, granule: Granule) -> Option<&Calibration> {
        self.remap.iter().find(|c| c.granule == granule.bytes())
    }

    /// Where the profile is read from and written to by default: `$ZCIO_PROFILE`, else
    /// `$XDG_CACHE_HOME/zcio/profile.json`, else `~/.cache/zcio/profile.json`.
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os(PROFILE_ENV) {
            return PathBuf::from(p);
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("zcio").join("profile.json")
    }

    /// Write as JSON.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| GenieError::io("create profile directory", e))?;
        }
        let s = serde_json::to_string_pretty(self).expect("profile serializes");
        std::fs::write(path, s).map_err(|e| GenieError::io("write profile", e))
    }

    /// Read a JSON profile; a profile of another version or page size is refused.
    pub fn load(path: &Path) -> Result<Profile> {
        let s = std::fs::read_to_string(path).map_err(|e| GenieError::io("read profile", e))?;
        let p: Profile = serde_json::from_str(&s).map_err(|e| {
            GenieError::arg(
                "profile",
                format!("{} is not a zcio profile: {e}", path.display()),
            )
        })?;
        if p.version != VERSION || p.page_size != page_size() {
            return Err(GenieError::arg(
                "profile",
                format!(
                    "{} is version {} for {}-byte pages; need version {VERSION} for {}",
                    path.display(),
                    p.version,
                    p.page_size,
                    page_size()
                ),
            ));
        }
        Ok(p)
    }

    /// The profile in force with the smallest thresholds ([`Thresholds::zero_copy`]): the VM
    /// paths from the first page up, whatever they cost here, so that their cost can be seen.
    pub fn zero_copy() -> Arc<Profile> {
        static ZERO: OnceLock<Arc<Profile>> = OnceLock::new();
        ZERO.get_or_init(|| {
            let mut p = (*Profile::current()).clone();
            p.thresholds = Thresholds::zero_copy(page_size());
            if let Some(h) = &mut p.huge {
                h.short_output_bytes = zcio_vm::page::HUGE_PAGE_SIZE;
                h.swap_min_pmds = 1;
            }
            Arc::new(p)
        })
        .clone()
    }

    /// A profile that copies everywhere (every threshold at its largest), for where nothing
    /// could be measured: zcio then takes its copy paths, which need no measurement to be
    /// right. `why` is kept in [`Profile::kernel`]'s place for whoever reads the profile.
    pub fn copying(why: &str) -> Profile {
        let zero = Cost {
            per_call_ns: 0.0,
            per_unit_ns: 0.0,
            spread: 0.0,
        };
        // Priced far above any copy, as where swaps are copies (finite: the profile saves).
        let never = Cost {
            per_call_ns: 1e12,
            per_unit_ns: 1e12,
            spread: 0.0,
        };
        Profile {
            version: VERSION,
            quick: true,
            kernel: format!("not measured: {why}"),
            page_size: page_size(),
            copy: zero,
            copy_by_size: Vec::new(),
            protect: never,
            swap: never,
            tcow_fault_ns: 1e12,
            thresholds: Thresholds {
                short_output_bytes: usize::MAX,
                swap_min_pages: usize::MAX,
                reverse_copyout_bytes: usize::MAX,
            },
            remap: Vec::new(),
            huge: None,
        }
    }

    /// Make `p` the profile in force in this process, if none is yet; returns whether it took.
    /// (A program that calibrates once for many processes installs the result here and hands
    /// the file to the others, which [`Profile::load`] it.)
    pub fn install(p: Profile) -> bool {
        CURRENT.set(Arc::new(p)).is_ok()
    }

    /// The profile in force in this process: one installed ([`Profile::install`]), else the
    /// default file ([`Profile::default_path`]) if it loads, else a quick calibration made now,
    /// else (where even that fails) [`Profile::copying`]; kept for the life of the process.
    /// Endpoints take it when made; [`crate::memnet::MemnetEndpoint::set_profile`] gives one
    /// another.
    pub fn current() -> Arc<Profile> {
        CURRENT
            .get_or_init(|| {
                Arc::new(
                    Profile::load(&Self::default_path())
                        .or_else(|_| Profile::calibrate(true, |_, _| {}))
                        .unwrap_or_else(|e| Profile::copying(&e.to_string())),
                )
            })
            .clone()
    }
}

static CURRENT: OnceLock<Arc<Profile>> = OnceLock::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copying_profile_copies_everywhere_and_saves() {
        let p = Profile::copying("no measurement");
        assert_eq!(p.thresholds.short_output_bytes, usize::MAX);
        assert_eq!(p.thresholds.swap_min_pages, usize::MAX);
        assert!(p.kernel.contains("no measurement"));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.json");
        p.save(&f).unwrap();
        assert_eq!(Profile::load(&f).unwrap(), p);
    }

    #[test]
    fn copy_wins_when_vm_costs_more() {
        let copy = [(4096, 0.04), (1 << 30, 0.04)];
        let expensive = Cost {
            per_call_ns: 1e9,
            per_unit_ns: 1e9,
            spread: 0.0,
        };
        let t = Profile::derive(4096, &copy, &expensive, &expensive);
        assert_eq!(t.short_output_bytes, usize::MAX);
        assert_eq!(t.swap_min_pages, usize::MAX);
        let cheap = Cost {
            per_call_ns: 1000.0,
            per_unit_ns: 50.0,
            spread: 0.0,
        };
        let t = Profile::derive(4096, &copy, &cheap, &cheap);
        // 1000 + 50p < 163.84p  <=>  p > 8.8
        assert_eq!(t.swap_min_pages, 9);
        assert_eq!(t.short_output_bytes, 9 * 4096);
    }

    #[test]
    fn copy_cost_follows_the_length() {
        // Cheap in cache, dearer beyond it: the VM path wins only for long transfers.
        let copy = [(4096, 0.02), (1 << 20, 0.02), (16 << 20, 0.08)];
        assert_eq!(Profile::copy_ns(&copy, 4096), 0.02 * 4096.0);
        assert_eq!(Profile::copy_ns(&copy, 64 << 20), 0.08 * (64 << 20) as f64);
        let mid = Profile::copy_ns(&copy, 4 << 20) / (4 << 20) as f64;
        assert!((mid - 0.05).abs() < 1e-9, "{mid}");
        let vm = Cost {
            per_call_ns: 2000.0,
            per_unit_ns: 250.0,
            spread: 0.0,
        };
        let t = Profile::derive(4096, &copy, &vm, &vm);
        let bytes = t.swap_min_pages * 4096;
        assert!(bytes > 1 << 20 && bytes < 16 << 20, "{t:?}");
    }

    #[test]
    fn quick_calibration_measures_and_round_trips() {
        let p = Profile::calibrate(true, |_, _| {}).unwrap();
        assert!(
            p.copy.per_unit_ns > 0.0 && p.copy.per_unit_ns < 10.0,
            "{:?}",
            p.copy
        );
        assert!(p.tcow_fault_ns > 0.0);
        // Remapping costs for 4 KiB granules always (anonymous memory; moves are copies
        // where the kernel cannot move pages, and are costed as such).
        let c = p.remap_for(Granule::Page).expect("4 KiB remap costs");
        assert_eq!(c.granule, page_size());
        assert!(c.move_call_ns + c.move_granule_ns > 0.0, "{c:?}");
        assert!(c.copy_by_size.iter().all(|(_, x)| *x > 0.0), "{c:?}");
        assert!(
            p.remap
                .iter()
                .all(|c| c.granule == page_size() || c.granule == 2 << 20)
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.json");
        p.save(&f).unwrap();
        assert_eq!(Profile::load(&f).unwrap(), p);
        // A profile of the previous version (no remapping costs) is refused, not half-read.
        let mut old = serde_json::to_value(&p).unwrap();
        old["version"] = 3.into();
        old.as_object_mut().unwrap().remove("remap");
        std::fs::write(&f, old.to_string()).unwrap();
        assert!(Profile::load(&f).is_err());
        std::fs::write(&f, "{}").unwrap();
        assert!(
            Profile::load(&f)
                .unwrap_err()
                .to_string()
                .contains("not a zcio profile")
        );
    }
}
