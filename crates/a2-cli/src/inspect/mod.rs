//! `a2 inspect`: sessions with their counters, or one session's events with
//! their processing state.

mod remote;

use a2::{
    EventState, EventsPage, ListSessionsOptions, ReadEventsOptions, SessionSummary, Store,
    StoredEvent,
};

pub use remote::Server;

use crate::out::say;
use crate::style::Style;

type Failure = Box<dyn std::error::Error>;

/// Where `a2 inspect` reads from.
pub enum Source<'a> {
    /// A store this process opened.
    Store(&'a dyn Store),
    /// A running `a2 serve`, which also knows how many live feeds follow
    /// each session there (ST7).
    Server(Server),
}

impl Source<'_> {
    /// A page of sessions, with their followers when the source knows them.
    async fn sessions(
        &self,
        prefix: Option<&str>,
        cursor: Option<String>,
    ) -> Result<(Vec<(SessionSummary, Option<u64>)>, Option<String>), Failure> {
        match self {
            Source::Store(store) => {
                let page = store
                    .list_sessions(
                        ListSessionsOptions::new(200)
                            .prefix(prefix.map(str::to_owned))
                            .cursor(cursor),
                    )
                    .await?;
                Ok((
                    page.sessions.into_iter().map(|s| (s, None)).collect(),
                    page.cursor,
                ))
            }
            Source::Server(server) => {
                let (rows, cursor) = server.sessions(prefix, cursor.as_deref(), 200).await?;
                Ok((
                    rows.into_iter().map(|(s, f)| (s, Some(f))).collect(),
                    cursor,
                ))
            }
        }
    }

    async fn events(
        &self,
        session: &str,
        after: u64,
        through: Option<u64>,
    ) -> Result<EventsPage, Failure> {
        match self {
            Source::Store(store) => Ok(store
                .read_events(
                    session,
                    ReadEventsOptions::new(500)
                        .after_index(after)
                        .through_index(through),
                )
                .await?),
            Source::Server(server) => server.events(session, after, through, 500).await,
        }
    }

    fn now(&self) -> i64 {
        match self {
            Source::Store(store) => store.clock().now_ms(),
            Source::Server(_) => a2::Clock::now_ms(&a2::SystemClock),
        }
    }
}

pub async fn run(
    source: &Source<'_>,
    session: Option<&str>,
    prefix: Option<String>,
) -> Result<(), Failure> {
    let style = Style::detect();
    match session {
        None => list(source, style, prefix).await,
        Some(session) => events(source, style, session).await,
    }
}

async fn list(source: &Source<'_>, style: Style, prefix: Option<String>) -> Result<(), Failure> {
    let following = matches!(source, Source::Server(_));
    let mut header = format!(
        "{:<32} {:>8} {:>6} {:>8} {:>6} {:>9} {:>9} {:<6}",
        "session", "events", "from", "pending", "dead", "attempts", "failures", "log"
    );
    if following {
        header.push_str(&format!(" {:>9}", "followers"));
    }
    let mut cursor = None;
    let mut count = 0;
    loop {
        let first = cursor.is_none();
        let (rows, next) = source.sessions(prefix.as_deref(), cursor).await?;
        if first {
            // After the first answer: a source that cannot answer prints
            // only its error.
            say!("{}", style.bold(&header));
        }
        for (s, followers) in &rows {
            count += 1;
            // `from`: the first retained index (TR5); `log`: whether the
            // session is closed (CL5).
            let mut line = format!(
                "{:<32} {:>8} {:>6} {:>8} {:>6} {:>9} {:>9} {:<6}",
                s.session_id,
                s.event_count,
                s.first_index,
                s.pending_count,
                s.failed_count,
                s.attempt_count,
                s.failure_count,
                if s.closed_at.is_some() {
                    "closed"
                } else {
                    "open"
                }
            );
            if let Some(followers) = followers {
                line.push_str(&format!(" {followers:>9}"));
            }
            say!("{line}");
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    say!("{}", style.dim(&format!("{count} sessions")));
    Ok(())
}

async fn events(source: &Source<'_>, style: Style, session: &str) -> Result<(), Failure> {
    let now = source.now();
    let header = format!(
        "{:>6}  {:<18} {:<20} {:<30} {:>8} {:>8}  payload",
        "index", "type", "lane", "state", "attempts", "failures"
    );
    // A session exists from its first event until it is cleared.
    let (rows, _) = source.sessions(Some(session), None).await?;
    let Some((summary, _)) = rows.into_iter().find(|(s, _)| s.session_id == session) else {
        return Err(format!("session {session:?} does not exist").into());
    };
    if let Some(origin) = &summary.forked_from {
        say!(
            "{}",
            style.dim(&format!(
                "forked from {} at #{}: its events up to #{} are a copy of that session's",
                origin.session, origin.index, origin.index
            ))
        );
    }
    if summary.first_index > 1 {
        say!(
            "{}",
            style.dim(&format!(
                "trimmed: it keeps its events from #{} on",
                summary.first_index
            ))
        );
    }
    if let Some(deadline) = summary.deadline {
        say!(
            "{}",
            style.dim(&format!(
                "expires in {} ms unless written to",
                (deadline - now).max(0)
            ))
        );
    }
    if let Some(at) = summary.closed_at {
        say!(
            "{}",
            style.dim(&format!(
                "closed {} ms ago: its log is final at #{}",
                (now - at).max(0),
                summary.event_count
            ))
        );
    }
    let mut after = summary.first_index - 1;
    let mut through = None;
    loop {
        let page = source.events(session, after, through).await?;
        if through.is_none() {
            if page.through_index == 0 {
                return Err(format!("session {session:?} does not exist").into());
            }
            if let Source::Server(server) = source {
                let followers = server.followers(session).await?;
                say!(
                    "{}",
                    style.dim(&format!("{followers} following on the server now"))
                );
            }
            say!("{}", style.bold(&header));
        }
        through = Some(page.through_index);
        let Some(last) = page.events.last() else {
            break;
        };
        after = last.index();
        for e in &page.events {
            let (state, painted) = state_of(e, now);
            let painted = match painted {
                Paint::Ok => style.green(&format!("{state:<30}")),
                Paint::Bad => style.red(&format!("{state:<30}")),
                Paint::Busy => style.yellow(&format!("{state:<30}")),
                Paint::Plain => format!("{state:<30}"),
            };
            let mut payload = e.event.payload.to_string();
            if payload.len() > 60 {
                let cut = (0..=60)
                    .rev()
                    .find(|&i| payload.is_char_boundary(i))
                    .unwrap_or(0);
                payload.truncate(cut);
                payload.push('…');
            }
            say!(
                "{:>6}  {:<18} {:<20} {painted} {:>8} {:>8}  {}",
                e.index(),
                e.event.event_type,
                e.event.lane.as_deref().unwrap_or("-"),
                e.attempt_count,
                e.failure_count,
                style.dim(&payload)
            );
            if let (Some(error), None) = (&e.last_error, e.processed_at) {
                say!("{:>8}{}", "", style.red(&format!("last error: {error}")));
            }
        }
        if after >= page.through_index {
            break;
        }
    }
    Ok(())
}

enum Paint {
    Ok,
    Bad,
    Busy,
    Plain,
}

/// The event's state in the words of the HTTP API and the inspector
/// (`pending`, `delayed`, `processed`, `cancelled`, `dead_lettered`), with
/// what a person needs besides in brackets.
fn state_of(e: &StoredEvent, now: i64) -> (String, Paint) {
    match e.state() {
        EventState::Cancelled => match &e.cancel_reason {
            Some(reason) => (format!("cancelled ({reason})"), Paint::Plain),
            None => ("cancelled".into(), Paint::Plain),
        },
        EventState::DeadLettered => ("dead_lettered".into(), Paint::Bad),
        EventState::Processed => match e.processed_by_attempt {
            Some(attempt) => (format!("processed (attempt {attempt})"), Paint::Ok),
            None => ("processed (settled)".into(), Paint::Plain),
        },
        EventState::Delayed => match e.retry_at.filter(|at| *at > now) {
            Some(at) => (
                format!("delayed (due in {} ms, at {at})", at - now),
                Paint::Busy,
            ),
            None => ("delayed (due)".into(), Paint::Busy),
        },
        EventState::Pending => {
            if let (Some(holder), Some(until)) = (&e.claim_holder, e.claim_expires_at) {
                if until > now {
                    return (format!("pending (leased to {holder})"), Paint::Busy);
                }
                return ("pending (lease expired)".into(), Paint::Busy);
            }
            match e.retry_at.filter(|at| *at > now) {
                Some(at) => (format!("pending (retry in {} ms)", at - now), Paint::Busy),
                None => ("pending".into(), Paint::Busy),
            }
        }
    }
}
