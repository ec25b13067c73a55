//! `a2 inspect`: sessions with their counters, or one session's events with
//! their processing state.

use a2::{ListSessionsOptions, ReadEventsOptions, Store, StoredEvent};

use crate::out::say;
use crate::style::Style;

pub async fn run(
    store: &dyn Store,
    session: Option<&str>,
    prefix: Option<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let style = Style::detect();
    match session {
        None => list(store, style, prefix).await,
        Some(session) => events(store, style, session).await,
    }
}

async fn list(
    store: &dyn Store,
    style: Style,
    prefix: Option<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let header = format!(
        "{:<32} {:>8} {:>8} {:>6} {:>9} {:>9}",
        "session", "events", "pending", "dead", "attempts", "failures"
    );
    say!("{}", style.bold(&header));
    let mut cursor = None;
    let mut count = 0;
    loop {
        let page = store
            .list_sessions(
                ListSessionsOptions::new(200)
                    .prefix(prefix.clone())
                    .cursor(cursor),
            )
            .await?;
        for s in &page.sessions {
            count += 1;
            say!(
                "{:<32} {:>8} {:>8} {:>6} {:>9} {:>9}",
                s.session_id,
                s.event_count,
                s.pending_count,
                s.failed_count,
                s.attempt_count,
                s.failure_count
            );
        }
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    say!("{}", style.dim(&format!("{count} sessions")));
    Ok(())
}

async fn events(
    store: &dyn Store,
    style: Style,
    session: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let now = store.clock().now_ms();
    let header = format!(
        "{:>6}  {:<18} {:<20} {:<30} {:>8} {:>8}  payload",
        "index", "type", "lane", "state", "attempts", "failures"
    );
    let mut after = 0;
    let mut through = None;
    loop {
        let page = store
            .read_events(
                session,
                ReadEventsOptions::new(500)
                    .after_index(after)
                    .through_index(through),
            )
            .await?;
        if through.is_none() {
            // A session exists from its first event until it is cleared, so
            // an empty first page means there is no such session.
            if page.through_index == 0 {
                return Err(format!("session {session:?} does not exist").into());
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
                e.lane.as_deref().unwrap_or("-"),
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

fn state_of(e: &StoredEvent, now: i64) -> (String, Paint) {
    if e.failed_at.is_some() {
        return ("dead-lettered".into(), Paint::Bad);
    }
    match (e.processed_at, e.processed_by_attempt) {
        (Some(_), Some(attempt)) => return (format!("processed by attempt {attempt}"), Paint::Ok),
        (Some(_), None) => return ("settled".into(), Paint::Plain),
        _ => {}
    }
    if let (Some(holder), Some(until)) = (&e.claim_holder, e.claim_expires_at) {
        if until > now {
            return (format!("leased to {holder}"), Paint::Busy);
        }
        return ("pending (lease expired)".into(), Paint::Busy);
    }
    if let Some(at) = e.retry_at.filter(|at| *at > now) {
        return (format!("retry in {} ms", at - now), Paint::Busy);
    }
    ("pending".into(), Paint::Busy)
}
