//! The gateway's JSON: command bodies into Redis commands, replies into
//! the protocol's JSON.

use axum::body::Bytes;
use axum::http::StatusCode;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use redis::{Cmd, Value};
use serde_json::Value as Json;

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

/// One reply of a pipeline, `{"result": …}` or `{"error": …}`, written
/// into `out`.
pub(super) fn write_entry(out: &mut Vec<u8>, value: Value, base64: bool) {
    match value {
        Value::ServerError(error) => write_error(out, &error),
        other => {
            out.extend_from_slice(b"{\"result\":");
            write_reply(out, other, base64);
            out.push(b'}');
        }
    }
}

fn write_error(out: &mut Vec<u8>, error: &redis::ServerError) {
    out.extend_from_slice(b"{\"error\":");
    write_string(out, &error_text(error));
    out.push(b'}');
}

/// A JSON string (escaped as JSON needs).
fn write_string(out: &mut Vec<u8>, text: &str) {
    // Writing into a vector cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// A reply written as JSON into `out`, straight from the value (no JSON
/// tree: this gateway runs in the benchmark's process, whose CPU the REST
/// rows count): what a RESP2 client would see, strings base64-encoded on
/// request (status `OK` excepted).
pub(super) fn write_reply(out: &mut Vec<u8>, value: Value, base64: bool) {
    let text = |out: &mut Vec<u8>, bytes: &[u8]| {
        if base64 {
            out.push(b'"');
            out.extend_from_slice(STANDARD.encode(bytes).as_bytes());
            out.push(b'"');
        } else {
            write_string(out, &String::from_utf8_lossy(bytes));
        }
    };
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Value::BulkString(bytes) => text(out, &bytes),
        Value::SimpleString(s) if s == "OK" => out.extend_from_slice(b"\"OK\""),
        Value::SimpleString(s) => text(out, s.as_bytes()),
        Value::Okay => out.extend_from_slice(b"\"OK\""),
        Value::Array(items) | Value::Set(items) => {
            out.push(b'[');
            for (k, item) in items.into_iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                write_reply(out, item, base64);
            }
            out.push(b']');
        }
        Value::Map(pairs) => {
            out.push(b'[');
            for (k, (key, value)) in pairs.into_iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                write_reply(out, key, base64);
                out.push(b',');
                write_reply(out, value, base64);
            }
            out.push(b']');
        }
        // Not finite: `null`, as serde_json writes it.
        Value::Double(f) => {
            let _ = serde_json::to_writer(&mut *out, &f);
        }
        Value::Boolean(b) => out.push(if b { b'1' } else { b'0' }),
        Value::VerbatimString { text: t, .. } => text(out, t.as_bytes()),
        Value::BigNumber(n) => text(out, &n.to_vec()),
        Value::ServerError(error) => write_error(out, &error),
        _ => out.extend_from_slice(b"null"),
    }
}
