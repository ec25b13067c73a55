//! The pieces of a session's page: its counters, its events table with
//! each row's state and actions, and its dead letters.

use std::fmt::Write as _;

use a2_core::{EventsPage, SessionSummary, StoredEvent};

use super::{DEAD_LETTER_SCAN, EVENTS_PAGE, enc, esc, time};

/// A row's state, as the JSON API names it ([`StoredEvent::state`]).
pub(super) fn state_of(e: &StoredEvent) -> &'static str {
    e.state().name()
}

/// What a row's state cell says besides the state: a delayed event's due
/// time, a cancelled event's reason.
fn state_note(e: &StoredEvent) -> String {
    match state_of(e) {
        "delayed" => format!(" <small class=\"due\">until {}</small>", time(e.retry_at)),
        "cancelled" => match &e.cancel_reason {
            Some(reason) => format!(" <small class=\"reason\">{}</small>", esc(reason)),
            None => String::new(),
        },
        _ => String::new(),
    }
}

/// The cancel button of an event still to run (CN1): `inspector.js` posts
/// it to the cancel route with the page's token (`append` scope).
fn cancel_button(e: &StoredEvent) -> String {
    if e.is_pending() {
        format!(
            "<button class=\"cancel\" data-index=\"{}\" title=\"cancel this event: it will not run, or its handler is told to stop\">cancel</button>",
            e.event.index
        )
    } else {
        String::new()
    }
}

/// How many characters of a payload a row shows before it is cut.
pub(super) const PREVIEW_CHARS: usize = 120;

pub(super) fn payload_preview(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if text.chars().count() > PREVIEW_CHARS {
        let cut: String = text.chars().take(PREVIEW_CHARS).collect();
        format!("{cut}…")
    } else {
        text
    }
}

/// A payload cell: the compact JSON, or its first 120 characters that
/// open to the whole value, pretty-printed.
pub(super) fn payload_cell(value: &serde_json::Value) -> String {
    let preview = payload_preview(value);
    // A preview that was not cut is the whole value.
    if preview.chars().count() <= PREVIEW_CHARS {
        return format!("<code>{}</code>", esc(&preview));
    }
    let whole = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    format!(
        "<details class=\"payload\"><summary><code>{}</code></summary><pre>{}</pre></details>",
        esc(&preview),
        esc(&whole)
    )
}

pub(super) fn event_row(e: &StoredEvent) -> String {
    let state = state_of(e);
    format!(
        "<tr data-index=\"{index}\" data-state=\"{state}\" data-type=\"{kind}\" class=\"{state}\">\
         <td>{index}</td><td>{id}</td><td>{kind}</td>\
         <td><span class=\"state {state}\">{state}</span>{note}</td><td>{lane}</td><td>{attempts}</td>\
         <td>{failures}</td><td>{holder}</td><td class=\"error\">{error}</td><td>{created}</td>\
         <td>{payload}</td><td><button class=\"fork\" data-index=\"{index}\" \
         title=\"branch the session after this event\">fork here</button>{cancel}</td></tr>",
        index = e.event.index,
        id = esc(&e.event.id),
        kind = esc(&e.event.event_type),
        lane = esc(e.event.lane.as_deref().unwrap_or("")),
        attempts = e.attempt_count,
        failures = e.failure_count,
        holder = esc(e.claim_holder.as_deref().unwrap_or("")),
        error = esc(e.last_error.as_deref().unwrap_or("")),
        created = time(Some(e.event.created_at)),
        payload = payload_cell(&e.event.payload),
        note = state_note(e),
        cancel = cancel_button(e),
    )
}

/// "1 event", "2 events".
pub(super) fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The session's counters (I1) and its live followers in this process
/// (ST7), one line.
pub(super) fn counters(s: &SessionSummary, followers: usize) -> String {
    format!(
        "<p class=\"counters\"><span data-counter=\"event_count\">{}</span> · \
         <span data-counter=\"pending_count\">{} pending</span> · \
         <span data-counter=\"failed_count\">{} dead-lettered</span> · \
         <span data-counter=\"attempt_count\">{}</span> · \
         <span data-counter=\"failure_count\">{}</span> · \
         <span class=\"followers\" data-counter=\"followers\">{} following here</span> · \
         first {} · <span data-counter=\"updated_at\">updated {}</span>{}{}{}{}</p>",
        count(s.event_count, "event"),
        s.pending_count,
        s.failed_count,
        count(s.attempt_count, "attempt"),
        count(s.failure_count, "failure"),
        followers,
        time(Some(s.first_event_at)),
        time(Some(s.updated_at)),
        if s.first_index > 1 {
            format!(
                " · <span id=\"trimmed\">kept from #{} (trimmed)</span>",
                s.first_index
            )
        } else {
            String::new()
        },
        match s.closed_at {
            Some(at) => format!(
                " · <span id=\"closed\" class=\"closed\">closed {}</span>",
                time(Some(at))
            ),
            None => String::new(),
        },
        match s.deadline {
            Some(at) => format!(" · <span id=\"expires\">expires {}</span>", time(Some(at))),
            None => String::new(),
        },
        match &s.forked_from {
            Some(origin) => format!(
                " · <span id=\"forked\">forked from <a href=\"/ui/sessions/{}\">{}</a> at #{}</span>",
                enc(&origin.session),
                esc(&origin.session),
                origin.index
            ),
            None => String::new(),
        },
    )
}

/// The form of the "fork here" buttons (FK1): the index a row's button
/// sets, the new session's name, and where the answer shows.
pub(super) fn fork_form(session: &str, frontier: u64) -> String {
    format!(
        "<form id=\"fork-form\" class=\"filter\"><label>fork at #<input id=\"fork-index\" \
         type=\"number\" min=\"1\" value=\"{frontier}\"></label> <label>as <input id=\"fork-target\" \
         value=\"{name}\"></label> <button id=\"fork-submit\">fork</button> \
         <span id=\"fork-status\"></span></form>",
        name = esc(&format!("{session}-fork")),
    )
}

/// A page of the session's events, and the link to the next page.
pub(super) fn events_table(
    session: &str,
    events: &EventsPage,
    frontier: u64,
    first_index: u64,
) -> String {
    let mut body = String::from(
        "<table id=\"events\"><thead><tr><th>#</th><th>id</th><th>type</th><th>state</th>\
         <th>lane</th><th>attempts</th><th>failures</th><th>holder</th><th>last error</th>\
         <th>created</th><th>payload</th><th></th></tr></thead><tbody>",
    );
    // Newest first.
    for e in events.events.iter().rev() {
        body.push_str(&event_row(e));
    }
    if events.events.is_empty() {
        body.push_str("<tr><td colspan=\"12\" class=\"empty\">no events</td></tr>");
    }
    body.push_str("</tbody></table><p class=\"paging\">");
    let link = |id: &str, after: u64, through: u64, text: &str| {
        format!(
            "<a id=\"{id}\" href=\"/ui/sessions/{}?after_index={after}&through_index={through}&frontier={frontier}\">{text}</a> ",
            enc(session)
        )
    };
    if let Some(last) = events.events.last()
        && last.event.index < frontier
    {
        body.push_str(&link("newer-page", last.event.index, frontier, "← newer"));
        body.push_str(&format!(
            "<a id=\"newest-page\" href=\"/ui/sessions/{}\">newest</a> ",
            enc(session)
        ));
    }
    if let Some(first) = events.events.first()
        && first.event.index > first_index
    {
        let through = first.event.index - 1;
        let after = through
            .saturating_sub(EVENTS_PAGE as u64)
            .max(first_index - 1);
        body.push_str(&link("older-page", after, through, "older →"));
    }
    body.push_str("</p>");
    body
}

/// The session's dead letters with their revive buttons; `partial` when
/// only the first events were searched.
pub(super) fn dead_letters_table(dead: &[StoredEvent], partial: bool) -> String {
    let mut body = String::from(
        "<h2>Dead letters</h2><table id=\"dead-letters\"><thead><tr><th>#</th><th>type</th><th>failures</th><th>last error</th><th></th></tr></thead><tbody>",
    );
    for e in dead {
        let _ = write!(
            body,
            "<tr data-index=\"{index}\"><td>{index}</td><td>{kind}</td><td>{failures}</td>\
             <td class=\"error\">{error}</td><td>{button}</td></tr>",
            index = e.event.index,
            kind = esc(&e.event.event_type),
            failures = e.failure_count,
            error = esc(e.last_error.as_deref().unwrap_or("")),
            button = revive_button(e.event.index),
        );
    }
    if dead.is_empty() {
        body.push_str("<tr><td colspan=\"5\" class=\"empty\">none</td></tr>");
    }
    body.push_str("</tbody></table>");
    if partial {
        let _ = write!(
            body,
            "<p class=\"note\">only the first {DEAD_LETTER_SCAN} events were searched</p>"
        );
    }
    body
}

/// The revive button of a dead letter (`inspector.js` posts it to the
/// revive route with the page's token, which needs the `admin` scope).
pub(super) fn revive_button(index: u64) -> String {
    format!("<button class=\"revive\" data-index=\"{index}\">revive</button>")
}
