//! Appends as events, and events as the bytes a reader gets.

use a2_core::{Event, NewEvent};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

use super::config::Config;
use super::{CHUNK, MESSAGE};
use crate::error::ApiError;

/// The events of one append's body to a stream of `config`: in a JSON
/// stream one `message` per value (an array flattened one level); in a byte
/// stream one `chunk` holding the body (several for a body over 128 KiB).
/// An empty body (or empty array) is
/// refused unless `empty_ok` (a `PUT` without first data).
pub(crate) fn events_of(
    config: &Config,
    body: &[u8],
    empty_ok: bool,
) -> Result<Vec<NewEvent>, ApiError> {
    // Output is settled at append (A8); a work stream's data is pending,
    // for a2's handlers (A9).
    let made = |event: NewEvent| if config.work { event } else { event.settled() };
    if config.is_json() {
        return Ok(messages(body, empty_ok)?
            .into_iter()
            .map(|value| made(NewEvent::new(MESSAGE, value)))
            .collect());
    }
    if body.is_empty() {
        return if empty_ok {
            Ok(Vec::new())
        } else {
            Err(ApiError::invalid("an append needs a body"))
        };
    }
    // A large body becomes several chunks, each well under a store's
    // payload limit (1 MiB by default) however its bytes encode: as JSON
    // text a byte takes at most 6 (`\u0000`), in base64 4/3.
    let mut events = Vec::with_capacity(body.len() / PIECE + 1);
    match std::str::from_utf8(body) {
        Ok(text) => {
            let mut rest = text;
            while !rest.is_empty() {
                let mut cut = rest.len().min(PIECE);
                while !rest.is_char_boundary(cut) {
                    cut -= 1;
                }
                let (piece, tail) = rest.split_at(cut);
                events.push(made(NewEvent::new(CHUNK, Value::String(piece.to_owned()))));
                rest = tail;
            }
        }
        Err(_) => {
            for piece in body.chunks(PIECE) {
                let payload = serde_json::json!({ "base64": B64.encode(piece) });
                events.push(made(NewEvent::new(CHUNK, payload)));
            }
        }
    }
    Ok(events)
}

/// The most bytes of a body one chunk event holds.
const PIECE: usize = 128 * 1024;

/// The messages of a JSON body: a value, or an array flattened one level.
fn messages(body: &[u8], empty_ok: bool) -> Result<Vec<Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return if empty_ok {
            Ok(Vec::new())
        } else {
            Err(ApiError::invalid("an append needs a body"))
        };
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("the body is not JSON: {e}")))?;
    let values = match value {
        Value::Array(items) => items,
        other => vec![other],
    };
    if values.is_empty() && !empty_ok {
        return Err(ApiError::invalid(
            "an append of an empty array appends nothing",
        ));
    }
    Ok(values)
}

/// Whether a reader sees this event: the stream's own events (its
/// markers, the records of who wrote) are not data.
pub(crate) fn visible(event: &Event) -> bool {
    !event.event_type.starts_with(OWN)
}

/// The prefix of the stream's own event types.
const OWN: &str = "a2.stream.";

/// The bytes an event holds in a byte stream: a chunk's body, or the JSON
/// text of an event written another way.
pub(crate) fn chunk_bytes(payload: &Value, out: &mut Vec<u8>) {
    match payload {
        Value::String(text) => out.extend_from_slice(text.as_bytes()),
        Value::Object(map) if map.len() == 1 => match map.get("base64").and_then(Value::as_str) {
            Some(encoded) => match B64.decode(encoded) {
                Ok(bytes) => out.extend_from_slice(&bytes),
                Err(_) => out.extend_from_slice(payload.to_string().as_bytes()),
            },
            None => out.extend_from_slice(payload.to_string().as_bytes()),
        },
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// What readers of a stream of `config` get for `events`: a JSON array of
/// the messages, or the chunks' bytes one after another.
pub(crate) fn render<'a>(config: &Config, events: impl IntoIterator<Item = &'a Event>) -> Vec<u8> {
    let mut out = Vec::new();
    render_into(&mut out, config, events);
    out
}

/// [`render`], written at the end of `out`.
fn render_into<'a>(
    out: &mut Vec<u8>,
    config: &Config,
    events: impl IntoIterator<Item = &'a Event>,
) {
    if config.is_json() {
        out.push(b'[');
        let mut first = true;
        for event in events.into_iter().filter(|e| visible(e)) {
            if !first {
                out.push(b',');
            }
            first = false;
            // A Value always serializes.
            let _ = serde_json::to_writer(&mut *out, &event.payload);
        }
        out.push(b']');
    } else {
        for event in events.into_iter().filter(|e| visible(e)) {
            chunk_bytes(&event.payload, out);
        }
    }
}

/// The SSE `data` event of `events`, written at the end of `out`: the JSON
/// array, the text, or (for a binary stream) the bytes in base64; nothing
/// (and `false`) when no event is visible. A JSON array is rendered in
/// place: compact JSON holds no line break (strings escape theirs), so it
/// is one `data:` line.
pub(crate) fn push_sse_data(out: &mut Vec<u8>, config: &Config, events: &[Event]) -> bool {
    if !events.iter().any(visible) {
        return false;
    }
    if config.is_json() {
        out.extend_from_slice(b"event: data\ndata:");
        render_into(out, config, events);
        out.extend_from_slice(b"\n\n");
        return true;
    }
    let bytes = render(config, events);
    let data = if config.is_text() {
        // Chunks written as base64 may hold any bytes.
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    } else {
        B64.encode(bytes)
    };
    push_sse_event(out, "data", &data);
    true
}

/// One SSE event, written at the end of `out`: its name, and each line of
/// `data` as a `data:` line (no space after the colon, so a line's leading
/// space stays its own) — every line break (CRLF, CR or LF) ends a line, so
/// no payload can end the event or start another.
fn push_sse_event(out: &mut Vec<u8>, name: &str, data: &str) {
    out.reserve(data.len() + 32);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    let mut rest = data.as_bytes();
    while let Some(at) = rest.iter().position(|&b| b == b'\r' || b == b'\n') {
        out.extend_from_slice(b"data:");
        out.extend_from_slice(&rest[..at]);
        out.push(b'\n');
        let skip = if rest[at..].starts_with(b"\r\n") {
            2
        } else {
            1
        };
        rest = &rest[at + skip..];
    }
    out.extend_from_slice(b"data:");
    out.extend_from_slice(rest);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(content_type: &str) -> Config {
        Config {
            content_type: content_type.into(),
            ..Config::json()
        }
    }

    fn stored(event: NewEvent, index: u64) -> Event {
        Event {
            index,
            id: format!("e{index}"),
            event_type: event.event_type,
            payload: event.payload,
            session_id: "s".into(),
            created_at: 0,
            cause: None,
            lane: None,
        }
    }

    #[test]
    fn bytes_come_back_as_they_went_in() {
        let binary = config("application/octet-stream");
        let bodies: [&[u8]; 3] = [b"hello ", &[0, 159, 146, 150, 255], "wörld\r\n".as_bytes()];
        let events: Vec<Event> = bodies
            .iter()
            .enumerate()
            .map(|(i, b)| {
                stored(
                    events_of(&binary, b, false).unwrap().remove(0),
                    i as u64 + 1,
                )
            })
            .collect();
        assert_eq!(render(&binary, &events), bodies.concat());
        assert!(events_of(&binary, b"", false).is_err());
        // A large body is several chunks, read back as one.
        let large: Vec<u8> = (0..400_000u32).map(|i| (i % 251) as u8).collect();
        let text = "é".repeat(100_000);
        for body in [&large[..], text.as_bytes()] {
            let events: Vec<Event> = events_of(&binary, body, false)
                .unwrap()
                .into_iter()
                .enumerate()
                .map(|(i, e)| stored(e, i as u64 + 1))
                .collect();
            assert!(events.len() > 1);
            assert_eq!(render(&binary, &events), body);
        }
        assert!(events_of(&binary, b"", true).unwrap().is_empty());
    }

    #[test]
    fn json_bodies_flatten_one_level() {
        let json = Config::json();
        let events: Vec<Event> = events_of(&json, br#"[[1,2],{"a":3}]"#, false)
            .unwrap()
            .into_iter()
            .enumerate()
            .map(|(i, e)| stored(e, i as u64 + 1))
            .collect();
        assert_eq!(render(&json, &events), br#"[[1,2],{"a":3}]"#);
        assert!(events_of(&json, b"[]", false).is_err());
        assert!(events_of(&json, b"{", true).is_err());
    }

    #[test]
    fn a_payload_cannot_break_out_of_its_sse_event() {
        let mut out = Vec::new();
        push_sse_event(&mut out, "data", "a\r\nevent: control\rb\nc");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "event: data\ndata:a\ndata:event: control\ndata:b\ndata:c\n\n"
        );
    }
}
