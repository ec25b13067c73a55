//! The gateway's JSON: command bodies into Redis commands, replies into
//! the protocol's JSON.

use axum::body::Bytes;
use axum::http::StatusCode;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use redis::{Cmd, Value};
use serde_json::{Value as Json, json};

use super::{Failure, failure};

/// A JSON command (`["SET", "k", 1]`) as a Redis command.
pub(super) fn to_cmd(json: &Json) -> Result<Cmd, Failure> {
    let bad = |what: &str| failure(StatusCode::BAD_REQUEST, what.to_owned());
    let Json::Array(args) = json else {
        return Err(bad("a command is an array of strings"));
    };
    if args.is_empty() {
        return Err(bad("a command cannot be empty"));
    }
    let mut cmd = Cmd::new();
    for arg in args {
        match arg {
            Json::String(s) => cmd.arg(s.as_bytes()),
            Json::Number(n) => cmd.arg(n.to_string()),
            Json::Bool(b) => cmd.arg(if *b { "1" } else { "0" }),
            _ => return Err(bad("command arguments are strings or numbers")),
        };
    }
    Ok(cmd)
}

/// A command body read straight into a command: each text argument is
/// borrowed from the body unless it holds escapes, and no JSON tree is
/// built (this gateway runs in the benchmark's process, whose CPU the REST
/// rows count).
pub(super) fn parse_command(body: &Bytes) -> Result<Cmd, Failure> {
    let args: Vec<BodyArg<'_>> = serde_json::from_slice(body).map_err(|e| {
        failure(
            StatusCode::BAD_REQUEST,
            format!("a command is an array of strings or numbers: {e}"),
        )
    })?;
    if args.is_empty() {
        return Err(failure(
            StatusCode::BAD_REQUEST,
            "a command cannot be empty".to_owned(),
        ));
    }
    let mut cmd = Cmd::new();
    for arg in &args {
        match arg {
            BodyArg::Text(text) => cmd.arg(text.as_bytes()),
            BodyArg::Other(text) => cmd.arg(text.as_bytes()),
        };
    }
    Ok(cmd)
}

/// One argument of a command body: text, or a number or boolean as the
/// text Redis gets for it.
enum BodyArg<'a> {
    Text(std::borrow::Cow<'a, str>),
    Other(String),
}

impl<'de> serde::Deserialize<'de> for BodyArg<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ArgVisitor;
        impl<'de> serde::de::Visitor<'de> for ArgVisitor {
            type Value = BodyArg<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<BodyArg<'de>, E> {
                Ok(BodyArg::Text(std::borrow::Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<BodyArg<'de>, E> {
                Ok(BodyArg::Text(std::borrow::Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<BodyArg<'de>, E> {
                Ok(BodyArg::Text(std::borrow::Cow::Owned(s)))
            }
            fn visit_i64<E>(self, n: i64) -> Result<BodyArg<'de>, E> {
                Ok(BodyArg::Other(n.to_string()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<BodyArg<'de>, E> {
                Ok(BodyArg::Other(n.to_string()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<BodyArg<'de>, E> {
                Ok(BodyArg::Other(Json::from(n).to_string()))
            }
            fn visit_bool<E>(self, b: bool) -> Result<BodyArg<'de>, E> {
                Ok(BodyArg::Other(if b { "1" } else { "0" }.to_owned()))
            }
        }
        deserializer.deserialize_any(ArgVisitor)
    }
}

pub(super) fn parse_body(body: &Bytes) -> Result<Json, Failure> {
    serde_json::from_slice(body)
        .map_err(|e| failure(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}")))
}

pub(super) fn error_text(error: &redis::ServerError) -> String {
    match error.details() {
        Some(details) => format!("{} {details}", error.code()),
        None => error.code().to_owned(),
    }
}

/// One reply as `{"result"}` or `{"error"}`.
pub(super) fn entry(value: Value, base64: bool) -> Json {
    match value {
        Value::ServerError(error) => json!({ "error": error_text(&error) }),
        other => json!({ "result": to_json(other, base64) }),
    }
}

/// A reply as JSON: what a RESP2 client would see, strings base64-encoded
/// on request (status `OK` excepted).
pub(super) fn to_json(value: Value, base64: bool) -> Json {
    let text = |bytes: Vec<u8>| -> Json {
        if base64 {
            Json::String(STANDARD.encode(bytes))
        } else {
            Json::String(String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    match value {
        Value::Nil => Json::Null,
        Value::Int(i) => json!(i),
        Value::BulkString(bytes) => text(bytes),
        Value::SimpleString(s) if s == "OK" => json!("OK"),
        Value::SimpleString(s) => text(s.into_bytes()),
        Value::Okay => json!("OK"),
        Value::Array(items) | Value::Set(items) => {
            Json::Array(items.into_iter().map(|v| to_json(v, base64)).collect())
        }
        Value::Map(pairs) => Json::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [to_json(k, base64), to_json(v, base64)])
                .collect(),
        ),
        Value::Double(f) => json!(f),
        Value::Boolean(b) => json!(i64::from(b)),
        Value::VerbatimString { text: t, .. } => text(t.into_bytes()),
        Value::BigNumber(n) => text(n.to_vec()),
        Value::ServerError(error) => json!({ "error": error_text(&error) }),
        _ => Json::Null,
    }
}
