//! The C programs of `c/`, compiled against `include/zcio.h` and the shared library cargo built
//! for this test, run as separate processes that find each other by name: the sender and the
//! receiver (emulated copy, the sender overwriting its buffer at once, every byte checked),
//! 64 MiB between them, an fbuf path between two programs, and every bad argument answered
//! with its status. Where the C compiler has AddressSanitizer (and UndefinedBehaviorSanitizer)
//! the programs run under them too. Valgrind is not used: rustix, beneath zcio, reads the vDSO
//! that valgrind hides from the program, and the program dies at its first system call
//! (rustix issue 1559).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The C programs, built plain and, where the compiler can, sanitized.
struct Programs {
    dir: PathBuf,
    libdir: PathBuf,
    /// Why the sanitized builds are missing, where they are.
    unsanitized_why: Option<String>,
}

/// Every C program of `c/`: each is compiled (so that none rots), `bench` alone is not run
/// here (it measures; the README says how).
const SOURCES: [&str; 5] = ["sender", "receiver", "bad_args", "fbuf_path", "bench"];

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding the shared library cargo built with this test: the test binary is
/// `<target>/<profile>/deps/c_programs-<hash>`, and the library is built beside it (cargo
/// copies it one directory up only for `cargo build`).
fn libdir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("the test binary lies in a directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        if dir.join("libzcio_c.so").exists() {
            return dir.to_path_buf();
        }
    }
    panic!(
        "libzcio_c.so is not beside the test binary ({}) nor one directory up: cargo builds \
         the crate's cdylib for its tests; was crate-type changed?",
        exe.display()
    );
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Compile `c/<name>.c` into `out`, with `extra` flags.
fn compile(name: &str, out: &Path, libdir: &Path, extra: &[&str]) -> Result<(), String> {
    let src = crate_dir().join("c").join(format!("{name}.c"));
    let mut cmd = Command::new(cc());
    cmd.args([
        "-std=c11",
        "-D_POSIX_C_SOURCE=200809L",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-O2",
    ])
    .args(["-g", "-fno-omit-frame-pointer"])
    .args(extra)
    .arg("-I")
    .arg(crate_dir().join("include"))
    .arg(&src)
    .arg("-o")
    .arg(out)
    .arg(format!("-L{}", libdir.display()))
    .arg(format!("-Wl,-rpath,{}", libdir.display()))
    .args(["-lzcio_c", "-lpthread"]);
    let o = cmd
        .output()
        .map_err(|e| format!("{} cannot be run: {e} (set CC to a C compiler)", cc()))?;
    if !o.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}):\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(())
}

const SANITIZE: [&str; 1] = ["-fsanitize=address,undefined"];

/// Whether this compiler builds and runs a sanitized program here; why not, where not.
fn sanitizers_work(dir: &Path) -> Result<(), String> {
    let src = dir.join("probe.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\nint main(void) { free(malloc(8)); return 0; }\n",
    )
    .map_err(|e| e.to_string())?;
    let exe = dir.join("probe");
    let o = Command::new(cc())
        .args(SANITIZE)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .map_err(|e| format!("{} cannot be run: {e}", cc()))?;
    if !o.status.success() {
        return Err(format!(
            "{} -fsanitize=address,undefined fails here: {}",
            cc(),
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    let o = Command::new(&exe).output().map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!(
            "a program built with -fsanitize=address does not run here ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(())
}

fn programs() -> &'static Programs {
    static P: OnceLock<Programs> = OnceLock::new();
    P.get_or_init(|| {
        let libdir = libdir();
        let dir = libdir.join("zcio-c-programs");
        std::fs::create_dir_all(&dir).expect("a directory for the C programs");
        for name in SOURCES {
            if let Err(e) = compile(name, &dir.join(name), &libdir, &[]) {
                panic!("{e}");
            }
        }
        let unsanitized_why = match sanitizers_work(&dir) {
            Ok(()) => {
                for name in ["sender", "receiver", "bad_args"] {
                    let out = dir.join(format!("{name}-sanitized"));
                    if let Err(e) = compile(name, &out, &libdir, &SANITIZE) {
                        panic!("{e}");
                    }
                }
                None
            }
            Err(why) => Some(why),
        };
        Programs {
            dir,
            libdir,
            unsanitized_why,
        }
    })
}

impl Programs {
    /// The command running program `name`, sanitized or not.
    fn command(&self, name: &str, sanitized: bool) -> Command {
        let exe = if sanitized {
            self.dir.join(format!("{name}-sanitized"))
        } else {
            self.dir.join(name)
        };
        let mut c = Command::new(exe);
        if sanitized {
            // zcio may handle SIGSEGV itself (the protection fallback of emulated copy).
            c.env(
                "ASAN_OPTIONS",
                "handle_segv=0:detect_leaks=1:abort_on_error=0",
            )
            .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
            .env("ZCIO_C_SANITIZED", "1");
        }
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }

    /// The builds to run: plain, and sanitized where they could be made (or why not, said).
    fn builds(&self) -> Vec<bool> {
        match &self.unsanitized_why {
            None => vec![false, true],
            Some(why) => {
                // No capability of the probe's covers a compiler's sanitizers: run plain, and
                // say so.
                eprintln!("the C programs run without AddressSanitizer here: {why}");
                vec![false]
            }
        }
    }
}

/// A channel or path name of its own for each run.
fn fresh_name(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "zcio-c-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Wait for `child` (named `what`) at most `limit`; killed past it. Its output, whatever the
/// end.
fn finish(mut child: Child, what: &str, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let o = child.wait_with_output().expect("output of a killed child");
                panic!(
                    "{what} did not end within {limit:?}; killed. stdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    }
    child.wait_with_output().expect("the child's output")
}

/// `o` of `what`: a success, or a failure with what it printed.
fn succeeded(o: &Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what} failed ({}). stdout:\n{out}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Run the receiver and the sender of `count` messages of `size` bytes as two processes that
/// meet by a name; what each printed.
fn exchange(p: &Programs, sanitized: bool, size: &str, count: u64) -> (String, String) {
    let name = fresh_name("channel");
    let args = [name.as_str(), size, &count.to_string()];
    let receiver = p
        .command("receiver", sanitized)
        .args(args)
        .spawn()
        .expect("start the receiver");
    // Started on its own; it waits for the receiver to listen (up to 30 s).
    let sender = p
        .command("sender", sanitized)
        .args(args)
        .spawn()
        .expect("start the sender");
    let limit = Duration::from_secs(120);
    let s = finish(sender, "the sender", limit);
    let r = finish(receiver, "the receiver", limit);
    let what = format!("{size} × {count}, sanitized: {sanitized}");
    let r_out = succeeded(&r, &format!("the receiver ({what})"));
    let s_out = succeeded(&s, &format!("the sender ({what})"));
    (s_out, r_out)
}

#[test]
fn c_sender_and_receiver_meet_by_name_and_emulated_copy_keeps_the_bytes_sent() {
    let p = programs();
    for sanitized in p.builds() {
        // Below a page, pages, and a message of 2 MiB pages; each overwritten at the sender
        // right after its send.
        for (size, count) in [("100", 4), ("64k", 16), ("2m", 4)] {
            let (s, r) = exchange(p, sanitized, size, count);
            let want = format!("receiver: {count} messages of ");
            assert!(r.contains(&want), "the receiver said: {r}");
            assert!(r.contains("checked byte for byte"), "{r}");
            assert!(s.contains("the receiver got them as sent"), "{s}");
        }
    }
}

#[test]
fn c_programs_pass_64_mib_checked_byte_for_byte() {
    let p = programs();
    // 64 MiB in 1 MiB messages, then one message of 64 MiB; every byte checked. The speed is
    // the benchmarks' business, printed here only.
    for (size, count, bytes) in [("1m", 64u64, 1u64 << 20), ("64m", 1, 64 << 20)] {
        let (s, r) = exchange(p, false, size, count);
        let want = format!("receiver: {count} message");
        assert!(
            r.contains(&want) && r.contains(&format!("of {bytes} bytes")),
            "{r}"
        );
        eprint!("{s}{r}");
    }
}

#[test]
fn every_bad_argument_is_answered_with_its_status() {
    let p = programs();
    for sanitized in p.builds() {
        let child = p
            .command("bad_args", sanitized)
            .arg(fresh_name("bad"))
            .spawn()
            .expect("start bad_args");
        let o = finish(child, "bad_args", Duration::from_secs(60));
        let out = succeeded(&o, &format!("bad_args (sanitized: {sanitized})"));
        assert!(
            out.contains("every bad argument answered with its status"),
            "{out}"
        );
        if sanitized {
            eprint!("{out}");
        }
    }
}

#[test]
fn an_fbuf_path_runs_between_two_c_programs() {
    let p = programs();
    let name = fresh_name("path");
    let count = "300"; // 300 messages up to 60 KiB through a path of 1 MiB: fbufs are reused
    let origin = p
        .command("fbuf_path", false)
        .args(["originator", &name, count])
        .spawn()
        .expect("start the originator");
    let receiver = p
        .command("fbuf_path", false)
        .args(["receiver", &name, count])
        .spawn()
        .expect("start the receiver");
    let limit = Duration::from_secs(60);
    let r = finish(receiver, "the fbuf receiver", limit);
    let o = finish(origin, "the fbuf originator", limit);
    let r = succeeded(&r, "the fbuf receiver");
    let o = succeeded(&o, "the fbuf originator");
    assert!(
        r.contains("300 messages read in place and checked byte for byte"),
        "{r}"
    );
    assert!(o.contains("every fbuf back"), "{o}");
}

#[test]
fn pkg_config_gives_the_header_and_the_library() {
    let p = programs();
    // build.rs writes zcio.pc where `cargo build` puts the library: <target>/<profile>.
    let profile_dir = p
        .libdir
        .parent()
        .expect("deps lies in the profile's directory");
    let pc = std::fs::read_to_string(profile_dir.join("zcio.pc"))
        .expect("build.rs writes zcio.pc beside the library");
    let include = crate_dir().join("include");
    assert!(
        pc.contains(&format!("includedir={}", include.display())),
        "{pc}"
    );
    assert!(
        pc.contains(&format!("libdir={}", profile_dir.display())),
        "{pc}"
    );
    let flags = match Command::new("pkg-config")
        .args(["--cflags", "--libs", "zcio"])
        .env("PKG_CONFIG_PATH", profile_dir)
        .output()
    {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => panic!(
            "pkg-config --cflags --libs zcio failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            // No capability of the probe's covers pkg-config: the file's contents were
            // checked above; the compile with its flags is left out, and said so.
            eprintln!("pkg-config cannot be run here ({e}): zcio.pc checked, not used");
            return;
        }
    };
    assert!(
        flags.contains(&format!("-I{}", include.display())) && flags.contains("-lzcio_c"),
        "pkg-config says: {flags}"
    );
    // A program compiled with those flags, and run (linked against the library built with
    // this test, which `cargo test` leaves in deps/ alone).
    let src = p.dir.join("pkg_config_probe.c");
    std::fs::write(
        &src,
        "#include <zcio.h>\n#include <stdio.h>\n\
         int main(void) { uint16_t s; const uint8_t d[2] = {0xff, 0xff};\n\
         if (zcio_checksum(d, 2, &s) != ZCIO_OK || s != 0) return 1;\n\
         puts(zcio_status_string(ZCIO_OK)); return 0; }\n",
    )
    .expect("write the probe");
    let exe = p.dir.join("pkg_config_probe");
    let mut cc = Command::new(cc());
    cc.arg(&src).arg("-o").arg(&exe);
    cc.arg(format!("-L{}", p.libdir.display()))
        .arg(format!("-Wl,-rpath,{}", p.libdir.display()));
    cc.args(flags.split_whitespace());
    let o = cc.output().expect("run the C compiler");
    assert!(
        o.status.success(),
        "{cc:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = Command::new(&exe).output().expect("run the probe");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "ZCIO_OK: success\n",
        "{o:?}"
    );
}
