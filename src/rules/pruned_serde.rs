//! The tests' reference for `rules::scan`: the pruned parse through serde_json's `Deserializer`, with
//! serde's own skipping of unread members.

use super::needs::Need;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// The pruned parse as it was built on serde_json's visitor (before `rules::scan`): what the scanner
/// must agree with, line for line.
pub(super) fn parse_pruned_serde(bytes: &[u8], need: &Need) -> Option<Value> {
    // What serde_json checks only in strings it builds, so that a skipped member could hide what makes
    // the whole parse refuse the line: a \uD800-\uDFFF escape (a lone surrogate is refused) is rare
    // and gets the whole parse; invalid UTF-8 anywhere refuses the line here too.
    let surrogate = || {
        memchr::memmem::find_iter(bytes, b"\\u").any(|i| {
            // An escape only after an even run of backslashes: `\\uD800` is a backslash and text.
            let run = bytes[..i].iter().rev().take_while(|b| **b == b'\\').count();
            run % 2 == 0
                && matches!(bytes.get(i + 2), Some(b'd' | b'D'))
                && matches!(
                    bytes.get(i + 3),
                    Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
                )
        })
    };
    if matches!(need, Need::All) || surrogate() {
        return crate::util::lines::parse_object(bytes);
    }
    std::str::from_utf8(bytes).ok()?;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Pruned(need).deserialize(&mut de).ok()?;
    de.end().ok()?;
    v.is_object().then_some(v)
}

struct Pruned<'n>(&'n Need);

impl<'de> DeserializeSeed<'de> for Pruned<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self.0 {
            Need::All => serde::Deserialize::deserialize(d),
            node => d.deserialize_any(PrunedVisitor(node)),
        }
    }
}

struct PrunedVisitor<'n>(&'n Need);

/// A member's key: kept (with the need of its value) or skipped, without allocating a skipped one.
struct Key<'n>(&'n Need);

impl<'de, 'n> DeserializeSeed<'de> for Key<'n> {
    type Value = Option<(String, &'n Need)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, 'n> Visitor<'de> for Key<'n> {
    type Value = Option<(String, &'n Need)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E>(self, k: &str) -> Result<Self::Value, E> {
        Ok(self.0.member(k).map(|n| (k.to_string(), n)))
    }
}

impl<'de> Visitor<'de> for PrunedVisitor<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let el = self.0.element();
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Pruned(el))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(Key(self.0))? {
            match key {
                Some((k, need)) => {
                    let v = map.next_value_seed(Pruned(need))?;
                    out.insert(k, v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }
}
