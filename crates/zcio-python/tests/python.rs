//! Runs the Python tests (`tests/test_zcio.py`) with the machine's `python3` against the
//! extension module this build made: the library is copied under the module's name
//! (`zcio.abi3.so`) into a temporary directory put first on `PYTHONPATH`, numpy beside it
//! ([`zcio_testkit::python`]).

use std::path::PathBuf;
use std::process::Command;

/// The extension module `cargo test` built for this test, beside its executable (in
/// `target/<profile>/deps`: the library is a dependency of this test, built with every crate
/// type it has).
fn built_module() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's executable");
    let lib = exe
        .parent()
        .expect("target/<profile>/deps")
        .join("libzcio_python.so");
    assert!(
        lib.exists(),
        "{} is missing: cargo builds the extension module with this package's tests",
        lib.display()
    );
    lib
}

#[test]
fn the_python_tests_pass_against_the_module_this_build_made() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(built_module(), tmp.path().join("zcio.abi3.so")).unwrap();
    let tests = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let path = zcio_testkit::python::path_with(&[tmp.path(), &tests], &[("numpy", "numpy")]);
    let out = Command::new("python3")
        .args(["-m", "unittest", "-v", "test_zcio"])
        .current_dir(&tests)
        .env("PYTHONPATH", path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}");
    assert!(out.status.success(), "the Python tests failed:\n{err}");
    assert!(!err.contains("skipped"), "a Python test skipped:\n{err}");
}
