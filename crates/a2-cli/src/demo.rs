//! `a2 demo`: the agent application on a few sessions, with a live feed and
//! a summary.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2::runtime::{App, AttemptReport, Outcome};
use a2::{Event, ListSessionsOptions, NewEvent, ReadEventsOptions, SessionSummary, Store};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::watch;

use crate::agent::{self, TRANSCRIPT, Transcript, Tuning};
use crate::out::say;
use crate::style::{Style, count};

/// One scripted user message: when it arrives, from whom, in which
/// conversation (its lane), what it says.
struct Arrival {
    at_ms: u64,
    user: &'static str,
    conversation: &'static str,
    text: &'static str,
    poison: bool,
}

const fn say(
    at_ms: u64,
    user: &'static str,
    conversation: &'static str,
    text: &'static str,
) -> Arrival {
    Arrival {
        at_ms,
        user,
        conversation,
        text,
        poison: false,
    }
}

const SCRIPT: [Arrival; 8] = [
    say(0, "alice", "trip", "Plan a weekend in Lisbon"),
    say(60, "bob", "build", "Why does my Rust build take so long?"),
    say(120, "carol", "dinner", "Dinner idea with leeks?"),
    say(
        180,
        "alice",
        "trip",
        "And what's the weather like in Lisbon?",
    ),
    say(240, "alice", "books", "Recommend a sci-fi novel"),
    say(300, "bob", "build", "Show me a faster profile"),
    say(360, "carol", "dinner", "Make it vegan"),
    Arrival {
        at_ms: 420,
        user: "bob",
        conversation: "import",
        text: "\u{fffd}\u{fffd} garbled upload",
        poison: true,
    },
];

pub struct DemoArgs {
    pub think: Duration,
    /// Prefix of session ids (empty on the memory store; unique per run on
    /// Redis so runs do not mix).
    pub prefix: String,
}

pub async fn run(store: Arc<dyn Store>, args: DemoArgs) -> Result<(), Box<dyn std::error::Error>> {
    let style = Style::detect();
    let started = Instant::now();
    let users: Vec<&str> = {
        let mut u: Vec<&str> = SCRIPT.iter().map(|a| a.user).collect();
        u.sort();
        u.dedup();
        u
    };
    let session_of = |user: &str| format!("{}{user}", args.prefix);
    let label_of = {
        let prefix = args.prefix.clone();
        move |session: &str| {
            session
                .strip_prefix(prefix.as_str())
                .unwrap_or(session)
                .to_owned()
        }
    };

    say!(
        "{} {} users, {} messages on per-conversation lanes; a flaky weather tool; one poisoned upload\n",
        style.bold("a2 demo:"),
        users.len(),
        SCRIPT.len()
    );
    if !args.prefix.is_empty() {
        // Runs on a shared server keep apart: say under which names.
        say!(
            "{} {}\n",
            style.dim("this run's sessions:"),
            users
                .iter()
                .map(|u| session_of(u))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    // On a database kept from an earlier run, the sessions continue: say
    // so, and follow each from where it stands.
    let mut frontiers = BTreeMap::new();
    for user in &users {
        let session = session_of(user);
        frontiers.insert(session.clone(), frontier(store.as_ref(), &session).await?);
    }
    let earlier: u64 = frontiers.values().sum();
    if earlier > 0 {
        let continued = frontiers.values().filter(|f| **f > 0).count();
        say!(
            "{} {continued} sessions with {earlier} events from an earlier run\n",
            style.bold("continuing")
        );
    }

    let clock = store.clock();
    let observer = {
        let label_of = label_of.clone();
        move |r: &AttemptReport| {
            print_attempt(style, started, &label_of(&r.session), r, clock.now_ms())
        }
    };
    let app = agent::app(
        store.clone(),
        Tuning {
            think: args.think,
            ..Tuning::default()
        },
    )
    .concurrency(8)
    .poll_interval(Duration::from_millis(50))
    .on_attempt(observer)
    .build()?;

    // The live feed: one follower per session, printing as events arrive.
    let sessions: Vec<(String, String)> = users
        .iter()
        .map(|user| (session_of(user), label_of(&session_of(user))))
        .collect();
    let (printed, feeds) = follow(&app, &sessions, &frontiers, style, started);

    play(&app, &session_of, earlier, started).await?;
    tokio::time::timeout(Duration::from_secs(30), app.idle())
        .await
        .map_err(|_| "the demo did not settle within 30 s")?;

    // Let each feed print up to the frontier before the summary.
    for (session, mut rx) in printed {
        let frontier = frontier(store.as_ref(), &session).await?;
        let _ = tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|i| *i >= frontier)).await;
    }
    for feed in feeds {
        feed.abort();
    }
    let elapsed = started.elapsed();

    let summaries = summaries(store.as_ref(), &users, &session_of).await?;
    say!();
    print_summary(style, &summaries, &label_of, elapsed, &app);
    say!();
    print_transcripts(style, &app, &users, &session_of).await?;
    app.shutdown(Duration::from_secs(1)).await;
    Ok(())
}

/// The live feed: one follower per session (`(session, label)`), from its
/// frontier before the run, printing events as they arrive. Returns, per
/// session, the index printed last, and the followers' tasks.
#[allow(clippy::type_complexity)]
fn follow(
    app: &App,
    sessions: &[(String, String)],
    frontiers: &BTreeMap<String, u64>,
    style: Style,
    started: Instant,
) -> (
    Vec<(String, watch::Receiver<u64>)>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let mut printed = Vec::new();
    let mut feeds = Vec::new();
    for (session, label) in sessions {
        let (tx, rx) = watch::channel(0u64);
        printed.push((session.clone(), rx));
        let mut stream = app.stream(session, frontiers.get(session).copied().unwrap_or(0));
        let label = label.clone();
        feeds.push(tokio::spawn(async move {
            while let Some(Ok(e)) = stream.next().await {
                print_event(style, started, &label, &e);
                let _ = tx.send(e.index);
            }
        }));
    }
    (printed, feeds)
}

/// Appends the script's messages, each at its time from `started`.
async fn play(
    app: &App,
    session_of: &dyn Fn(&str) -> String,
    earlier: u64,
    started: Instant,
) -> a2::Result<()> {
    for arrival in &SCRIPT {
        let due = started + Duration::from_millis(arrival.at_ms);
        tokio::time::sleep_until(due.into()).await;
        let payload = json!({
            "text": arrival.text,
            "conversation": arrival.conversation,
            "poison": arrival.poison,
        });
        // A poisoned upload is dead-lettered and blocks its lane for good;
        // each run's upload gets a lane of its own, so that a continued
        // session does not queue the new one behind the old dead letter.
        let lane = if arrival.poison {
            format!("upload:{}", earlier + arrival.at_ms)
        } else {
            format!("conversation:{}", arrival.conversation)
        };
        let e = NewEvent::new("user.message", payload).lane(lane);
        app.append(&session_of(arrival.user), vec![e]).await?;
    }
    Ok(())
}

/// Each user's session as `list_sessions` summarises it.
async fn summaries(
    store: &dyn Store,
    users: &[&str],
    session_of: &dyn Fn(&str) -> String,
) -> a2::Result<Vec<SessionSummary>> {
    let mut summaries = Vec::new();
    for user in users {
        let page = store
            .list_sessions(ListSessionsOptions::new(1).prefix(Some(session_of(user))))
            .await?;
        summaries.extend(
            page.sessions
                .into_iter()
                .filter(|s| s.session_id == session_of(user)),
        );
    }
    Ok(summaries)
}

/// Each user's conversations, as the transcript reducer folded them.
async fn print_transcripts(
    style: Style,
    app: &App,
    users: &[&str],
    session_of: &dyn Fn(&str) -> String,
) -> a2::Result<()> {
    for user in users {
        let transcript: Transcript = app.state(&session_of(user), TRANSCRIPT).await?;
        for (conversation, lines) in transcript {
            say!("{}", style.bold(&format!("{user} · {conversation}")));
            for line in lines {
                let role = match line.role.as_str() {
                    "user" => style.cyan("user     "),
                    "assistant" => style.green("assistant"),
                    _ => style.magenta("tool     "),
                };
                say!("  {role} {}", line.text);
            }
        }
    }
    Ok(())
}

async fn frontier(store: &dyn Store, session: &str) -> a2::Result<u64> {
    let page = store
        .read_events(session, ReadEventsOptions::new(1))
        .await?;
    Ok(page.through_index)
}

fn stamp(style: Style, started: Instant) -> String {
    style.dim(&format!("{:>6.2}s", started.elapsed().as_secs_f64()))
}

fn print_event(style: Style, started: Instant, session: &str, e: &Event) {
    let text = e.payload["text"].as_str().unwrap_or_default();
    let (kind, body) = match e.event_type.as_str() {
        "user.message" if e.payload["poison"] == true => (
            style.cyan("user     "),
            format!("{text} {}", style.dim("(poisoned)")),
        ),
        "user.message" => (style.cyan("user     "), text.to_owned()),
        "assistant.delta" => (style.dim("  …      "), style.dim(&format!("{text:?}"))),
        "assistant.reply" => (style.green("assistant"), text.to_owned()),
        "tool.call" => (
            style.yellow("tool.call"),
            format!(
                "{}({})",
                e.payload["tool"].as_str().unwrap_or("?"),
                e.payload["city"].as_str().unwrap_or("?")
            ),
        ),
        "tool.result" => (style.magenta("tool     "), text.to_owned()),
        other => (other.to_owned(), e.payload.to_string()),
    };
    say!(
        "{} {:<6} {:>4}  {kind}  {body}",
        stamp(style, started),
        session,
        format!("#{}", e.index)
    );
}

fn print_attempt(style: Style, started: Instant, session: &str, r: &AttemptReport, now_ms: i64) {
    let line = match &r.outcome {
        Outcome::Failed {
            error,
            retry_at,
            failures,
        } => style.red(&format!(
            "✗ attempt {} failed ({failures} so far): {error}; retry in {} ms",
            r.attempt,
            (retry_at - now_ms).max(0)
        )),
        Outcome::DeadLettered { error, failures } => style.red(&format!(
            "✗ dead-lettered after {}: {error}",
            count(u64::from(*failures), "failure")
        )),
        Outcome::Completed { .. } if r.attempt > 1 => {
            style.green(&format!("✓ attempt {} succeeded", r.attempt))
        }
        _ => return,
    };
    say!(
        "{} {:<6} {:>4}  {line}",
        stamp(style, started),
        session,
        format!("#{}", r.index)
    );
}

fn print_summary(
    style: Style,
    sessions: &[SessionSummary],
    label_of: &dyn Fn(&str) -> String,
    elapsed: Duration,
    app: &App,
) {
    let header = format!(
        "{:<10} {:>7} {:>8} {:>9} {:>9} {:>13}",
        "session", "events", "pending", "attempts", "failures", "dead letters"
    );
    say!(
        "{}",
        style.dim("the sessions as stored now (earlier runs included):")
    );
    say!("{}", style.bold(&header));
    let mut total = SessionSummary {
        session_id: "total".into(),
        event_count: 0,
        pending_count: 0,
        failed_count: 0,
        attempt_count: 0,
        failure_count: 0,
        first_event_at: 0,
        updated_at: 0,
        first_index: 1,
        closed_at: None,
        deadline: None,
        forked_from: None,
    };
    let row = |label: &str, s: &SessionSummary| {
        format!(
            "{:<10} {:>7} {:>8} {:>9} {:>9} {:>13}",
            label, s.event_count, s.pending_count, s.attempt_count, s.failure_count, s.failed_count
        )
    };
    for s in sessions {
        say!("{}", row(&label_of(&s.session_id), s));
        total.event_count += s.event_count;
        total.pending_count += s.pending_count;
        total.attempt_count += s.attempt_count;
        total.failure_count += s.failure_count;
        total.failed_count += s.failed_count;
    }
    say!("{}", style.bold(&row("total", &total)));
    let stats = app.stats();
    let counters: BTreeMap<&str, u64> = BTreeMap::from([
        ("claimed", stats.claimed),
        ("completed", stats.completed),
        ("failed and retried", stats.failed),
        ("dead-lettered", stats.dead_lettered),
    ]);
    let counters: Vec<String> = counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
    say!(
        "{}",
        style.dim(&format!("this run's runtime: {}", counters.join(", ")))
    );
    say!(
        "demo finished in {:.2} s; stored now: {}, {}, {}, {}",
        elapsed.as_secs_f64(),
        count(total.event_count, "event"),
        count(total.attempt_count, "attempt"),
        count(total.failure_count, "failure"),
        count(total.failed_count, "dead letter"),
    );
}
