//! The VFS as a loadable extension, in the `sqlite3` shell (a process of its own, SQLite of its
//! own): a workload through `zcio` gives what the shell's own VFS gives, a database written by
//! one is read by the other, and the errors of a missing, read-only or corrupt file are
//! SQLite's own. The shell must be installed (`.ci/run` installs it): without it these tests
//! fail, saying so.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The extension, built once for the tests of this binary; `None` where the layer cannot run
/// here (no io_uring: skipped, as the other layer tests are).
fn ext() -> Option<&'static Path> {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    let lib = LIB.get_or_init(|| {
        zcio_sqlite::extension::build().unwrap_or_else(|e| panic!("the extension: {e}"))
    });
    if zcio_vm::direct::DirectRing::new(2, None, None).is_err() {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::IoUring,
            "the extension's layer needs io_uring",
        );
        return None;
    }
    Some(lib)
}

/// What the shell printed.
struct Out {
    stdout: String,
    stderr: String,
    ok: bool,
}

/// Run the `sqlite3` shell on `script` (its standard input), with `args` before it.
fn shell(args: &[&str], script: &str) -> Out {
    let mut child = Command::new("sqlite3")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "the sqlite3 shell cannot run here ({e}): these tests need it \
                 (`apt-get install sqlite3`, which .ci/run does where it is missing)"
            )
        });
    let mut stdin = child.stdin.take().expect("piped");
    let script = script.to_string();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(script.as_bytes());
    });
    let out = child.wait_with_output().expect("the shell ran");
    writer.join().expect("the script was written");
    Out {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        ok: out.status.success(),
    }
}

/// `file:` URI of `path` through `vfs` (`None`: the shell's own), with `mode` if given.
fn uri(path: &Path, vfs: Option<&str>, mode: Option<&str>) -> String {
    let mut q: Vec<String> = Vec::new();
    if let Some(m) = mode {
        q.push(format!("mode={m}"));
    }
    if let Some(v) = vfs {
        q.push(format!("vfs={v}"));
    }
    format!("file:{}?{}", path.display(), q.join("&"))
}

/// The shell's script that loads the extension and opens `uri`.
fn open(lib: &Path, uri: &str) -> String {
    format!(
        ".bail on\n.load {}\n.open '{uri}'\n.vfsinfo\n",
        lib.display()
    )
}

const WRITE: &str = "
pragma page_size = 4096;
create table kv (id integer primary key, k text not null, v integer, pad text);
create index kv_k on kv (k);
";

/// The queries both VFSs must answer alike, on the workload's database.
const QUERIES: &str = "
select 'indexed', count(*), sum(v), min(k), max(k) from kv where k between 'key012345' and 'key045678';
select 'full', count(*), sum(v), sum(length(pad)), max(k) from kv where v % 7 = 3;
select 'all', count(*), sum(v), total(length(pad)), sum(id * v) % 1000000007 from kv;
pragma integrity_check;
";

/// The workload's writes: 100 000 rows in ten transactions, an update and a delete, each
/// followed by the rows it changed.
fn workload() -> String {
    let mut s = String::from(WRITE);
    for t in 0..10 {
        let (lo, hi) = (t * 10_000 + 1, (t + 1) * 10_000);
        s.push_str(&format!(
            "begin;\ninsert into kv (id, k, v, pad) select value, printf('key%06d', \
             (value * 7919) % 100003), (value * 2654435761) % 1000003, \
             printf('%.*c', 50 + value % 150, 'x') from generate_series({lo}, {hi});\ncommit;\n"
        ));
    }
    s.push_str(QUERIES);
    s.push_str(
        "begin;\nupdate kv set v = v + 1 where id % 3 = 0;\nselect 'updated', changes();\n\
         delete from kv where id % 5 = 0;\nselect 'deleted', changes();\ncommit;\n",
    );
    s.push_str(QUERIES);
    s
}

/// The lines of `out` after the VFS's description (`.vfsinfo`): what the queries printed.
fn results(out: &Out) -> Vec<String> {
    out.stdout
        .lines()
        .filter(|l| !l.starts_with("vfs."))
        .map(str::to_string)
        .collect()
}

/// The VFS a shell's `.vfsinfo` named.
fn vfs_name(out: &Out) -> Option<String> {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("vfs.zName"))
        .map(|v| {
            v.trim_start_matches([' ', '='])
                .trim_matches('"')
                .to_string()
        })
}

/// The workload on a fresh `path` through `vfs`: what it printed.
fn write_db(lib: &Path, path: &Path, vfs: Option<&str>) -> Vec<String> {
    let out = shell(
        &[],
        &format!("{}{}", open(lib, &uri(path, vfs, None)), workload()),
    );
    assert!(out.ok && out.stderr.is_empty(), "{vfs:?}: {}", out.stderr);
    assert_eq!(
        vfs_name(&out).as_deref(),
        Some(vfs.unwrap_or("unix")),
        "the database was opened through the VFS asked for"
    );
    results(&out)
}

/// The queries on `path` opened read-only through `vfs` (through `zcio`, the layer reads it):
/// what they printed, and what `pragma zcio_stats` said (through `zcio`).
fn read_db(lib: &Path, path: &Path, vfs: Option<&str>) -> (Vec<String>, Option<String>) {
    let stats = if vfs.is_some() {
        "pragma zcio_stats;\n"
    } else {
        ""
    };
    let out = shell(
        &[],
        &format!(
            "{}{QUERIES}{QUERIES}{stats}",
            open(lib, &uri(path, vfs, Some("ro")))
        ),
    );
    assert!(out.ok && out.stderr.is_empty(), "{vfs:?}: {}", out.stderr);
    let mut lines = results(&out);
    let stats = vfs.map(|_| lines.pop().expect("the stats line"));
    (lines, stats)
}

/// A number in `pragma zcio_stats`' JSON.
fn stat(json: &str, key: &str) -> u64 {
    let at = json
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("{key} in {json}"));
    json[at + key.len() + 3..]
        .split([',', '}'])
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key} in {json}"))
}

#[test]
fn a_workload_through_zcio_gives_what_the_shells_own_vfs_gives() {
    let Some(lib) = ext() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (z, d) = (dir.path().join("zcio.db"), dir.path().join("default.db"));
    let through_zcio = write_db(lib, &z, Some("zcio"));
    let through_default = write_db(lib, &d, None);
    assert_eq!(through_zcio, through_default);
    // The workload did what it says: 100 000 rows, a third updated, a fifth deleted, and the
    // database whole after each step.
    assert!(through_zcio.contains(&"updated|33333".to_string()));
    assert!(through_zcio.contains(&"deleted|20000".to_string()));
    let counts: Vec<&str> = through_zcio
        .iter()
        .filter_map(|l| l.strip_prefix("all|"))
        .map(|l| l.split('|').next().unwrap())
        .collect();
    assert_eq!(counts, ["100000", "80000"]);
    assert_eq!(through_zcio.iter().filter(|l| *l == "ok").count(), 2);
    // Both files hold the same rows, read back read-only through the layer, twice (the
    // second time from the pool) and through the shell's own VFS.
    let (z_by_zcio, stats) = read_db(lib, &z, Some("zcio"));
    let (d_by_default, _) = read_db(lib, &d, None);
    assert_eq!(z_by_zcio, d_by_default);
    assert_eq!(&z_by_zcio[..4], &through_zcio[through_zcio.len() - 4..]);
    let stats = stats.unwrap();
    assert_eq!(stat(&stats, "fallback_files"), 0, "{stats}");
    assert!(
        stat(&stats, "requests") > 0,
        "read through the layer: {stats}"
    );
    assert!(
        stat(&stats, "pool_hits") > 0,
        "read again from the pool: {stats}"
    );
    let size = std::fs::metadata(&z).unwrap().len();
    assert!(stat(&stats, "bytes_transferred") >= size, "{stats}");
}

#[test]
fn each_vfs_reads_what_the_other_wrote() {
    let Some(lib) = ext() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (z, d) = (dir.path().join("zcio.db"), dir.path().join("default.db"));
    write_db(lib, &z, Some("zcio"));
    write_db(lib, &d, None);
    let (z_by_default, _) = read_db(lib, &z, None);
    let (d_by_zcio, stats) = read_db(lib, &d, Some("zcio"));
    let (d_by_default, _) = read_db(lib, &d, None);
    assert_eq!(z_by_default, d_by_default);
    assert_eq!(d_by_zcio, d_by_default);
    assert!(d_by_zcio.contains(&"ok".to_string()));
    let stats = stats.unwrap();
    assert!(stat(&stats, "requests") > 0, "{stats}");
    // And written again through the other: zcio appends to the default's file, and the
    // default reads the rows back.
    let out = shell(
        &[],
        &format!(
            "{}insert into kv (k, v, pad) values ('appended', 1, 'y');\n\
             pragma integrity_check;\n",
            open(lib, &uri(&d, Some("zcio"), None))
        ),
    );
    assert!(out.ok, "{}", out.stderr);
    let back = shell(
        &[],
        &format!(
            "{}select count(*), max(v) from kv where k = 'appended';\n",
            open(lib, &uri(&d, None, Some("ro")))
        ),
    );
    assert_eq!(results(&back), ["1|1"], "{}", back.stderr);
}

#[test]
fn the_default_vfs_can_be_zcio() {
    let Some(lib) = ext() else { return };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.db");
    write_db(lib, &p, None);
    // Loaded by its second entry point, later databases opened without `vfs=` use zcio.
    let out = shell(
        &[],
        &format!(
            ".bail on\n.load {} sqlite3_zciodefault_init\n.open --readonly {}\n.vfsinfo\n\
             select count(*) from kv;\npragma zcio_stats;\n",
            lib.display(),
            p.display()
        ),
    );
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(vfs_name(&out).as_deref(), Some("zcio"));
    let lines = results(&out);
    assert_eq!(lines[0], "80000");
    assert!(stat(&lines[1], "requests") > 0, "{}", lines[1]);
}

/// What the shell printed on its standard error for `statements` on `uri`: (through zcio,
/// through the shell's own VFS), the VFS's name taken out of the text.
fn errors(lib: &Path, path: &Path, mode: Option<&str>, statements: &str) -> (String, String) {
    let run = |vfs: Option<&str>| {
        let u = uri(path, vfs, mode);
        let out = shell(&[], &format!("{}{statements}\n", open(lib, &u)));
        assert!(!out.stderr.is_empty(), "{u}: {statements} should fail");
        out.stderr
            .replace("&vfs=zcio", "")
            .replace("?vfs=zcio", "?")
    };
    (run(Some("zcio")), run(None))
}

#[test]
fn a_missing_read_only_or_corrupt_file_gives_sqlites_own_errors() {
    let Some(lib) = ext() else { return };
    let dir = tempfile::tempdir().unwrap();
    let check = |what: &str, (zcio, own): (String, String), want: &str| {
        assert!(zcio.contains(want), "{what}, through zcio: {zcio}");
        assert_eq!(zcio, own, "{what}: zcio and the shell's own VFS differ");
    };
    // A file that is not there, opened read-only.
    let missing = dir.path().join("missing.db");
    check(
        "missing",
        errors(
            lib,
            &missing,
            Some("ro"),
            "select count(*) from sqlite_master;",
        ),
        "unable to open database file",
    );
    assert!(!missing.exists());
    // A database opened read-only, written to.
    let ro = dir.path().join("ro.db");
    write_db(lib, &ro, None);
    check(
        "read-only",
        errors(lib, &ro, Some("ro"), "insert into kv (k) values ('no');"),
        "attempt to write a readonly database",
    );
    // A file without write permission, opened for writing (root may write any file, so only
    // where the tests do not run as root).
    // (/proc/self belongs to the process's effective user.)
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o444)).unwrap();
        check(
            "no write permission",
            errors(lib, &ro, None, "insert into kv (k) values ('no');"),
            "attempt to write a readonly database",
        );
    }
    // A file whose header is not SQLite's, read-only (through the layer) and read-write.
    let bad = dir.path().join("bad.db");
    let junk: Vec<u8> = (0..16384u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&bad, junk).unwrap();
    for mode in [Some("ro"), None] {
        check(
            "corrupt header",
            errors(lib, &bad, mode, "select count(*) from sqlite_master;"),
            "file is not a database",
        );
    }
}
