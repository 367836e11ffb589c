//! The rig's own checks: the message pattern, the pools, the evictor.

use super::pools::*;
use super::timing::*;
use super::*;

/// A sweep with warm caches that reports no progress.
fn warm_sweep(plan: &Plan, granule: Granule, layout: Layout) -> Result<Vec<Point>, BenchError> {
    sweep(plan, granule, layout, Caches::Warm, &mut |_| {})
}

#[test]
fn fill_and_check_agree_and_catch_a_wrong_word() {
    let mut b = vec![0u8; 4096 * 2];
    fill(&mut b[..4096], 7, 0);
    fill(&mut b[4096..], 7, 512);
    assert_eq!(check(&b, 7), Ok(()));
    b[4096 + 16] ^= 1;
    assert_eq!(check(&b, 7).unwrap_err().0, 4096 + 16);
    assert!(check(&b, 8).is_err());
}

#[test]
fn pools_report_blocks_for_the_sizes_they_hold() {
    assert_eq!(RandomPool::Bitmap.block(5, 64), Some(5));
    assert_eq!(RandomPool::SizeClasses.block(5, 65536), Some(16));
    assert_eq!(RandomPool::SizeClasses.block(257, 65536), None);
    assert_eq!(RandomPool::Buddy.block(100, 65536), Some(128));
    assert_eq!(RandomPool::Buddy.block(100, 200), None);
    assert_eq!(RandomPool::Buddy.block(1024, 65536), Some(1024));
    assert_eq!(RandomPool::Buddy.block(2048, 65536), None);
    assert_eq!(RandomPool::Bitmap.block(6144, 65536), Some(6144));
}

#[test]
fn full_sizes_are_about_eighty_and_hold_the_paper_ones() {
    let s = full_sizes_4k(&PAPER_RANDOM_SIZES);
    assert!((70..=90).contains(&s.len()), "{}", s.len());
    assert_eq!((s[0], *s.last().unwrap()), (1, 6144));
    assert!(PAPER_RANDOM_SIZES.iter().all(|x| s.contains(x)));
}

#[test]
fn block_maps_follow_the_bitmap_levels() {
    // The same frees per map bring size-class and bitmap maps to about the same level.
    let mut rng = SplitMix64::new(3);
    let cap = 4096;
    let mut bits = MapSeries::new(RandomPool::Bitmap, cap, 16, 16, 200).unwrap();
    let mut blocks = MapSeries::new(RandomPool::SizeClasses, cap, 16, 16, 200).unwrap();
    for _ in 0..10 {
        bits.next(&mut rng).unwrap();
        blocks.next(&mut rng).unwrap();
    }
    let (_, a, _) = bits.current(&mut rng);
    let (_, b, _) = blocks.current(&mut rng);
    assert!((a - b).abs() < 0.1, "{a} {b}");
    assert!(a < 0.8 && a > 0.4, "{a}");
}

/// A machine where a move call costs 2 µs and each granule in it 500 ns, and copying a
/// byte 0.05 ns: 4 KiB pages copy (205 ns a page), 2 MiB granules move (105 µs to copy).
fn made_up(granule: Granule) -> Calibration {
    Calibration {
        granule: granule.bytes(),
        move_call_ns: 2000.0,
        move_granule_ns: 500.0,
        copy_by_size: vec![(4096, 0.05), (1 << 30, 0.05)],
    }
}

#[test]
fn a_small_sweep_measures_every_case_and_checks_every_message() {
    let plan = Plan {
        sizes_4k: vec![1, 3],
        sizes_2m: vec![1],
        iterations: 2,
        capacity_4k: 1024,
        capacity_2m: 4,
        calibration: vec![made_up(Granule::Page), made_up(Granule::Huge)],
        ..Plan::smoke()
    };
    let mut calls = 0;
    for layout in Layout::ALL {
        let pts = sweep(&plan, Granule::Page, layout, Caches::Warm, &mut |_| {
            calls += 1
        })
        .unwrap();
        assert_eq!(pts.len(), 2);
        for p in &pts {
            assert_eq!(p.cases.len(), Case::ALL.len());
            for s in &p.cases {
                assert_eq!(s.ns.len(), 2);
                assert!(s.ns.iter().all(|x| x.is_finite() && *x > 0.0), "{s:?}");
            }
            // Every case but the copies and the adaptive one has a pool of its own.
            assert_eq!(p.pool.len(), Case::ALL.len() - 3);
            assert!(p.pool.iter().all(|s| s.ns.len() == 2));
            assert_eq!(p.adaptive, Some(Path::Copied), "{} pages", p.granules);
            assert_eq!(p.moved.moved + p.moved.copied, p.granules * 4096);
            if zcio_vm::VmRuntime::get().capabilities().swap {
                assert_eq!(p.copied, 0);
            }
            let calls = if layout == Layout::Scattered {
                p.granules
            } else {
                1
            };
            assert_eq!(p.moved.calls, calls);
        }
    }
    assert_eq!(calls, 4);
    let pts = warm_sweep(&plan, Granule::Huge, Layout::Scattered).unwrap();
    assert_eq!(pts[0].moved.moved + pts[0].moved.copied, 2 << 20);
    assert_eq!(pts[0].adaptive, Some(Path::Remapped));
    // Without a calibration there is no adaptive case, and the rest still runs.
    let plan = Plan {
        calibration: vec![],
        ..plan
    };
    let pts = warm_sweep(&plan, Granule::Page, Layout::Adjacent).unwrap();
    assert_eq!(
        (pts[0].cases.len(), pts[0].adaptive),
        (Case::ALL.len() - 1, None)
    );
}

#[test]
fn a_spoiled_message_fails_the_run() {
    for case in [
        Case::Memcpy,
        Case::MinimalSearch,
        Case::Buddy,
        Case::Copy,
        Case::Adaptive,
    ] {
        let plan = Plan {
            sizes_4k: vec![2],
            capacity_4k: 256,
            spoil: Some(case),
            calibration: vec![made_up(Granule::Page)],
            ..Plan::smoke()
        };
        let e = warm_sweep(&plan, Granule::Page, Layout::Scattered).unwrap_err();
        let BenchError::At { at, error } = e else {
            panic!("{case:?}: {e}")
        };
        assert!(at.contains("2 granules"), "{at}");
        match *error {
            BenchError::Corrupt {
                case: c, offset, ..
            } => assert_eq!((c, offset), (case.name(), 4096)),
            e => panic!("{case:?}: {e}"),
        }
    }
}

#[test]
fn a_page_the_kernel_would_not_move_rebuilds_the_rig_a_few_times_then_fails() {
    let plan = Plan {
        sizes_4k: vec![2, 3],
        capacity_4k: 256,
        inject_faults: 2,
        ..Plan::smoke()
    };
    let pts = warm_sweep(&plan, Granule::Page, Layout::Scattered).unwrap();
    assert_eq!((pts[0].rebuilds, pts[1].rebuilds), (2, 0));
    assert!(
        pts[0]
            .rebuild_reason
            .as_deref()
            .unwrap()
            .contains("would not move")
    );
    let plan = Plan {
        inject_faults: MAX_REBUILDS + 1,
        ..plan
    };
    let e = warm_sweep(&plan, Granule::Page, Layout::Scattered).unwrap_err();
    assert!(e.to_string().contains("would not move"), "{e}");
    let plan = Plan {
        capacity_4k: 1024,
        random_sizes: vec![4],
        regimes: vec![Regime {
            frees_per_map: 100,
            maps: 3,
        }],
        inject_faults: 1,
        ..Plan::smoke()
    };
    let s = random(&plan, RandomPool::Bitmap, &mut |_| {}).unwrap();
    let r: Vec<usize> = s[0].maps.iter().map(|m| m.rebuilds).collect();
    assert_eq!(r, [1, 0, 0]);
}

#[test]
fn random_maps_cover_levels_and_time_every_map() {
    let plan = Plan {
        capacity_4k: 65536,
        random_sizes: vec![4, 300],
        regimes: vec![Regime {
            frees_per_map: 600,
            maps: 6,
        }],
        random_iterations: 2,
        random_page_budget: 8,
        ..Plan::smoke()
    };
    for pool in RandomPool::ALL {
        let s = random(&plan, pool, &mut |_| {}).unwrap();
        let sizes: Vec<usize> = s.iter().map(|x| x.granules).collect();
        match pool {
            RandomPool::SizeClasses => assert_eq!(sizes, [4]),
            _ => assert_eq!(sizes, [4, 300]),
        }
        for series in &s {
            assert_eq!(series.maps.len(), 6);
            let levels: Vec<f64> = series.maps.iter().map(|m| m.allocation_level).collect();
            assert!(levels.windows(2).all(|w| w[1] <= w[0]), "{levels:?}");
            assert!(levels[0] > 0.5, "{levels:?}");
            for m in &series.maps {
                assert_eq!(m.pool_ns.len(), RANDOM_POOL_REPS);
                let want = if series.granules == 4 { 2 } else { 1 };
                assert_eq!(m.ns.len(), want);
            }
        }
    }
}

#[test]
fn with_whole_cycle_costs_the_adaptive_case_chooses_on_them() {
    // 2 MiB granules: moving in (2.5 µs) beats copying (105 µs), but a whole cycle costing
    // 200 µs a granule does not.
    let cycle = CycleCalibration {
        move_in: made_up(Granule::Huge),
        cycle_call_ns: 2000.0,
        cycle_granule_ns: 200_000.0,
    };
    let plan = Plan {
        sizes_2m: vec![1],
        iterations: 2,
        capacity_2m: 4,
        calibration: vec![made_up(Granule::Huge)],
        ..Plan::smoke()
    };
    let pts = warm_sweep(&plan, Granule::Huge, Layout::Scattered).unwrap();
    assert_eq!(pts[0].adaptive, Some(Path::Remapped));
    let plan = Plan {
        cycle: vec![cycle],
        ..plan
    };
    assert!(matches!(
        plan.policy(Granule::Huge),
        Some(Policy::AdaptiveCycle(_))
    ));
    let pts = warm_sweep(&plan, Granule::Huge, Layout::Scattered).unwrap();
    assert_eq!(pts[0].adaptive, Some(Path::Copied));
    assert_eq!(pts[0].adaptive_paths, (0, 2));
}
