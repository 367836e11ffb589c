//! The Wisconsin benchmark's `tenk1` tables (13 integer and 3 string columns), one table per
//! database file, and the paper's scan query.

use rusqlite::{Connection, OpenFlags, params};
use std::path::Path;

/// The paper's query: no index helps, so the engine scans the whole table.
pub const QUERY: &str = "select t.*, t.unique1 from tenk1 t where t.tenthous = 1000";

/// Wisconsin's 52-character strings: 7 significant letters from `n` (base 26, from 'A'),
/// then 'x' to the end.
fn wisconsin_string(mut n: u64) -> String {
    let mut s = [b'A'; 7];
    for c in s.iter_mut().rev() {
        *c = b'A' + (n % 26) as u8;
        n /= 26;
    }
    let mut out = String::from_utf8(s.to_vec()).expect("letters");
    out.push_str(&"x".repeat(45));
    out
}

/// A permutation of `0..n`, fixed by `seed` (Fisher-Yates with SplitMix64).
fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut s = seed;
    for i in (1..v.len()).rev() {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        v.swap(i, (z % (i as u64 + 1)) as usize);
    }
    v
}

/// Write a `tenk1` table of `rows` rows to a new database file at `path` (4 KiB pages).
pub fn create_tenk1(path: &Path, rows: u64, seed: u64) -> rusqlite::Result<()> {
    let _ = std::fs::remove_file(path);
    let mut c = Connection::open(path)?;
    c.execute_batch(
        "pragma page_size = 4096; pragma journal_mode = off; pragma synchronous = off;
         create table tenk1 (unique1 int, unique2 int, two int, four int, ten int, twenty int,
           hundred int, thousand int, twothousand int, fivethous int, tenthous int, odd int,
           even int, stringu1 text, stringu2 text, string4 text);",
    )?;
    let tx = c.transaction()?;
    {
        let mut ins = tx.prepare("insert into tenk1 values (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")?;
        let fours = ["AAAA", "HHHH", "OOOO", "VVVV"];
        for (u2, u1) in permutation(rows, seed).into_iter().enumerate() {
            let u2 = u2 as u64;
            let hundred = u1 % 100;
            let s4 = format!("{}{}", fours[(u2 % 4) as usize], "x".repeat(48));
            ins.execute(params![
                u1 as i64,
                u2 as i64,
                (u1 % 2) as i64,
                (u1 % 4) as i64,
                (u1 % 10) as i64,
                (u1 % 20) as i64,
                hundred as i64,
                (u1 % 1000) as i64,
                (u1 % 2000) as i64,
                (u1 % 5000) as i64,
                (u1 % 10000) as i64,
                (hundred * 2 + 1) as i64,
                (hundred * 2) as i64,
                wisconsin_string(u1),
                wisconsin_string(u2),
                s4,
            ])?;
        }
    }
    tx.commit()?;
    c.close().map_err(|(_, e)| e)?;
    // A file of whole 4 KiB pages, as O_DIRECT reads it.
    let len = std::fs::metadata(path).map_err(|e| {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
            Some(e.to_string()),
        )
    })?;
    debug_assert_eq!(len.len() % 4096, 0);
    Ok(())
}

/// What a query returned: its rows and a digest of every value in them, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryResult {
    /// Rows returned.
    pub rows: u64,
    /// FNV-1a over every value.
    pub digest: u64,
}

/// Open a table read-only, by SQLite's own VFS (`None`) or by `vfs`.
pub fn open(path: &Path, vfs: Option<&str>) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    match vfs {
        None => Connection::open_with_flags(path, flags),
        Some(v) => Connection::open_with_flags_and_vfs(path, flags, v),
    }
}

/// Run [`QUERY`] on a connection.
pub fn scan(c: &Connection) -> rusqlite::Result<QueryResult> {
    let mut st = c.prepare(QUERY)?;
    let n = st.column_count();
    let mut rows = st.query([])?;
    let mut r = QueryResult {
        rows: 0,
        digest: 0xcbf2_9ce4_8422_2325,
    };
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            r.digest = (r.digest ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    };
    let mut count = 0;
    while let Some(row) = rows.next()? {
        count += 1;
        for i in 0..n {
            match row.get_ref(i)? {
                rusqlite::types::ValueRef::Integer(v) => eat(&v.to_le_bytes()),
                rusqlite::types::ValueRef::Text(t) => eat(t),
                other => eat(format!("{other:?}").as_bytes()),
            }
        }
    }
    r.rows = count;
    Ok(r)
}

/// Let SQLite read the database through a memory mapping of up to `bytes` (its pages then
/// come straight from the page cache, with neither a copy nor a system call per page).
pub fn use_mmap(c: &Connection, bytes: u64) -> rusqlite::Result<()> {
    c.execute_batch(&format!("pragma mmap_size = {bytes}"))
}
