//! The command layer's error: one type, [`Error`], whose context names the step that failed
//! (`transfer: receiver: ...`); `zcio` shows it once (on stderr, and with `--json` as the one
//! JSON object on stdout).
//!
//! It takes what the command layer's `?` meets, any error of the libraries or the system, and
//! a message (`Err(format!(..).into())`, `.ok_or("...")?`) alike; [`Context`] adds the step.

use std::error::Error as StdError;
use std::fmt;

/// The result of the command layer and of the experiments it runs.
pub type Res<T> = Result<T, Error>;

/// An error of the command layer: what went wrong, with the steps it went through, outermost
/// first. `Display` shows them all on one line (`transfer: receiver: length ...`).
pub struct Error(anyhow::Error);

impl Error {
    /// An error of a type of its own, which [`Error::downcast_ref`] finds again (an error that
    /// came through `?` or `.into()` is kept as its message and its sources only).
    pub fn new<E: StdError + Send + Sync + 'static>(e: E) -> Error {
        Error(anyhow::Error::new(e))
    }

    /// An error that is only its message.
    pub fn msg(m: impl fmt::Display) -> Error {
        Error(anyhow::Error::msg(m.to_string()))
    }

    /// The same error, inside step `c`.
    pub fn context(self, c: impl fmt::Display) -> Error {
        Error(self.0.context(c.to_string()))
    }

    /// The error of type `E` this error is, inside any steps, if it was made by [`Error::new`].
    pub fn downcast_ref<E: fmt::Display + fmt::Debug + Send + Sync + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref::<E>()
    }
}

impl<E: Into<Box<dyn StdError + Send + Sync>>> From<E> for Error {
    fn from(e: E) -> Error {
        Error(anyhow::Error::from_boxed(e.into()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

/// Name the step a result's error happened in.
pub trait Context<T> {
    /// The error, inside step `c`.
    fn context(self, c: impl fmt::Display) -> Res<T>;
    /// The error, inside the step `c` names (worded only on error).
    fn with_context<C: fmt::Display>(self, c: impl FnOnce() -> C) -> Res<T>;
}

impl<T, E: Into<Error>> Context<T> for Result<T, E> {
    fn context(self, c: impl fmt::Display) -> Res<T> {
        self.map_err(|e| e.into().context(c))
    }
    fn with_context<C: fmt::Display>(self, c: impl FnOnce() -> C) -> Res<T> {
        self.map_err(|e| e.into().context(c()))
    }
}

/// A command that failed after it had a result to show: a transfer whose data differs, a soak
/// with failed cases. With `--json` the result is printed as the one object on stdout, with
/// the reason under `"error"` (see [`json_object`]); without, the command prints its summary
/// and the reason goes to stderr.
#[derive(Debug)]
pub struct FailedWith {
    /// The result object, as `--json` prints it on success.
    pub result: serde_json::Value,
    /// Why the command fails.
    pub reason: String,
}

impl fmt::Display for FailedWith {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl StdError for FailedWith {}

/// The JSON object that shows error `e` on stdout: the result a [`FailedWith`] in `e` carries
/// with `"error"` added, or `{"error": ...}`.
pub fn json_object(e: &Error) -> serde_json::Value {
    let msg = e.to_string();
    match e.downcast_ref::<FailedWith>() {
        Some(FailedWith { result, .. }) if result.is_object() => {
            let mut v = result.clone();
            v["error"] = msg.into();
            v
        }
        _ => serde_json::json!({ "error": msg }),
    }
}
