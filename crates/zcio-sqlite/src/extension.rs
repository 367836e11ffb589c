//! zcio's SQLite loadable extension (`crates/zcio-sqlite-ext`: this crate's VFS registered as
//! `zcio` in any SQLite program that loads it), built from this checkout for the programs that
//! test and measure it through the `sqlite3` shell.
//!
//! The extension reaches SQLite through the API table the loading program hands it, which
//! cannot share a build with the bundled SQLite the workspace links, so it lies outside the
//! workspace and is built by a cargo of its own: [`build`] runs
//! `cargo build --release --manifest-path crates/zcio-sqlite-ext/Cargo.toml` into
//! `target/sqlite-ext` (under `$CARGO_TARGET_DIR` where that is set), once per process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The extension's manifest in this checkout.
pub fn manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../zcio-sqlite-ext/Cargo.toml")
}

/// Where [`build`] builds: `$CARGO_TARGET_DIR/sqlite-ext`, or `target/sqlite-ext` in this
/// checkout.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) if !t.is_empty() => PathBuf::from(t).join("sqlite-ext"),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/sqlite-ext"),
    }
}

static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The extension's shared library, built (release profile) if it is not fresh: its path, or why
/// it could not be built. `$ZCIO_SQLITE_EXT`, where set, names a library built already, used as
/// it is.
pub fn build() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("ZCIO_SQLITE_EXT").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("ZCIO_SQLITE_EXT names no file: {}", p.display()))
        };
    }
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = built.as_ref() {
        return Ok(p.clone());
    }
    let manifest = manifest();
    if !manifest.is_file() {
        return Err(format!(
            "the extension's source is not here ({} is missing)",
            manifest.display()
        ));
    }
    let target = target_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .output()
        .map_err(|e| format!("could not run {}: {e}", cargo.to_string_lossy()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(30).collect();
        return Err(format!(
            "building the extension failed ({}):\n{}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    let lib = target.join("release/libzcio_sqlite_ext.so");
    if !lib.is_file() {
        return Err(format!("the build made no {}", lib.display()));
    }
    *built = Some(lib.clone());
    Ok(lib)
}
