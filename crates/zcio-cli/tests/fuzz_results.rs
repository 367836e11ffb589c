//! Fuzzing `zcio report --from` (`arbtest`): the loader of an earlier run's `results.json`
//! ([`zcio_cli::report::load`]) and the documents made from what it loads. The file is whatever
//! is on the disk: any bytes, or a results file whose values are anything its schema allows
//! (empty or long lists, zero, huge or negative numbers, unknown names), perhaps cut short or
//! with a byte changed. The loader must give the results or an error, never panic; results it
//! gives must render (Markdown and HTML with their charts, a chart that cannot be drawn being
//! an error) and load again from the JSON they write.
//!
//! Values are generated from the JSON schema of `results.json` ([`zcio_cli::report::schema`],
//! kept equal to the committed one by `tests/report.rs`), so every section is reached and
//! the generator follows the format as it changes.
//!
//! `ZCIO_FUZZ_MS` sets the time budget of each target (default 1000 ms; a longer run:
//! `ZCIO_FUZZ_MS=600000 cargo test --release -p zcio-cli --test fuzz_results`). A failure prints
//! the seed to replay with `ZCIO_FUZZ_SEED`. Arbtest keeps no corpus: the seeds in
//! `*_REGRESSIONS` are replayed first, every run.

use serde_json::{Map, Value, json};
use zcio_cli::report::{Results, SCHEMA, doc, document, load, schema};
use zcio_genie::{InputBuffering, Semantics};
use zcio_testkit::fuzz::{Result, Unstructured, fuzz};

/// Seeds replayed before the timed search of any bytes: all-zero input and a few sizes.
const BYTES_REGRESSIONS: &[u64] = &[
    0x0000_0000_0000_1000,
    0x9e37_79b9_0000_0400,
    0x2545_f491_0000_4000,
];

/// Seeds replayed before the timed search of results files made from the schema: all-zero
/// input, a few sizes, and those that found a bug.
const SCHEMA_REGRESSIONS: &[u64] = &[
    0x0000_0000_0000_1000,
    0x9e37_79b9_0000_0400,
    0x2545_f491_0000_4000,
    // VMMR rebuild counts whose sum overflowed in the document.
    0x74f2_4d08_0000_0562,
    // VMMR rows whose cost fit was not finite: written as `null`, then not read back.
    0xfda7_0b68_0000_0d22,
    // A VMMR row of so many granules that their bytes overflowed in the copy prediction.
    0xc0eb_bdae_0001_0000,
    // A plot whose values spanned so little that the axis step rounded to zero, and its
    // tick count overflowed.
    0x0975_ec19_0001_0000,
];

/// What a loaded value must allow: its documents, and loading again from its JSON.
fn render_and_reload(r: &Results) {
    let d = document(r);
    let _ = doc::to_markdown(&d);
    if let Err(e) = doc::to_html(&d) {
        assert!(!e.is_empty());
    }
    let text = serde_json::to_string(r).unwrap();
    if let Err(e) = load(&text) {
        panic!("results loaded once do not load again: {e}\n{text}");
    }
}

#[test]
fn any_bytes_are_refused_or_loaded() {
    fuzz(BYTES_REGRESSIONS, |u| {
        let bytes: Vec<u8> = u.arbitrary()?;
        if let Ok(r) = load(&String::from_utf8_lossy(&bytes)) {
            render_and_reload(&r);
        }
        Ok(())
    });
}

/// Values for a JSON schema: what it allows, with a bias to the edges; `wild` values break
/// its rules now and then (a negative count, a name no one knows).
struct Gen {
    schema: Value,
}

impl Gen {
    fn resolve<'a>(&'a self, s: &'a Value) -> &'a Value {
        match s.get("$ref").and_then(Value::as_str) {
            Some(r) => &self.schema["$defs"][r.trim_start_matches("#/$defs/")],
            None => s,
        }
    }

    /// A value for `s`, the schema of the field `key`.
    fn value(
        &self,
        u: &mut Unstructured<'_>,
        s: &Value,
        key: &str,
        depth: usize,
        wild: bool,
    ) -> Result<Value> {
        let s = self.resolve(s);
        if s == &Value::Bool(true) || s.as_object().is_some_and(Map::is_empty) {
            return Ok(match u.int_in_range(0..=2)? {
                0 => Value::Null,
                1 => json!({}),
                _ => json!(u.int_in_range(0..=9)?),
            });
        }
        if let Some(c) = s.get("const") {
            return Ok(c.clone());
        }
        if let Some(e) = s.get("enum").and_then(Value::as_array) {
            return Ok(u.choose(e)?.clone());
        }
        let alternatives = ["oneOf", "anyOf"].map(|k| s.get(k).and_then(Value::as_array));
        if let Some(alts) = alternatives.into_iter().flatten().next() {
            // Deep down, the last alternative (`null` for an option) keeps values small.
            let alt = if depth > 6 && u.ratio(3, 4)? {
                alts.last().expect("alternatives")
            } else {
                u.choose(alts)?
            };
            return self.value(u, alt, key, depth + 1, wild);
        }
        let ty = match s.get("type") {
            Some(Value::Array(types)) => {
                // An option (`[T, "null"]`): mostly T, unless deep down.
                let null = types.iter().any(|t| t == "null");
                if null && (depth > 6 || u.ratio(1, 4)?) {
                    "null"
                } else {
                    types
                        .iter()
                        .filter_map(Value::as_str)
                        .find(|t| *t != "null")
                        .unwrap_or("null")
                }
            }
            Some(Value::String(t)) => t.as_str(),
            _ => "object",
        };
        Ok(match ty {
            "null" => Value::Null,
            "boolean" => Value::Bool(u.arbitrary()?),
            "integer" => json!(integer(u, wild)?),
            "number" => number(u)?,
            "string" => Value::String(string(u, s, key, wild)?),
            "array" => {
                if let Some(items) = s.get("prefixItems").and_then(Value::as_array) {
                    let mut out = Vec::new();
                    for i in items {
                        out.push(self.value(u, i, key, depth + 1, wild)?);
                    }
                    return Ok(Value::Array(out));
                }
                let min = s.get("minItems").and_then(Value::as_u64).unwrap_or(0);
                let max = s.get("maxItems").and_then(Value::as_u64).unwrap_or(min + 4);
                let max = if depth > 5 { min } else { max.min(min + 4) };
                let item = s.get("items").unwrap_or(&Value::Bool(true));
                let mut out = Vec::new();
                for _ in 0..u.int_in_range(min..=max)? {
                    out.push(self.value(u, item, key, depth + 1, wild)?);
                }
                Value::Array(out)
            }
            _ => {
                let mut out = Map::new();
                let required: Vec<&str> = s
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if let Some(props) = s.get("properties").and_then(Value::as_object) {
                    for (k, p) in props {
                        let keep = required.contains(&k.as_str()) || u.ratio(3, 4)?;
                        if keep && !(wild && !u.is_empty() && u.ratio(1, 100)?) {
                            out.insert(k.clone(), self.value(u, p, k, depth + 1, wild)?);
                        }
                    }
                } else if let Some(add) = s.get("additionalProperties").filter(|a| a.is_object()) {
                    for _ in 0..u.int_in_range(0..=2)? {
                        let k = string(u, &Value::Null, "", wild)?;
                        out.insert(k, self.value(u, add, key, depth + 1, wild)?);
                    }
                }
                Value::Object(out)
            }
        })
    }
}

fn integer(u: &mut Unstructured<'_>, wild: bool) -> Result<i128> {
    if u.is_empty() {
        return Ok(0);
    }
    if wild && u.ratio(1, 30)? {
        return Ok(-1);
    }
    Ok(match u.int_in_range(0..=4)? {
        0 => u.int_in_range(0..=3)?,
        1 => u.int_in_range(0..=100_000)?,
        2 => *u.choose(&[
            4096,
            1 << 20,
            1 << 30,
            u32::MAX as i128,
            i64::MAX as i128,
            u64::MAX as i128,
        ])?,
        3 => u.arbitrary::<u64>()? as i128,
        _ => u.int_in_range(1..=64)?,
    })
}

fn number(u: &mut Unstructured<'_>) -> Result<Value> {
    let x: f64 = match u.int_in_range(0..=5)? {
        0 => *u.choose(&[0.0, -0.0, 1.0, 0.5, -1.0, 1e-300, 1e300, f64::MAX, f64::MIN])?,
        1 => u.int_in_range(0..=1000)? as f64 / 10.0,
        2 => u.int_in_range(0..=10_000_000)? as f64,
        3 => f64::from_bits(u.arbitrary()?),
        _ => u.int_in_range(1..=2000)? as f64,
    };
    // JSON holds no NaN or infinity.
    Ok(serde_json::Number::from_f64(x).map_or(json!(0), Value::Number))
}

/// A string for the field `key` of schema `s`: mostly a name the field takes (the semantics
/// and input buffering names, the `schema` id, or a name its description quotes), else any.
fn string(u: &mut Unstructured<'_>, s: &Value, key: &str, wild: bool) -> Result<String> {
    let mut names: Vec<String> = match key {
        "schema" => vec![SCHEMA.into()],
        "semantics" => Semantics::ALL.iter().map(|s| s.name().into()).collect(),
        "input" => InputBuffering::ALL
            .iter()
            .map(|b| b.name().into())
            .collect(),
        _ => Vec::new(),
    };
    let described = s.get("description").and_then(Value::as_str).unwrap_or("");
    names.extend(described.split('`').skip(1).step_by(2).map(String::from));
    if u.is_empty() {
        // Out of entropy: a name the field takes rather than an empty string.
        return Ok(names.first().cloned().unwrap_or_default());
    }
    if names.is_empty() || (wild && u.ratio(1, 10)?) {
        return u.arbitrary();
    }
    Ok(u.choose(&names)?.clone())
}

/// `text` changed as a damaged or hand-edited file would be: cut short, a byte changed, a
/// number replaced by one at the edge of what JSON and the fields can hold.
fn damage(u: &mut Unstructured<'_>, text: &mut String) -> Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    match u.int_in_range(0..=3)? {
        0 => {
            let at = u.int_in_range(0..=text.len())?;
            let at = (0..=at)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            text.truncate(at);
        }
        1 => {
            let at = u.choose_index(text.len())?;
            if text.is_char_boundary(at) && text.is_char_boundary(at + 1) {
                let c = *u.choose(&['0', '9', '-', '.', 'e', '"', ',', '{', ']', ' ', 'x'])?;
                text.replace_range(at..at + 1, &c.to_string());
            }
        }
        _ => {
            let digits: Vec<usize> = text
                .char_indices()
                .filter(|(_, c)| c.is_ascii_digit())
                .map(|(i, _)| i)
                .collect();
            if let Ok(&at) = u.choose(&digits) {
                let end = text[at..]
                    .find(|c: char| !(c.is_ascii_digit() || ".eE+-".contains(c)))
                    .map_or(text.len(), |e| at + e);
                let edge = *u.choose(&[
                    "0",
                    "-1",
                    "1e400",
                    "-0.0",
                    "18446744073709551616",
                    "18446744073709551615",
                    "1e-400",
                    "4.5",
                ])?;
                text.replace_range(at..end, edge);
            }
        }
    }
    Ok(())
}

#[test]
fn any_results_file_the_schema_allows_loads_and_renders_or_is_refused() {
    let g = Gen { schema: schema() };
    fuzz(SCHEMA_REGRESSIONS, |u| {
        let wild = u.ratio(1, 4)?;
        let v = g.value(u, &g.schema, "", 0, wild)?;
        let mut text = serde_json::to_string(&v).unwrap();
        if u.ratio(1, 2)? {
            damage(u, &mut text)?;
        }
        match load(&text) {
            Ok(r) => render_and_reload(&r),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
        Ok(())
    });
}
