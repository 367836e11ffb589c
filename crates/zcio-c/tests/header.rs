//! The checked-in header is the one cbindgen makes from this crate now: a change to the C
//! interface that was not carried into `include/zcio.h` fails here, with the command that
//! makes it anew.

use std::path::Path;

#[test]
fn the_checked_in_header_is_the_one_cbindgen_makes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .expect("crates/zcio-c/cbindgen.toml is readable and valid");
    let bindings = cbindgen::Builder::new()
        .with_src(dir.join("src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen parses crates/zcio-c/src");
    let mut made = Vec::new();
    bindings.write(&mut made);
    let made = String::from_utf8(made).expect("cbindgen writes UTF-8");
    let path = dir.join("include/zcio.h");
    if std::env::var_os("ZCIO_BLESS").is_some() {
        std::fs::write(&path, &made).expect("write include/zcio.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != made {
        let first = checked_in
            .lines()
            .zip(made.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| checked_in.lines().count().min(made.lines().count()));
        panic!(
            "crates/zcio-c/include/zcio.h is stale: it differs from what cbindgen makes of \
             crates/zcio-c/src from line {}:\n  checked in: {:?}\n  made now:   {:?}\n\
             Make it anew with `ZCIO_BLESS=1 cargo test -p zcio-c --test header` and commit it.",
            first + 1,
            checked_in.lines().nth(first).unwrap_or("(end of file)"),
            made.lines().nth(first).unwrap_or("(end of file)"),
        );
    }
    // The header names every function the library exports, each with the prefix.
    for f in [
        "zcio_channel_send",
        "zcio_fbuf_recv",
        "zcio_checksum",
        "zcio_last_error",
    ] {
        assert!(made.contains(&format!("{f}(")), "the header lacks {f}");
    }
}
