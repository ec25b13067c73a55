//! JSON in and out of the REST protocol: a command's body written straight
//! from its arguments, and a reply read straight into the [`redis::Value`]
//! RESP would have given, with no JSON tree in between (the REST work
//! cycle's client spent a fifth of its time copying arguments and building
//! trees).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use redis::Value;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;

/// The JSON body of one command: its arguments as JSON strings, written
/// once (see [`text`] for bytes that are not UTF-8).
pub(crate) fn command_body<'a>(args: impl Iterator<Item = &'a [u8]> + Clone) -> Vec<u8> {
    let size: usize = args.clone().map(|a| a.len() + 3).sum();
    let mut out = Vec::with_capacity(size + size / 8 + 2);
    out.push(b'[');
    for (k, arg) in args.enumerate() {
        if k > 0 {
            out.push(b',');
        }
        let written = match std::str::from_utf8(arg) {
            Ok(text) => serde_json::to_writer(&mut out, text),
            Err(_) => serde_json::to_writer(&mut out, &text(arg)),
        };
        // A string always serializes, and a Vec takes every byte.
        debug_assert!(written.is_ok());
    }
    out.push(b']');
    out
}

/// Reads a reply object, `{"result": …}` or `{"error": "…"}`, straight
/// into the value RESP would have given ([`to_value`] of its result, or
/// the error as a server error).
pub(crate) struct ReplySeed {
    pub(crate) base64: bool,
}

/// The fields of a reply object.
enum Field {
    Result,
    Error,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> std::result::Result<Field, E> {
                Ok(match name {
                    "result" => Field::Result,
                    "error" => Field::Error,
                    _ => Field::Other,
                })
            }
        }
        deserializer.deserialize_identifier(FieldVisitor)
    }
}

impl<'de> DeserializeSeed<'de> for ReplySeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ReplySeed {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a REST reply object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let (mut result, mut error) = (None, None);
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Result => {
                    result = Some(map.next_value_seed(ValueSeed {
                        base64: self.base64,
                    })?)
                }
                Field::Error => error = Some(map.next_value::<Json>()?),
                Field::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        if let Some(error) = error.filter(|e| !e.is_null()) {
            return Ok(error_value(Some(&error)));
        }
        Ok(result.unwrap_or(Value::Nil))
    }
}

/// Reads a reply's `result` as [`to_value`] would turn it.
#[derive(Clone, Copy)]
struct ValueSeed {
    base64: bool,
}

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Value, E> {
        Ok(Value::Nil)
    }
    fn visit_none<E: de::Error>(self) -> std::result::Result<Value, E> {
        Ok(Value::Nil)
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> std::result::Result<Value, E> {
        Ok(Value::Int(i64::from(b)))
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> std::result::Result<Value, E> {
        Ok(Value::Int(n))
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> std::result::Result<Value, E> {
        Ok(i64::try_from(n).map_or(Value::Double(n as f64), Value::Int))
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> std::result::Result<Value, E> {
        Ok(Value::Double(n))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<Value, E> {
        Ok(string_value(std::borrow::Cow::Borrowed(s), self.base64))
    }
    fn visit_string<E: de::Error>(self, s: String) -> std::result::Result<Value, E> {
        Ok(string_value(std::borrow::Cow::Owned(s), self.base64))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            fields.push((Value::BulkString(key.into_bytes()), value));
        }
        Ok(Value::Map(fields))
    }
}

/// A JSON string of a reply as a bulk string: base64-decoded when replies
/// are encoded, except status replies (`OK`), which never are.
fn string_value(s: std::borrow::Cow<'_, str>, base64: bool) -> Value {
    if base64
        && s != "OK"
        && let Ok(bytes) = STANDARD.decode(s.as_bytes())
    {
        return Value::BulkString(bytes);
    }
    Value::BulkString(s.into_owned().into_bytes())
}

/// An argument as JSON text. The protocol carries strings, so bytes must be
/// UTF-8; the one non-UTF-8 byte the store sends, 0xFF as the "after every
/// UTF-8 string" bound of a lexicographic range, becomes U+10FFFF, the
/// greatest character (exact unless a name holds that noncharacter).
pub(crate) fn text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => {
            let mut out = String::with_capacity(bytes.len() + 4);
            for chunk in bytes.utf8_chunks() {
                out.push_str(chunk.valid());
                for _ in chunk.invalid() {
                    out.push('\u{10FFFF}');
                }
            }
            out
        }
    }
}

/// A JSON reply as the value RESP would have given.
pub(crate) fn to_value(json: Json, base64: bool) -> Value {
    match json {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Int(i64::from(b)),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        // Status replies (`OK`) are not encoded; they are never valid
        // base64 of the same text.
        Json::String(s) => string_value(std::borrow::Cow::Owned(s), base64),
        Json::Array(items) => {
            Value::Array(items.into_iter().map(|v| to_value(v, base64)).collect())
        }
        Json::Object(fields) => Value::Map(
            fields
                .into_iter()
                .map(|(k, v)| (Value::BulkString(k.into_bytes()), to_value(v, base64)))
                .collect(),
        ),
    }
}

/// An `error` field as a Redis error value. The code is the message's first
/// word when it looks like one (`NOSCRIPT`, `ERR`, `WRONGTYPE`); a server
/// that wraps Redis's message ("Failed to execute Redis command: NOSCRIPT
/// …") still yields `NOSCRIPT`, so scripts reload on any such server.
pub(crate) fn error_value(error: Option<&Json>) -> Value {
    let message = match error {
        Some(Json::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "unknown error".to_owned(),
    };
    let message = message.replace(['\r', '\n'], " ");
    let message = match message.find("NOSCRIPT") {
        Some(at) => message[at..].to_owned(),
        None => message,
    };
    let first = message.split(' ').next().unwrap_or("");
    let coded = if !first.is_empty() && first.bytes().all(|b| b.is_ascii_uppercase()) {
        message
    } else {
        format!("ERR {message}")
    };
    redis::parse_redis_value(format!("-{coded}\r\n").as_bytes()).unwrap_or_else(|_| Value::Nil)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_replies_become_resp_values() {
        let json: Json = serde_json::json!([1, null, "a\nb", ["x"], "OK"]);
        assert_eq!(
            to_value(json, false),
            Value::Array(vec![
                Value::Int(1),
                Value::Nil,
                Value::BulkString(b"a\nb".to_vec()),
                Value::Array(vec![Value::BulkString(b"x".to_vec())]),
                Value::BulkString(b"OK".to_vec()),
            ])
        );
    }

    #[test]
    fn base64_replies_are_decoded_but_status_ok_is_kept() {
        let encoded = STANDARD.encode("é\n");
        let json = serde_json::json!([encoded, "OK"]);
        assert_eq!(
            to_value(json, true),
            Value::Array(vec![
                Value::BulkString("é\n".as_bytes().to_vec()),
                Value::BulkString(b"OK".to_vec()),
            ])
        );
    }

    #[test]
    fn wrapped_noscript_errors_keep_their_code() {
        let json = Json::String("Failed to execute Redis command: NOSCRIPT No matching".into());
        let Value::ServerError(error) = error_value(Some(&json)) else {
            panic!("a server error");
        };
        assert_eq!(error.kind(), Some(redis::ServerErrorKind::NoScript));
    }

    #[test]
    fn the_lexicographic_top_byte_becomes_the_greatest_character() {
        assert_eq!(text(b"(ab\xff"), "(ab\u{10FFFF}");
        assert!(text(b"(ab\xff").as_str() > "(ab\u{10FFFD}");
    }

    /// The reply read straight from bytes is what the JSON tree gave.
    #[test]
    fn replies_read_straight_match_the_tree() {
        let encoded = STANDARD.encode("é\n");
        let results = [
            serde_json::json!([1, null, "a\nb", ["x", [2, -3]], "OK", true, 1.5]),
            serde_json::json!([encoded, "OK", "not base64!"]),
            serde_json::json!({"k": ["v", 18446744073709551615u64]}),
            serde_json::json!("café \"quoted\""),
            Json::Null,
        ];
        for result in results {
            for base64 in [false, true] {
                let body = serde_json::to_vec(&serde_json::json!({ "result": result })).unwrap();
                let mut reader = serde_json::Deserializer::from_slice(&body);
                let read = ReplySeed { base64 }.deserialize(&mut reader).unwrap();
                assert_eq!(read, to_value(result.clone(), base64), "{result}");
            }
        }
        let body = br#"{"error":"NOSCRIPT No matching script"}"#;
        let mut reader = serde_json::Deserializer::from_slice(body);
        let Value::ServerError(error) = (ReplySeed { base64: true })
            .deserialize(&mut reader)
            .unwrap()
        else {
            panic!("a server error");
        };
        assert_eq!(error.kind(), Some(redis::ServerErrorKind::NoScript));
    }

    /// A body written from the arguments is the JSON array of their text.
    #[test]
    fn bodies_are_the_arguments_as_json_strings() {
        let args: [&[u8]; 4] = [b"EVALSHA", b"{\"n\":1}", "é".as_bytes(), b"(ab\xff"];
        let body = command_body(args.iter().copied());
        let parsed: Vec<String> = serde_json::from_slice(&body).unwrap();
        assert_eq!(parsed, ["EVALSHA", "{\"n\":1}", "é", "(ab\u{10FFFF}"]);
    }
}
