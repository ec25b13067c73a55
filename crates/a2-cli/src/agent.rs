//! The demo application: a small chat agent. `a2 demo` runs it in-process;
//! `a2 worker` runs the same handlers as a standalone worker.
//!
//! - `user.message` (`{text, poison?}`): streams a reply as settled
//!   `assistant.delta` progress events, then returns the settled
//!   `assistant.reply`; a message asking about the weather returns a pending
//!   `tool.call` on the same lane instead. A message marked `poison` always
//!   fails, so it is dead-lettered after `max_failures`.
//! - `tool.call` (`{tool, city}`): a flaky tool; its first two attempts fail,
//!   then it returns the settled `tool.result` and `assistant.reply`.
//! - reducer `transcript`: each conversation as `(role, text)` lines.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use a2::runtime::{App, AppBuilder, Backoff, Context, HandlerError, event};
use a2::{Event, NewEvent, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Reducer name of the transcript.
pub const TRANSCRIPT: &str = "transcript";
/// Failures before an event is dead-lettered.
pub const MAX_FAILURES: u32 = 3;
/// How many attempts of a tool call fail before one succeeds.
pub const TOOL_FAILURES: u32 = 2;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserMessage {
    pub text: String,
    /// Which conversation of the session (the demo also uses it as lane).
    #[serde(default)]
    pub conversation: String,
    #[serde(default)]
    pub poison: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolCall {
    pub tool: String,
    pub city: String,
    #[serde(default)]
    pub conversation: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub role: String,
    pub text: String,
}

/// How the demo's handlers behave.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Pause between streamed chunks of a reply (a model "thinking").
    pub think: Duration,
    /// Backoff of failed attempts.
    pub backoff: Backoff,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            think: Duration::from_millis(40),
            backoff: Backoff::exponential(Duration::from_millis(150), Duration::from_secs(2))
                .with_jitter(0.2),
        }
    }
}

/// The demo application's handlers and reducer on `store`, with options
/// left for the caller to finish.
pub fn app(store: Arc<dyn Store>, tuning: Tuning) -> AppBuilder {
    let think = tuning.think;
    App::builder(store)
        .max_failures(MAX_FAILURES)
        .backoff(tuning.backoff)
        .handler("user.message", move |ctx, m: UserMessage| {
            on_message(ctx, m, think)
        })
        .handler("tool.call", move |ctx, call: ToolCall| {
            on_tool(ctx, call, think)
        })
        .reducer(TRANSCRIPT, Transcript::new(), fold_transcript)
}

/// Conversation name → its lines, in log order.
pub type Transcript = BTreeMap<String, Vec<Line>>;

fn fold_transcript(transcript: &mut Transcript, e: &Event) {
    let role = match e.event_type.as_str() {
        "user.message" => "user",
        "assistant.reply" => "assistant",
        "tool.result" => "tool",
        _ => return,
    };
    let conversation = e.payload["conversation"].as_str().unwrap_or_default();
    if let Some(text) = e.payload["text"].as_str() {
        transcript
            .entry(conversation.to_owned())
            .or_default()
            .push(Line {
                role: role.to_owned(),
                text: text.to_owned(),
            });
    }
}

fn lane_of(ctx: &Context, e: NewEvent) -> NewEvent {
    match ctx.lane() {
        Some(lane) => e.lane(lane),
        None => e,
    }
}

async fn typing(ctx: &Context, on: bool) -> Result<(), HandlerError> {
    let values = BTreeMap::from([("typing".to_owned(), Some(json!(on)))]);
    ctx.set_presence("assistant", values).await?;
    Ok(())
}

/// Streams `text` as settled deltas of a few words each. Stops at once
/// when the message is cancelled (the user pressed stop, RT17): returns
/// false, and nothing more is written.
async fn stream_reply(ctx: &Context, text: &str, think: Duration) -> Result<bool, HandlerError> {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    for chunk in words.chunks(4) {
        tokio::select! {
            _ = ctx.cancelled() => return Ok(false),
            _ = tokio::time::sleep(think) => {}
        }
        ctx.progress("assistant.delta", json!({ "text": chunk.concat() }))
            .await?;
    }
    Ok(true)
}

async fn on_message(
    ctx: Context,
    m: UserMessage,
    think: Duration,
) -> Result<Vec<NewEvent>, HandlerError> {
    if m.poison {
        return Err("message body is not valid UTF-8 after decoding; refusing to answer".into());
    }
    typing(&ctx, true).await?;
    if let Some(city) = weather_city(&m.text) {
        let call = event(
            "tool.call",
            ToolCall {
                tool: "weather".into(),
                city,
                conversation: m.conversation.clone(),
            },
        )?;
        return Ok(vec![lane_of(&ctx, call)]);
    }
    let text = reply_to(&m.text);
    if !stream_reply(&ctx, &text, think).await? {
        return Ok(Vec::new());
    }
    typing(&ctx, false).await?;
    let reply = json!({ "text": text, "conversation": m.conversation });
    Ok(vec![event("assistant.reply", reply)?.settled()])
}

async fn on_tool(
    ctx: Context,
    call: ToolCall,
    think: Duration,
) -> Result<Vec<NewEvent>, HandlerError> {
    tokio::time::sleep(think).await;
    // Counting failures (not attempts) keeps this deterministic when a
    // worker dies mid-attempt and another takes over.
    if ctx.failures() < TOOL_FAILURES {
        return Err(format!("{} service timed out", call.tool).into());
    }
    let forecast = forecast(&call.city);
    let text = format!("In {} it is {forecast} — pack accordingly.", call.city);
    if !stream_reply(&ctx, &text, think).await? {
        return Ok(Vec::new());
    }
    typing(&ctx, false).await?;
    Ok(vec![
        event(
            "tool.result",
            json!({
                "text": format!("weather({}) = {forecast}", call.city),
                "conversation": call.conversation,
            }),
        )?
        .settled(),
        event(
            "assistant.reply",
            json!({ "text": text, "conversation": call.conversation }),
        )?
        .settled(),
    ])
}

fn weather_city(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    if !lower.contains("weather") {
        return None;
    }
    let city = text
        .split_whitespace()
        .last()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| w.chars().next().is_some_and(char::is_uppercase))
        .unwrap_or("Lisbon");
    Some(city.to_owned())
}

fn forecast(city: &str) -> &'static str {
    const KINDS: [&str; 4] = [
        "sunny, 24 °C",
        "light rain, 14 °C",
        "windy, 17 °C",
        "clear, 21 °C",
    ];
    KINDS[city.bytes().map(usize::from).sum::<usize>() % KINDS.len()]
}

/// A canned, deterministic "model".
pub fn reply_to(text: &str) -> String {
    let lower = text.to_lowercase();
    let canned = [
        (
            "lisbon",
            "Day one: Alfama at sunrise, tram 28, and pastéis in Belém. Day two: Sintra's palaces, back for fado.",
        ),
        (
            "novel",
            "Try The Left Hand of Darkness by Ursula K. Le Guin: short, strange and warm.",
        ),
        (
            "build",
            "Most of it is codegen: split crates, use a faster linker, and keep debug info light.",
        ),
        (
            "profile",
            "Add [profile.dev] debug = 1 and opt-level = 1 for dependencies only.",
        ),
        (
            "leek",
            "Leek and potato gratin: thin slices, cream, thyme, forty minutes at 190 °C.",
        ),
        (
            "vegan",
            "Swap the cream for oat cream and the butter for olive oil; add a crunchy breadcrumb top.",
        ),
    ];
    canned
        .iter()
        .find(|(key, _)| lower.contains(key))
        .map(|(_, reply)| (*reply).to_owned())
        .unwrap_or_else(|| format!("Noted: \"{text}\". Tell me more and I will help."))
}
