//! The mechanisms a process turns off, for comparing paths or where one misbehaves: chosen by
//! the program before zcio's first use ([`configure`]), else read from `$ZCIO_VM_DISABLE`
//! ([`DISABLE_ENV`]: how the `zcio` command and the tests choose them). [`current`] says what
//! is in force and where it came from.
//!
//! ```
//! use zcio_vm::config::{self, Disabled};
//!
//! // At the start of a program that wants the 4 KiB paths only:
//! let _ = config::configure(Disabled { huge_pages: true, ..Disabled::default() });
//! assert!(config::current().disabled.huge_pages);
//! ```

use crate::error::{Result, VmError};
use std::sync::OnceLock;

/// Environment variable read where the program has not called [`configure`]: a
/// comma-separated list of `uffd` (no userfaultfd at all), `move` (no `UFFDIO_MOVE`), `huge`
/// (no 2 MiB paths: as where transparent huge pages are off) and `procmap` (no
/// `PROCMAP_QUERY` in the writable check).
pub const DISABLE_ENV: &str = "ZCIO_VM_DISABLE";

/// Mechanisms turned off in this process. Each one off makes zcio take the fallback it takes
/// where the kernel lacks the mechanism, and report it so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Disabled {
    /// No userfaultfd: protection by `mprotect` and `SIGSEGV`, swaps by copy.
    pub userfaultfd: bool,
    /// No `UFFDIO_MOVE`: TCOW by copy, swaps by copy.
    pub page_moves: bool,
    /// No transparent huge pages asked for, and no 2 MiB paths.
    pub huge_pages: bool,
    /// No `PROCMAP_QUERY` to check that a buffer is writable (the populating check instead).
    pub procmap_query: bool,
}

impl Disabled {
    /// What `value`, a list as [`DISABLE_ENV`] takes, turns off; an unknown word is an error
    /// naming it.
    pub fn parse(value: &str) -> Result<Disabled> {
        let mut d = Disabled::default();
        for w in value.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match w {
                "uffd" => d.userfaultfd = true,
                "move" => d.page_moves = true,
                "huge" => d.huge_pages = true,
                "procmap" => d.procmap_query = true,
                _ => {
                    return Err(VmError::Misuse {
                        what: "a mechanism to disable other than uffd, move, huge or procmap",
                    });
                }
            }
        }
        Ok(d)
    }
}

/// Where the configuration in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The program's call to [`configure`].
    Program,
    /// `$ZCIO_VM_DISABLE` (or nothing turned off, where it is unset).
    Environment,
}

/// The configuration in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// What is turned off.
    pub disabled: Disabled,
    /// Where that was said.
    pub source: Source,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Turn mechanisms off for the life of this process. Call it before anything else of zcio:
/// once zcio has read its configuration (at its first use) the call is refused, with an error,
/// and what is in force stays.
pub fn configure(disabled: Disabled) -> Result<()> {
    let want = Config {
        disabled,
        source: Source::Program,
    };
    match CONFIG.set(want) {
        Ok(()) => Ok(()),
        Err(_) if CONFIG.get() == Some(&want) => Ok(()),
        Err(_) => Err(VmError::Misuse {
            what: "configuring zcio after its first use (call config::configure first)",
        }),
    }
}

/// The configuration in force: the program's, else the environment's (read once, at zcio's
/// first use; an unreadable value turns nothing off and is reported by
/// [`crate::VmRuntime::capabilities`]'s reasons).
pub fn current() -> Config {
    *CONFIG.get_or_init(|| Config {
        disabled: std::env::var(DISABLE_ENV)
            .ok()
            .and_then(|v| Disabled::parse(&v).ok())
            .unwrap_or_default(),
        source: Source::Environment,
    })
}

/// Who turned mechanisms off, for the reasons zcio reports: the program or the variable.
pub fn said_by() -> String {
    match current().source {
        Source::Program => "the program (zcio_vm::config::configure)".into(),
        Source::Environment => DISABLE_ENV.to_string(),
    }
}

/// What is turned off in this process ([`current`]).
pub fn disabled() -> Disabled {
    current().disabled
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_parses_and_an_unknown_word_is_named() {
        let d = Disabled::parse(" uffd, huge ,").unwrap();
        assert!(d.userfaultfd && d.huge_pages && !d.page_moves && !d.procmap_query);
        assert_eq!(Disabled::parse("").unwrap(), Disabled::default());
        let e = Disabled::parse("uffd,thp").unwrap_err();
        assert!(e.to_string().contains("uffd, move, huge or procmap"), "{e}");
    }
}
