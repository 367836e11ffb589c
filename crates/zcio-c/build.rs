//! Writes `zcio.pc` beside the library cargo builds (`target/<profile>/`), so that
//! `PKG_CONFIG_PATH=target/<profile> pkg-config --cflags --libs zcio` gives a C compiler this
//! checkout's header and library.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // OUT_DIR is target/<profile>/build/zcio-c-<hash>/out: the library goes to target/<profile>.
    let Some(libdir) = out.ancestors().nth(3) else {
        return;
    };
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let include = manifest.join("include");
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets it");
    let pc = format!(
        "# zcio's C interface, as built in this checkout (written by crates/zcio-c/build.rs).\n\
         libdir={libdir}\n\
         includedir={include}\n\
         \n\
         Name: zcio\n\
         Description: Copy-avoiding I/O for Linux: channels by name, huge-page buffers, fbuf paths, the Internet checksum\n\
         Version: {version}\n\
         Cflags: -I${{includedir}}\n\
         Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lzcio_c\n\
         Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc\n",
        libdir = libdir.display(),
        include = include.display(),
    );
    if let Err(e) = std::fs::write(libdir.join("zcio.pc"), pc) {
        println!(
            "cargo:warning=zcio.pc not written to {}: {e}",
            libdir.display()
        );
    }
}
