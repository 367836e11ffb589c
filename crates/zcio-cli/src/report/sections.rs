//! The experiments' sections of `results.json`: one top-level key per section, each holding
//! what its experiment measured or `null`, read and written as the registry
//! ([`crate::lab::LABS`]) says.
//!
//! [`Sections`] is flattened into [`crate::report::Results`], so the file keeps one key per
//! section beside the run's own fields; its schema lists every registered section.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::any::Any;
use std::collections::BTreeMap;

/// What an experiment's section is made of: any value `results.json` can hold.
pub trait SectionData:
    Serialize + DeserializeOwned + JsonSchema + Clone + std::fmt::Debug + Send + Sync + 'static
{
}

impl<T> SectionData for T where
    T: Serialize + DeserializeOwned + JsonSchema + Clone + std::fmt::Debug + Send + Sync + 'static
{
}

/// A stored section of any type, written out as JSON.
trait Stored: Any + std::fmt::Debug + Send + Sync {
    fn to_json(&self) -> serde_json::Result<serde_json::Value>;
    fn clone_box(&self) -> Box<dyn Stored>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: SectionData> Stored for T {
    fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self)
    }
    fn clone_box(&self) -> Box<dyn Stored> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// One section of `results.json` as the registry knows it: its key, what the schema says of
/// it, and how its value is read and described.
#[derive(Debug, Clone, Copy)]
pub struct SectionKind {
    /// The top-level key.
    pub key: &'static str,
    /// The schema's description of it.
    pub about: &'static str,
    read: fn(serde_json::Value) -> serde_json::Result<Box<dyn Stored>>,
    schema: fn(&mut SchemaGenerator) -> Schema,
}

impl SectionKind {
    /// The section `key` holding a `T`.
    pub const fn of<T: SectionData>(key: &'static str, about: &'static str) -> SectionKind {
        SectionKind {
            key,
            about,
            read: read::<T>,
            schema: schema::<T>,
        }
    }
}

fn read<T: SectionData>(v: serde_json::Value) -> serde_json::Result<Box<dyn Stored>> {
    Ok(Box::new(serde_json::from_value::<T>(v)?))
}

fn schema<T: SectionData>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<Option<T>>()
}

/// Every section the registry knows, in its order.
fn kinds() -> impl Iterator<Item = &'static SectionKind> {
    crate::lab::LABS.iter().filter_map(|l| l.section.as_ref())
}

/// The sections measured, by key.
#[derive(Debug, Default)]
pub struct Sections(BTreeMap<&'static str, Box<dyn Stored>>);

impl Clone for Sections {
    fn clone(&self) -> Self {
        Sections(self.0.iter().map(|(k, v)| (*k, v.clone_box())).collect())
    }
}

impl Sections {
    /// The section `key`, if it was measured and holds a `T`.
    pub fn get<T: 'static>(&self, key: &str) -> Option<&T> {
        self.0.get(key)?.as_any().downcast_ref()
    }

    /// The section `key`, mutable, if it was measured and holds a `T`.
    pub fn get_mut<T: 'static>(&mut self, key: &str) -> Option<&mut T> {
        self.0.get_mut(key)?.as_any_mut().downcast_mut()
    }

    /// Store `section` under `key`, replacing what was there.
    ///
    /// # Panics
    /// If the registry knows no section `key` (a programming error: an experiment storing a
    /// section it did not register).
    pub fn put<T: SectionData>(&mut self, key: &'static str, section: T) {
        assert!(
            kinds().any(|k| k.key == key),
            "section {key:?} is not in the registry"
        );
        self.0.insert(key, Box::new(section));
    }
}

impl Serialize for Sections {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeMap as _};
        let mut map = s.serialize_map(None)?;
        for k in kinds() {
            match self.0.get(k.key) {
                Some(v) => map.serialize_entry(k.key, &v.to_json().map_err(S::Error::custom)?)?,
                None => map.serialize_entry(k.key, &())?,
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Sections {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut raw = BTreeMap::<String, serde_json::Value>::deserialize(d)?;
        let mut out = BTreeMap::new();
        for k in kinds() {
            match raw.remove(k.key) {
                None | Some(serde_json::Value::Null) => {}
                Some(v) => {
                    let s = (k.read)(v).map_err(|e| D::Error::custom(format!("{}: {e}", k.key)))?;
                    out.insert(k.key, s);
                }
            }
        }
        Ok(Sections(out))
    }
}

impl JsonSchema for Sections {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Sections".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let mut properties = serde_json::Map::new();
        for k in kinds() {
            let mut s = (k.schema)(g);
            s.insert("default".into(), serde_json::Value::Null);
            s.insert("description".into(), k.about.into());
            properties.insert(k.key.into(), s.into());
        }
        schemars::json_schema!({
            "type": "object",
            "properties": properties,
        })
    }
}
