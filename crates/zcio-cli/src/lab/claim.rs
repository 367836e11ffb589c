//! The claims the papers make that zcio measures: each with the paper's number, this run's,
//! and whether they agree, for the table that opens the report.
//!
//! Every experiment computes its claims (in its own folder) from the measured fields of
//! `results.json` alone, so `zcio report --from` gives the same table.

/// Whether this run's number agrees with the paper's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The measurement supports the claim.
    Agrees,
    /// The measurement contradicts it.
    Differs,
    /// This run could not measure it (what is missing says why).
    NotMeasurable,
}

impl Verdict {
    /// `Agrees` when `holds`, `Differs` when not, `NotMeasurable` when unknown.
    pub fn of(holds: Option<bool>) -> Verdict {
        match holds {
            Some(true) => Verdict::Agrees,
            Some(false) => Verdict::Differs,
            None => Verdict::NotMeasurable,
        }
    }

    /// The table's word for it.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Agrees => "agrees",
            Verdict::Differs => "differs",
            Verdict::NotMeasurable => "not measurable here",
        }
    }
}

/// Where the report shows a claim's numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// The first heading whose text starts with this.
    Heading(&'static str),
    /// The figure of this file stem.
    Figure(&'static str),
}

/// One claim of a paper, measured.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The paper (`000` … `004`).
    pub paper: &'static str,
    /// What the paper claims, in a few words.
    pub claim: String,
    /// The paper's number.
    pub paper_value: String,
    /// This run's number.
    pub measured: String,
    /// Whether they agree.
    pub verdict: Verdict,
    /// Why, in one short phrase.
    pub why: String,
    /// Where the report shows it.
    pub shown: Shown,
}

/// `a` over `b` as a ratio, `None` unless both are finite and `b` is positive.
pub fn over(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b > 0.0).then_some(a / b)
}

/// A ratio as the table writes it (`1.23×`), or `not measured`.
pub fn times(r: Option<f64>) -> String {
    r.map_or_else(|| "not measured".into(), |r| format!("{r:.2}×"))
}

/// A ratio judged against `limit`, as [`times`] does, with a third decimal where two would
/// show it equal to the limit it is not (1.104× against 1.1, not 1.10×).
pub fn times_near(r: Option<f64>, limit: f64) -> String {
    match r {
        Some(x) if x != limit && format!("{x:.2}") == format!("{limit:.2}") => format!("{x:.3}×"),
        _ => times(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_near_its_limit_shows_the_digit_that_tells_them_apart() {
        assert_eq!(times_near(Some(1.1037), 1.1), "1.104×");
        assert_eq!(times_near(Some(1.0961), 1.1), "1.096×");
        assert_eq!(times_near(Some(1.1), 1.1), "1.10×");
        assert_eq!(times_near(Some(1.1337), 1.1), "1.13×");
        assert_eq!(times_near(None, 1.1), "not measured");
    }

    #[test]
    fn ratios_need_two_finite_numbers_and_a_positive_divisor() {
        assert_eq!(over(6.0, 3.0), Some(2.0));
        assert_eq!(over(6.0, -3.0), None);
        assert_eq!(over(f64::NAN, 3.0), None);
        assert_eq!(times(Some(1.234)), "1.23×");
        assert_eq!(times(None), "not measured");
        assert_eq!(Verdict::of(None).word(), "not measurable here");
        assert_eq!(Verdict::of(Some(false)), Verdict::Differs);
    }
}
