//! The runner of the fuzz targets (`arbtest`): the regression seeds of a target replayed
//! first, then a search for a time budget, or the replay of one seed.
//!
//! `$ZCIO_FUZZ_MS` sets the budget (default 1000 ms, the short run of every test run;
//! `ZCIO_FUZZ_MS=600000` searches for ten minutes). A failure prints its seed, which
//! `$ZCIO_FUZZ_SEED` replays. Arbtest keeps no corpus: the seeds that once found a bug go in the
//! target's regression list, replayed every run.

pub use arbtest::arbitrary::{self, Result, Unstructured};

/// Environment variable setting the time budget of a search, in milliseconds.
pub const BUDGET_ENV: &str = "ZCIO_FUZZ_MS";
/// Environment variable naming the seed to replay (hexadecimal, as a failure prints it).
pub const SEED_ENV: &str = "ZCIO_FUZZ_SEED";

/// The time budget of a fuzz target in milliseconds: `$ZCIO_FUZZ_MS`, 1000 by default.
pub fn budget_ms() -> u64 {
    std::env::var(BUDGET_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// The seed a fuzz target replays, from `$ZCIO_FUZZ_SEED` (hexadecimal, `0x` or not).
pub fn seed() -> Option<u64> {
    std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
}

/// Check `property`: first with each seed of `regressions`, then for the budget of
/// [`budget_ms`] with fresh seeds, or with the seed [`seed`] replays. A failure panics with
/// the seed that found it.
pub fn fuzz(regressions: &[u64], mut property: impl FnMut(&mut Unstructured<'_>) -> Result<()>) {
    for &s in regressions {
        arbtest::arbtest(&mut property).seed(s).run();
    }
    let mut test = arbtest::arbtest(property).budget_ms(budget_ms());
    if let Some(s) = seed() {
        test = test.seed(s);
    }
    test.run();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_regression_seed_is_tried() {
        let mut runs = 0;
        let mut sizes = Vec::new();
        // Each seed's low 32 bits are the size of its input.
        fuzz(&[0x0000_0000_0000_1000, 0x9e37_79b9_0000_0400], |u| {
            runs += 1;
            sizes.push(u.len());
            Ok(())
        });
        assert!(runs >= 2, "{runs} runs");
        assert_eq!(&sizes[..2], &[0x1000, 0x400]);
    }
}
