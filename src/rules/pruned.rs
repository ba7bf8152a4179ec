//! A record parsed into only what the rules read (`rules::needs`; the turn reader and the head reader): members no rule reads are skipped
//! by the JSON parser without being built, so a 50 KB tool result costs a scan, not a tree.

use super::needs::Need;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// The line as a JSON object pruned to `need`, or None when it is not one (as `parse_object`): the
/// line must be valid UTF-8 and valid JSON throughout, skipped members included.
pub fn parse_pruned(bytes: &[u8], need: &Need) -> Option<Value> {
    // What serde_json checks only in strings it builds, so that a skipped member could hide what makes
    // the whole parse refuse the line: a \uD800-\uDFFF escape (a lone surrogate is refused) is rare
    // and gets the whole parse; invalid UTF-8 anywhere refuses the line here too.
    let surrogate = || {
        memchr::memmem::find_iter(bytes, b"\\u").any(|i| {
            matches!(bytes.get(i + 2), Some(b'd' | b'D'))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every fixture transcript of an app with turn rules (real ones of many client versions, the
    /// synthetic edge cases): its turns read through the pruned parse equal those read by parsing every
    /// record whole.
    #[test]
    fn pruned_records_give_the_turns_whole_ones_give_on_every_fixture() {
        let pruned = crate::rules::load(&[]).unwrap();
        let mut whole = crate::rules::load(&[]).unwrap();
        for s in &mut whole.sets {
            if let Some(t) = s.turns.as_mut() {
                t.reads = Need::All;
            }
        }
        let mut compared = 0;
        for (f, i) in crate::util::testing::fixture_transcripts(&pruned) {
            let text = f.display().to_string();
            let read = |c: &crate::rules::Catalog| {
                let rule = &c.sets[i];
                let t = crate::turns::extract(
                    rule,
                    rule.turns.as_ref().unwrap(),
                    std::fs::File::open(&f).unwrap(),
                    1,
                    0,
                    &crate::turns::Options::default(),
                )
                .unwrap();
                (t.records, t.user_turns, t.total_turns, t.tools)
            };
            let (a, b) = (read(&pruned), read(&whole));
            assert_eq!(a, b, "{text}");
            assert!(matches!(
                pruned.sets[i].turns.as_ref().unwrap().reads,
                Need::Node { .. }
            ));
            compared += 1;
        }
        assert!(compared >= 50, "only {compared} fixtures compared");
    }

    #[test]
    fn what_makes_a_whole_parse_refuse_a_line_refuses_it_pruned_too() {
        let need = Need::presence().merge(Need::Node {
            keys: [("type".to_string(), Need::All)].into(),
            elems: None,
        });
        let ok = br#"{"type":"user","big":{"x":[1,2,"three"]}}"#;
        assert_eq!(
            parse_pruned(ok, &need),
            Some(serde_json::json!({"type": "user"}))
        );
        for bad in [
            &br#"{"type":"user","big":"\ud800"}"#[..],
            br#"{"type":"user","big":"\q"}"#,
            br#"{"type":"user","big":[1,}"#,
            br#"{"type":"user"} trailing"#,
            b"{\"type\":\"user\",\"big\":\"\xff\"}",
            br#"["type"]"#,
            b"   ",
        ] {
            assert_eq!(
                parse_pruned(bad, &need),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
            assert_eq!(crate::util::lines::parse_object(bad), None);
        }
    }

    /// The head of every fixture (any app) read through pruned records says what the whole records say.
    #[test]
    fn pruned_records_give_the_heads_whole_ones_give_on_every_fixture() {
        let pruned = crate::rules::load(&[]).unwrap();
        let mut whole = crate::rules::load(&[]).unwrap();
        for s in &mut whole.sets {
            s.head_reads = Need::All;
        }
        let mut compared = 0;
        for (f, _) in crate::util::testing::fixture_transcripts(&pruned) {
            for i in 0..pruned.sets.len() {
                assert!(matches!(pruned.sets[i].head_reads, Need::Node { .. }));
                let scan = |c: &crate::rules::Catalog| {
                    let file = std::fs::File::open(&f).unwrap();
                    let name = f.file_name().unwrap().to_string_lossy().into_owned();
                    let h = crate::discover::head::scan_head(&c.sets[i], &name, &name, file);
                    serde_json::to_value(h.unwrap()).unwrap()
                };
                assert_eq!(
                    scan(&pruned),
                    scan(&whole),
                    "{} as {}",
                    f.display(),
                    pruned.sets[i].id
                );
                compared += 1;
            }
        }
        assert!(compared >= 100, "{compared}");
    }
}
