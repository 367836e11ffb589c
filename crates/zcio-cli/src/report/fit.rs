//! Least-squares lines and robust summaries: the paper's `a·B + b` fits (§8.1) with their R²,
//! medians and spread.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A fitted line `y = slope·x + intercept` (for latencies: ns per byte and ns).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Line {
    /// Slope (ns per byte for latency against length).
    pub slope_ns_per_byte: f64,
    /// Intercept (ns).
    pub intercept_ns: f64,
    /// Coefficient of determination of the fit on its points (1 is perfect; `None` when the
    /// points do not vary, so that R² is undefined).
    pub r2: Option<f64>,
    /// Points the line was fitted to.
    pub n: usize,
}

impl Line {
    /// The line's value at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.slope_ns_per_byte * x + self.intercept_ns
    }

    /// A line given by its coefficients (no fit behind it: `r2` is `None`, `n` 0).
    pub fn new(slope: f64, intercept: f64) -> Line {
        Line {
            slope_ns_per_byte: slope,
            intercept_ns: intercept,
            r2: None,
            n: 0,
        }
    }
}

/// Why a fit could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    /// Fewer than two points, or fewer than two distinct x values.
    #[error(
        "a line needs at least two distinct x values (got {points} points, {distinct} distinct)"
    )]
    TooFewPoints {
        /// Points given.
        points: usize,
        /// Distinct x values among them.
        distinct: usize,
    },
    /// A point is NaN or infinite.
    #[error("point {index} is not finite: ({x}, {y})")]
    NotFinite {
        /// Index of the point.
        index: usize,
        /// Its x.
        x: f64,
        /// Its y.
        y: f64,
    },
}

/// Ordinary least squares of `y` on `x`, with R².
pub fn least_squares(points: &[(f64, f64)]) -> Result<Line, FitError> {
    weighted_least_squares(points, &vec![1.0; points.len()])
}

/// Least squares on relative error: each point weighted by 1/y², so that over lengths spanning
/// several decades every length counts alike (plain least squares would fit the longest
/// messages only). R² is the weighted one. Points with y ≤ 0 are refused as not finite.
pub fn relative_least_squares(points: &[(f64, f64)]) -> Result<Line, FitError> {
    if let Some((index, &(x, y))) = points
        .iter()
        .enumerate()
        .find(|(_, (x, y))| !x.is_finite() || !y.is_finite() || *y <= 0.0)
    {
        return Err(FitError::NotFinite { index, x, y });
    }
    let w: Vec<f64> = points.iter().map(|p| 1.0 / (p.1 * p.1)).collect();
    weighted_least_squares(points, &w)
}

/// Weighted least squares of `y` on `x` (weights positive), with the weighted R².
pub fn weighted_least_squares(points: &[(f64, f64)], w: &[f64]) -> Result<Line, FitError> {
    if let Some((index, &(x, y))) = points
        .iter()
        .enumerate()
        .find(|(_, (x, y))| !x.is_finite() || !y.is_finite())
    {
        return Err(FitError::NotFinite { index, x, y });
    }
    let n = points.len();
    let mut xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    if n < 2 || xs.len() < 2 || w.len() != n {
        return Err(FitError::TooFewPoints {
            points: n,
            distinct: xs.len(),
        });
    }
    // The sum over the points of `f(weight, point)`.
    let sum = |f: &dyn Fn(f64, (f64, f64)) -> f64| -> f64 {
        points.iter().zip(w).map(|(&p, &w)| f(w, p)).sum()
    };
    let sw: f64 = w.iter().sum();
    let mx = sum(&|w, p| w * p.0) / sw;
    let my = sum(&|w, p| w * p.1) / sw;
    let sxx = sum(&|w, p| w * (p.0 - mx).powi(2));
    let sxy = sum(&|w, p| w * (p.0 - mx) * (p.1 - my));
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let sst = sum(&|w, p| w * (p.1 - my).powi(2));
    let sse = sum(&|w, p| w * (p.1 - (slope * p.0 + intercept)).powi(2));
    Ok(Line {
        slope_ns_per_byte: slope,
        intercept_ns: intercept,
        r2: (sst > 0.0).then(|| 1.0 - sse / sst),
        n,
    })
}

/// R² of the line `slope·x + intercept` on `points` (`None` when y does not vary).
pub fn r_squared(points: &[(f64, f64)], slope: f64, intercept: f64) -> Option<f64> {
    let n = points.len() as f64;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sst: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    let sse: f64 = points
        .iter()
        .map(|p| (p.1 - (slope * p.0 + intercept)).powi(2))
        .sum();
    (sst > 0.0).then(|| 1.0 - sse / sst)
}

/// Median of `v` (NaN-free); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    quantile(v, 0.5)
}

/// The lowest and highest of `v` (`[inf, 0]` when empty: no spread).
pub fn spread(v: &[f64]) -> [f64; 2] {
    [
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(0.0, f64::max),
    ]
}

/// The `q` quantile of `v` by linear interpolation (0 ≤ q ≤ 1); `None` when empty.
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (s.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(s[lo] + (s[hi] - s[lo]) * (pos - lo as f64))
}

/// Geometric mean of positive values; `None` when empty or a value is not positive.
pub fn geometric_mean(v: &[f64]) -> Option<f64> {
    if v.is_empty() || v.iter().any(|x| *x <= 0.0 || !x.is_finite()) {
        return None;
    }
    Some((v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn recovers_an_exact_line() {
        let pts: Vec<_> = (0..10)
            .map(|i| (i as f64 * 4096.0, 0.06 * i as f64 * 4096.0 + 130.0))
            .collect();
        let l = least_squares(&pts).unwrap();
        assert!((l.slope_ns_per_byte - 0.06).abs() < 1e-12, "{l:?}");
        assert!((l.intercept_ns - 130.0).abs() < 1e-6, "{l:?}");
        assert!((l.r2.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(l.n, 10);
    }

    #[test]
    fn recovers_a_noisy_line_and_says_how_well() {
        // Deterministic uniform noise in [-1, 1) from the high bits of an LCG.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut noise = || {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        // 0.0221·B + 15 µs (the paper's copyout, in ns) with ±850 ns of noise (±5 %).
        let pts: Vec<_> = (1..=200)
            .map(|i| {
                let b = i as f64 * 1024.0;
                (b, 0.0221 * b + 15_000.0 + 850.0 * noise())
            })
            .collect();
        let l = least_squares(&pts).unwrap();
        assert!((l.slope_ns_per_byte / 0.0221 - 1.0).abs() < 0.05, "{l:?}");
        assert!((l.intercept_ns / 15_000.0 - 1.0).abs() < 0.02, "{l:?}");
        // Signal variance (0.0221 · 204800)² / 12 against noise variance 850² / 3: R² ≈ 0.88.
        let r2 = l.r2.unwrap();
        assert!(r2 > 0.8 && r2 < 0.95, "{r2}");
        // Pure noise around a constant: R² near zero.
        let flat: Vec<_> = (1..=200).map(|i| (i as f64, 100.0 + noise())).collect();
        let f = least_squares(&flat).unwrap();
        assert!(f.r2.unwrap() < 0.1, "{f:?}");
        assert!((f.intercept_ns - 100.0).abs() < 0.5);
    }

    #[test]
    fn refuses_degenerate_input() {
        assert_eq!(
            least_squares(&[(1.0, 2.0)]),
            Err(FitError::TooFewPoints {
                points: 1,
                distinct: 1
            })
        );
        assert_eq!(
            least_squares(&[(1.0, 2.0), (1.0, 3.0)]),
            Err(FitError::TooFewPoints {
                points: 2,
                distinct: 1
            })
        );
        assert!(matches!(
            least_squares(&[(1.0, 2.0), (2.0, f64::NAN)]),
            Err(FitError::NotFinite { index: 1, .. })
        ));
        // A constant y fits with slope 0 and an undefined R².
        let c = least_squares(&[(1.0, 5.0), (2.0, 5.0), (3.0, 5.0)]).unwrap();
        assert_eq!(
            (c.slope_ns_per_byte, c.intercept_ns, c.r2),
            (0.0, 5.0, None)
        );
    }

    #[test]
    fn relative_fit_weighs_every_decade_alike() {
        // 130 µs + 0.06 ns/B from 4 KiB to 16 MiB, with +10 % at the largest length only.
        let mut pts: Vec<(f64, f64)> = (12..=24)
            .map(|k| {
                let b = (1u64 << k) as f64;
                (b, 0.06 * b + 130_000.0)
            })
            .collect();
        let exact = relative_least_squares(&pts).unwrap();
        assert!((exact.slope_ns_per_byte - 0.06).abs() < 1e-9);
        assert!((exact.intercept_ns - 130_000.0).abs() < 1e-3);
        assert!((exact.r2.unwrap() - 1.0).abs() < 1e-12);
        pts.last_mut().unwrap().1 *= 1.1;
        let rel = relative_least_squares(&pts).unwrap();
        let plain = least_squares(&pts).unwrap();
        // The plain fit bends its intercept to the outlier much more than the relative one.
        let off = |l: &Line| (l.intercept_ns / 130_000.0 - 1.0).abs();
        assert!(off(&rel) < 0.02, "{rel:?}");
        assert!(off(&plain) > 2.0 * off(&rel), "{plain:?} against {rel:?}");
        assert!(matches!(
            relative_least_squares(&[(1.0, 1.0), (2.0, 0.0)]),
            Err(FitError::NotFinite { index: 1, .. })
        ));
        // Equal weights: the plain fit.
        let w = vec![2.0; pts.len()];
        let a = weighted_least_squares(&pts, &w).unwrap();
        assert!((a.slope_ns_per_byte - plain.slope_ns_per_byte).abs() < 1e-12);
    }

    #[test]
    fn summaries() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.9), Some(4.6));
        assert!((geometric_mean(&[1.0, 4.0]).unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(geometric_mean(&[1.0, 0.0]), None);
    }

    proptest! {
        #[test]
        fn any_line_is_recovered(slope in -10.0f64..10.0, icpt in -1e6f64..1e6, n in 3usize..50) {
            let pts: Vec<_> = (0..n).map(|i| (i as f64 * 100.0, slope * i as f64 * 100.0 + icpt)).collect();
            let l = least_squares(&pts).unwrap();
            prop_assert!((l.slope_ns_per_byte - slope).abs() <= 1e-9 * (1.0 + slope.abs()));
            prop_assert!((l.intercept_ns - icpt).abs() <= 1e-6 * (1.0 + icpt.abs()));
        }
    }
}
