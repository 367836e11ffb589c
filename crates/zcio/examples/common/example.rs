//! What every example shares: its result type, the byte-for-byte check, and its `main` together
//! with the test `cargo test` runs it as.

/// An example's result: any error, said in its message.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Fail with the first difference if `got` is not `want`; `what` names what was checked.
#[allow(dead_code)] // not every example checks bytes against a whole copy
pub fn same(what: &str, got: &[u8], want: &[u8]) -> Result<()> {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        return Err(format!(
            "{what}: {} bytes, expected {}; first difference at {at:?}",
            got.len(),
            want.len()
        )
        .into());
    }
    Ok(())
}

/// The example's `main`, which runs `$run`, and its test `$test`, which runs it under
/// `cargo test` and fails with the error `$run` returns.
macro_rules! main_and_test {
    ($test:ident, $run:path) => {
        fn main() -> Result<()> {
            $run()
        }

        #[test]
        fn $test() {
            if let Err(e) = $run() {
                panic!("{e}");
            }
        }
    };
}
pub(crate) use main_and_test;
