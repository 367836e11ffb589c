//! The Python packages a test runs `python3` with: those importable already, and the others
//! installed once into a folder of the workspace's `target/` (`pip install --target`), which
//! the test puts on `PYTHONPATH`. A package that can be had neither way fails the test with
//! what pip said: the Python tests never skip.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether `python3` imports `module` with `PYTHONPATH` at `path`.
fn imports(module: &str, path: &std::ffi::OsStr) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .env("PYTHONPATH", path)
        .status()
        .is_ok_and(|s| s.success())
}

/// A `PYTHONPATH` under which `python3` imports every one of `packages` (import name, pip
/// name), with `first` ahead of it: the caller's `PYTHONPATH`, then `target/python-deps` where
/// a missing package is installed. Panics, saying what pip said, if one cannot be had.
pub fn path_with(first: &[&Path], packages: &[(&str, &str)]) -> std::ffi::OsString {
    let deps = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/python-deps");
    let mut dirs: Vec<PathBuf> = first.iter().map(|p| p.to_path_buf()).collect();
    dirs.extend(
        std::env::var_os("PYTHONPATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default(),
    );
    dirs.push(deps.clone());
    let path = std::env::join_paths(&dirs).expect("paths without ':'");
    let missing: Vec<&str> = packages
        .iter()
        .filter(|(module, _)| !imports(module, &path))
        .map(|(_, pip)| *pip)
        .collect();
    if !missing.is_empty() {
        let out = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
            ])
            .arg(&deps)
            .args(&missing)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success() && packages.iter().all(|(m, _)| imports(m, &path)),
            "the Python tests need {missing:?}, not importable here, and pip could not install \
             them into {}: {}",
            deps.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    path
}
