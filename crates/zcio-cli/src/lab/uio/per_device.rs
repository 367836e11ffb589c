//! The report's parts for paper 004's per-device series (each table on a memory-backed loop
//! device of its own, as the paper's were each on a disk of its own): where the tables lay or
//! why the series is missing, its finding, its figures and table. Every sentence is computed
//! from the measured fields.

use crate::lab::uio::devices::{Devices, LOOP_MEMORY, ONE_DEVICE};
use crate::lab::uio::measure::{Row, UioSection};
use crate::lab::uio::render::{max_n, row_at, scaling_chart, variants_table};
use crate::report::doc::Block;
use crate::report::plot::Style;
use crate::report::text::{figure, table_of};

/// The series' devices, where it ran.
fn ran(u: &UioSection) -> Option<&Devices> {
    u.devices.as_ref().filter(|d| d.missing.is_none())
}

/// The cache states the series ran in, cold (the data from the devices) first.
pub(super) fn caches(u: &UioSection) -> Vec<&'static str> {
    ["cold", "warm"]
        .into_iter()
        .filter(|c| {
            u.rows
                .iter()
                .any(|r| r.placement == LOOP_MEMORY && r.cache == *c)
        })
        .collect()
}

/// What `cache` means in the series.
fn cache_meaning(cache: &str) -> &'static str {
    if cache == "cold" {
        "cold: each table dropped from its ext4's page cache, its data then read from the memory-backed device"
    } else {
        "warm: the tables in the page cache"
    }
}

/// The end of the section's placement sentence: where the per-device series' tables lay, or
/// why it is missing (nothing for a run from before the series).
pub(super) fn placement(u: &UioSection) -> String {
    let Some(d) = &u.devices else {
        return String::new();
    };
    if let Some(why) = &d.missing {
        return format!(
            "; the per-device series (each table on a memory-backed loop device of its own) is missing: {why}"
        );
    }
    format!(
        "; in the per-device series each is on an {} file system of its own on one of {} {} ({} MiB each; memory-backed: no seek and no disk latency; the loop driver reading its image with direct I/O on {} of {}{})",
        d.fs.as_deref().unwrap_or("unknown"),
        d.count,
        d.backing.as_deref().unwrap_or("devices"),
        d.device_bytes >> 20,
        d.direct_io,
        d.count,
        match &d.layer_direct_refused {
            Some(w) => format!("; the layer's reads there through the page cache: {w}"),
            None => "; the layer's reads there O_DIRECT".into(),
        }
    ) + if caches(u).contains(&"cold") {
        "; cold there means dropped from each ext4's page cache, the data then read from the memory-backed device"
    } else {
        ""
    }
}

/// `a`'s queries per second over `b`'s, as the report writes a ratio.
fn ratio(a: Option<&Row>, b: Option<&Row>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}×", a.queries_per_s / b.queries_per_s),
        _ => "not measured".into(),
    }
}

/// The series' finding: the layer against the kernel's reads at the largest N (and at one),
/// each table on a device of its own, beside the same on one device; or why it is missing.
pub fn finding(u: &UioSection) -> Option<String> {
    let d = u.devices.as_ref()?;
    if let Some(why) = &d.missing {
        return Some(format!(
            "User-level I/O with each table on a device of its own (paper 004's 16 disks): not measured here: {why}."
        ));
    }
    let n = max_n(u);
    let cache = *caches(u).first()?;
    let at = |v: &str, n: usize| row_at(u, LOOP_MEMORY, v, cache, n);
    let one = |v: &str| row_at(u, ONE_DEVICE, v, cache, n);
    let (Some(k), Some(l)) = (at("kernel", n), at("uio", n)) else {
        return None;
    };
    let n1 = u
        .rows
        .iter()
        .filter(|r| r.placement == LOOP_MEMORY && r.cache == cache)
        .map(|r| r.queries)
        .min()
        .unwrap_or(n);
    Some(format!(
        "User-level I/O with each table on a device of its own (paper 004's 16 disks; here {} memory-backed loop devices, an {} file system on each; {}): at N = {n} the layer (ring initiation, registered buffers) runs {:.1} queries/s against the kernel's buffered reads' {:.1}: {:.2}× (at N = {n1}: {}; with all {n} tables on one device, same cache: {}). With system-call initiation the layer runs at {} the kernel's reads, with the engine's pool on it {}. The time for N = {n} over the time for N = {n1}: {:.2} for the kernel, {:.2} for the layer (1 is perfect scaling; on the paper's one CPU and 16 disks the kernel levelled off near 9 queries, the layer past 13).",
        d.count,
        d.fs.as_deref().unwrap_or("unknown"),
        cache_meaning(cache),
        l.queries_per_s,
        k.queries_per_s,
        l.over_kernel,
        ratio(at("uio", n1), at("kernel", n1)),
        ratio(one("uio"), one("kernel")),
        ratio(at("uio_syscall", n), Some(k)),
        ratio(at("uio_pool", n), Some(k)),
        k.over_one,
        l.over_one,
    ))
}

/// The smallest measured N at which `variant`'s queries per second reach 90 % of its highest
/// over the measured N (where its throughput levels off), each table on a device of its own.
pub(super) fn levels_off(u: &UioSection, variant: &str, cache: &str) -> Option<usize> {
    let rows: Vec<&Row> = u
        .rows
        .iter()
        .filter(|r| r.placement == LOOP_MEMORY && r.variant == variant && r.cache == cache)
        .filter(|r| r.queries_per_s.is_finite())
        .collect();
    let best = rows
        .iter()
        .map(|r| r.queries_per_s)
        .fold(f64::NAN, f64::max);
    rows.iter()
        .filter(|r| r.queries_per_s >= 0.9 * best)
        .map(|r| r.queries)
        .min()
}

/// The figure of the series in `cache`, as the claims table names it.
pub(super) fn figure_id(cache: &str) -> &'static str {
    if cache == "cold" {
        "uio-devices-cold"
    } else {
        "uio-devices-warm"
    }
}

/// The series' figures (queries per second against N, per variant, with the kernel's reads on
/// one device dashed beside them) and table, where it ran.
pub(super) fn blocks(u: &UioSection) -> Vec<Block> {
    let Some(d) = ran(u) else {
        return Vec::new();
    };
    let mut b = Vec::new();
    for cache in caches(u).into_iter().rev() {
        let mut chart = scaling_chart(
            u,
            LOOP_MEMORY,
            cache,
            &format!("Each table on a device of its own, {cache}: queries per second"),
            true,
        );
        let mut kernel = scaling_chart(u, ONE_DEVICE, cache, "", true)
            .series
            .into_iter()
            .next()
            .filter(|s| !s.points.is_empty());
        if let Some(k) = kernel.as_mut() {
            k.name = "kernel, one device".into();
            k.style = Style::Dashed;
            chart.series.push(k.clone());
        }
        b.push(figure(
            figure_id(cache),
            format!(
                "Each table on a device of its own ({}; Figure 5's setting): queries per second against N, per variant, the {} tables on {} memory-backed loop devices, an {} file system on each; dashed: the kernel's reads with all tables on one device. Where a line levels off, more queries bring no more throughput.",
                cache_meaning(cache),
                max_n(u),
                d.count,
                d.fs.as_deref().unwrap_or("unknown"),
            ),
            chart,
        ));
    }
    b.push(variants_table(u, LOOP_MEMORY));
    b.push(against_one_device(u));
    b
}

/// Per variant, cache and N: queries per second with each table on a device of its own over
/// the same with all on one device.
fn against_one_device(u: &UioSection) -> Block {
    let rows: Vec<(&Row, Option<&Row>)> = u
        .rows
        .iter()
        .filter(|r| r.placement == LOOP_MEMORY)
        .map(|r| (r, row_at(u, ONE_DEVICE, &r.variant, &r.cache, r.queries)))
        .collect();
    table_of(
        "Each table on a memory-backed device of its own against all tables on one device: queries per second, same variant, cache state and N",
        &[
            "cache",
            "N",
            "variant",
            "queries/s, own devices",
            "queries/s, one device",
            "own over one",
        ],
        &rows,
        |(r, one)| {
            vec![
                r.cache.clone(),
                r.queries.to_string(),
                r.variant.replace('_', " "),
                format!("{:.1}", r.queries_per_s),
                one.map_or("not measured".into(), |o| format!("{:.1}", o.queries_per_s)),
                ratio(Some(r), *one),
            ]
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::claim::Verdict;
    use crate::lab::uio::claims::per_device_claim;

    /// A section of N = 1, 2, 4, 8, 16 with the one-device kernel and layer at 100 queries/s
    /// throughout, and the per-device kernel's and layer's rates `kernel` and `layer` cold.
    fn section(devices: Option<Devices>, kernel: [f64; 5], layer: [f64; 5]) -> UioSection {
        let ns = [1, 2, 4, 8, 16];
        let mut rows = Vec::new();
        let mut add = |placement: &str, variant: &str, qps: [f64; 5]| {
            for (k, n) in ns.into_iter().enumerate() {
                let seconds = n as f64 / qps[k];
                rows.push(serde_json::json!({
                    "variant": variant, "placement": placement, "cache": "cold", "queries": n,
                    "seconds": seconds, "seconds_spread": [seconds, seconds],
                    "queries_per_s": qps[k], "bytes_per_s": 1.0, "cpu_user_s": 0.0,
                    "cpu_sys_s": 0.0, "over_one": seconds / (1.0 / qps[0]),
                    "over_kernel": 1.0, "requests": 0, "bytes_copied": 0, "bytes_fetched": 0,
                }));
            }
        };
        add(ONE_DEVICE, "kernel", [100.0; 5]);
        add(ONE_DEVICE, "uio", [100.0; 5]);
        if devices.as_ref().is_some_and(|d| d.missing.is_none()) {
            add(LOOP_MEMORY, "kernel", kernel);
            add(LOOP_MEMORY, "uio", layer);
        }
        let mut u = crate::lab::uio::section_of(rows);
        for r in &mut u.rows {
            r.over_kernel = r.queries_per_s / kernel_rate(&kernel, &r.placement, r.queries);
        }
        u.devices = devices;
        u
    }

    fn kernel_rate(kernel: &[f64; 5], placement: &str, n: usize) -> f64 {
        if placement == ONE_DEVICE {
            100.0
        } else {
            kernel[n.trailing_zeros() as usize]
        }
    }

    fn ran() -> Devices {
        Devices {
            placement: LOOP_MEMORY.into(),
            count: 16,
            backing: Some("loop devices, each over an image file in tmpfs at /dev/shm".into()),
            fs: Some("ext4".into()),
            device_bytes: 47 << 20,
            direct_io: 16,
            layer_direct_refused: None,
            setup_s: 0.5,
            missing: None,
        }
    }

    #[test]
    fn a_layer_that_gains_after_the_kernel_levels_off_agrees_with_figure_5() {
        let u = section(
            Some(ran()),
            [100.0, 150.0, 195.0, 200.0, 200.0],
            [100.0, 190.0, 300.0, 380.0, 420.0],
        );
        assert_eq!(levels_off(&u, "kernel", "cold"), Some(4));
        assert_eq!(levels_off(&u, "uio", "cold"), Some(8));
        let c = per_device_claim(&u, 2);
        assert_eq!(c.verdict, Verdict::Agrees, "{c:?}");
        assert!(
            c.measured.starts_with(
                "kernel levels off at N = 4, layer levels off at N = 8; 2.10× at 16, cold, 16"
            ),
            "{}",
            c.measured
        );
        let f = finding(&u).unwrap();
        assert!(
            f.contains("420.0 queries/s against the kernel's buffered reads' 200.0: 2.10×"),
            "{f}"
        );
        assert!(
            f.contains("at N = 1: 1.00×; with all 16 tables on one device, same cache: 1.00×"),
            "{f}"
        );
        let p = placement(&u);
        assert!(
            p.contains("one of 16 loop devices") && p.contains("direct I/O on 16 of 16"),
            "{p}"
        );
        assert!(
            p.contains("cold there means dropped from each ext4's page cache"),
            "{p}"
        );
        // The cold figure, the table of its rows and the one against one device.
        assert_eq!(blocks(&u).len(), 3);
    }

    #[test]
    fn a_slower_layer_or_one_still_rising_with_the_kernel_differs() {
        let u = section(
            Some(ran()),
            [100.0, 150.0, 195.0, 250.0, 400.0],
            [50.0, 80.0, 120.0, 200.0, 300.0],
        );
        let c = per_device_claim(&u, 2);
        assert_eq!(c.verdict, Verdict::Differs);
        assert!(
            c.measured
                .contains("kernel still rising at 16, layer still rising at 16"),
            "{}",
            c.measured
        );
        assert_eq!(
            c.why,
            "the layer is slower than the kernel's reads at N = 16"
        );
        let u = section(Some(ran()), [400.0; 5], [500.0; 5]);
        let c = per_device_claim(&u, 2);
        assert_eq!(c.verdict, Verdict::Differs);
        assert_eq!(
            c.why,
            "the layer levels off no later than the kernel, on 2 CPUs"
        );
    }

    #[test]
    fn a_missing_series_says_why_and_an_older_run_says_nothing() {
        let u = section(
            Some(Devices::missing("losetup: not root")),
            [1.0; 5],
            [1.0; 5],
        );
        let c = per_device_claim(&u, 2);
        assert_eq!(c.verdict, Verdict::NotMeasurable);
        assert_eq!(c.why, "losetup: not root");
        assert!(
            finding(&u)
                .unwrap()
                .ends_with("not measured here: losetup: not root.")
        );
        assert!(placement(&u).ends_with("is missing: losetup: not root"));
        assert!(blocks(&u).is_empty());
        let u = section(None, [1.0; 5], [1.0; 5]);
        assert_eq!(per_device_claim(&u, 2).verdict, Verdict::NotMeasurable);
        assert_eq!(finding(&u), None);
        assert_eq!(placement(&u), "");
        // An older results.json: rows without a placement are the one-device series'.
        let mut v = serde_json::to_value(&u).unwrap();
        for r in v["rows"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("placement");
        }
        v.as_object_mut().unwrap().remove("devices");
        let back: UioSection = serde_json::from_value(v).unwrap();
        assert!(back.rows.iter().all(|r| r.placement == ONE_DEVICE));
        assert!(back.devices.is_none());
    }
}
