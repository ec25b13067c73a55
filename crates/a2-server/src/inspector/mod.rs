//! The web inspector: pages rendered on the server (sessions with their
//! counters, one session's events and dead letters) plus a little
//! JavaScript for what is live (the tail of a session, its presence) and
//! for acting on dead letters. No build step: the page is this module's
//! text and `inspector.js`.
//!
//! Authorization: with tokens configured, a page needs a `read` token. A
//! browser cannot put a bearer header on a navigation, so the page's token
//! form stores the token in the `a2_token` cookie, which only these pages
//! read (the API itself takes bearer headers, so the cookie cannot be
//! used to make it write: no cross-site request forgery).

use std::fmt::Write as _;

use a2_core::{ListSessionsOptions, ReadEventsOptions, StoredEvent};
use axum::Router;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use crate::auth::{Scope, authorize};
use crate::error::{Path, Query};
use crate::state::AppState;

mod parts;
use parts::*;

const STYLE: &str = include_str!("../inspector.css");
const SCRIPT: &str = include_str!("../inspector.js");

/// Events shown on one page of a session.
const EVENTS_PAGE: usize = 100;
/// How many events the dead-letter scan of one page view reads at most.
const DEAD_LETTER_SCAN: u64 = 10_000;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(sessions_page))
        .route("/ui/sessions/{session}", get(session_page))
        .route(
            "/ui/inspector.js",
            get(|| async { ([(header::CONTENT_TYPE, "text/javascript")], SCRIPT) }),
        )
}

/// Escapes text for HTML content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a path segment or query value.
fn enc(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A store-clock time as ISO text (UTC), or an empty cell.
fn time(ms: Option<i64>) -> String {
    let Some(ms) = ms else {
        return String::new();
    };
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · a2</title><style>{STYLE}</style></head>\n<body>\
         <header><a href=\"/\" class=\"brand\">a2</a> <span>inspector</span>\
         <form id=\"token-form\" class=\"token\"><input id=\"token\" type=\"password\" \
         placeholder=\"bearer token\" autocomplete=\"off\"><button>use token</button></form></header>\n\
         <main>{body}</main>\n<script src=\"/ui/inspector.js\"></script></body></html>",
        title = esc(title),
    ))
}

/// The page a request without the right token gets: the token form.
fn locked(error: crate::ApiError) -> Response {
    let body = format!(
        "<h1>Token needed</h1><p class=\"error\" id=\"locked\">{}</p>\
         <p>This server needs a bearer token with the <code>read</code> scope: \
         enter it above (it is kept in a cookie of this browser).</p>",
        esc(&error.body().error.message)
    );
    (error.status(), page("token needed", &body)).into_response()
}

/// Authorizes a page: the bearer header, `access_token`, or the cookie.
fn allowed(state: &AppState, parts: &Parts) -> Result<(), crate::ApiError> {
    if authorize(state, parts, Scope::Read).is_ok() {
        return Ok(());
    }
    let mut with_cookie = Parts::clone(parts);
    if let Some(token) = cookie_token(&parts.headers)
        && let Ok(value) = format!("Bearer {token}").parse()
    {
        with_cookie.headers.insert(header::AUTHORIZATION, value);
    }
    authorize(state, &with_cookie, Scope::Read)
}

/// A page's reader, authorized as [`allowed`] says (after the path and
/// query are read): a request without the right token gets the token
/// form instead of the page.
struct Reader;

impl FromRequestParts<AppState> for Reader {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        allowed(state, parts).map(|()| Reader).map_err(locked)
    }
}

fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == "a2_token").then(|| {
                serde_urlencoded::from_str::<Vec<(String, String)>>(&format!("t={v}"))
                    .ok()
                    .and_then(|mut p| p.pop())
                    .map(|(_, v)| v)
                    .unwrap_or_default()
            })
        })
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    prefix: Option<String>,
    cursor: Option<String>,
}

async fn sessions_page(
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
    _: Reader,
) -> Response {
    let prefix = query.prefix.filter(|p| !p.is_empty());
    let options = ListSessionsOptions::new(50)
        .prefix(prefix.clone())
        .cursor(query.cursor.filter(|c| !c.is_empty()));
    let list = match state.store.list_sessions(options).await {
        Ok(list) => list,
        Err(e) => return store_error(e),
    };
    let mut body = format!(
        "<h1>Sessions</h1><form class=\"search\" method=\"get\" action=\"/\">\
         <input id=\"prefix\" name=\"prefix\" placeholder=\"session id prefix\" value=\"{}\">\
         <button>search</button></form>",
        esc(prefix.as_deref().unwrap_or(""))
    );
    body.push_str(
        "<table id=\"sessions\"><thead><tr><th>session</th><th>events</th><th>pending</th>\
         <th>dead</th><th>attempts</th><th>failures</th><th>followers</th><th>updated</th></tr></thead><tbody>",
    );
    for s in &list.sessions {
        let _ = write!(
            body,
            "<tr data-session=\"{id}\"><td><a href=\"/ui/sessions/{link}\">{id}</a>{closed}</td>\
             <td>{}</td><td>{}</td><td class=\"{dead_class}\">{}</td><td>{}</td><td>{}</td>\
             <td class=\"followers\">{}</td><td>{}</td></tr>",
            s.event_count,
            s.pending_count,
            s.failed_count,
            s.attempt_count,
            s.failure_count,
            state.store.session_followers(&s.session_id),
            time(Some(s.updated_at)),
            id = esc(&s.session_id),
            link = enc(&s.session_id),
            dead_class = if s.failed_count > 0 { "dead" } else { "" },
            closed = if s.closed_at.is_some() {
                " <span class=\"closed\">closed</span>"
            } else {
                ""
            },
        );
    }
    if list.sessions.is_empty() {
        body.push_str("<tr><td colspan=\"8\" class=\"empty\">no sessions</td></tr>");
    }
    body.push_str("</tbody></table>");
    if let Some(cursor) = &list.cursor {
        let _ = write!(
            body,
            "<p><a id=\"next-page\" href=\"/?prefix={}&cursor={}\">next page →</a></p>",
            enc(prefix.as_deref().unwrap_or("")),
            enc(cursor)
        );
    }
    page("sessions", &body).into_response()
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct EventsQuery {
    after_index: Option<u64>,
    through_index: Option<u64>,
    /// The frontier when the first page was shown, kept by the paging
    /// links so that pages stay put while events are appended (I2).
    frontier: Option<u64>,
}

async fn session_page(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Query(query): Query<EventsQuery>,
    _: Reader,
) -> Response {
    if let Err(e) = a2_core::validate::session_id(&session) {
        return store_error(e);
    }
    let summary = state.streams.summary(&session).await.ok().flatten();
    // The newest events first: without a page asked for, the last page.
    let frontier = query
        .frontier
        .or(summary.as_ref().map(|s| s.event_count))
        .unwrap_or(0);
    // A trimmed session's pages start at its first retained index (TR3).
    let first = summary.as_ref().map_or(1, |s| s.first_index);
    let (after, through) = match query.after_index {
        Some(after) => (
            after.max(first - 1),
            query.through_index.unwrap_or(frontier),
        ),
        None => (
            frontier.saturating_sub(EVENTS_PAGE as u64).max(first - 1),
            frontier,
        ),
    };
    let options = ReadEventsOptions::new(EVENTS_PAGE)
        .after_index(after)
        .through_index(Some(through));
    let events = match state.store.read_events(&session, options).await {
        Ok(page) => page,
        Err(e) => return store_error(e),
    };
    if summary.is_none() && events.through_index == 0 {
        // A session exists from its first event until it is cleared.
        let body = format!(
            "<h1>No session {id}</h1><p class=\"empty\" id=\"no-session\">There is no session \
             <code>{id}</code>: it has no events. It may never have been written to, or it was \
             cleared. <a href=\"/?prefix={link}\">Sessions whose id starts with it</a> · \
             <a href=\"/\">all sessions</a></p>",
            id = esc(&session),
            link = enc(&session),
        );
        return (StatusCode::NOT_FOUND, page(&session, &body)).into_response();
    }
    let dead = match dead_letters(&state, &session, first).await {
        Ok(dead) => dead,
        Err(e) => return store_error(e),
    };

    let mut body = format!(
        "<h1 id=\"session\" data-session=\"{id}\" data-frontier=\"{frontier}\">{id}</h1>",
        id = esc(&session),
    );
    if let Some(s) = &summary {
        body.push_str(&counters(s, state.store.session_followers(&session)));
    }
    body.push_str(
        "<div class=\"columns\"><section><h2>Events</h2>\
         <form id=\"event-filter\" class=\"filter\">\
         <select id=\"filter-state\"><option value=\"\">every state</option>\
         <option value=\"pending\">pending</option><option value=\"delayed\">delayed</option>\
         <option value=\"processed\">processed</option><option value=\"cancelled\">cancelled</option>\
         <option value=\"dead_lettered\">dead_lettered</option></select> \
         <input id=\"filter-type\" placeholder=\"type starts with\"></form>",
    );
    body.push_str(&fork_form(&session, frontier));
    body.push_str(&events_table(&session, &events, frontier, first));
    body.push_str("</section><aside><div class=\"panel\">");
    body.push_str(&dead_letters_table(&dead.0, dead.1));
    body.push_str(
        "</div><div class=\"panel\"><h2>Live tail <span id=\"tail-status\" class=\"status\">connecting</span></h2>\
         <ol id=\"tail\"></ol></div>\
         <div class=\"panel\"><h2>Presence</h2><table id=\"presence\"><thead><tr><th>participant</th><th>field</th>\
         <th>value</th></tr></thead><tbody></tbody></table></div></aside></div>",
    );
    page(&session, &body).into_response()
}

/// The session's dead letters among its first [`DEAD_LETTER_SCAN`]
/// retained events (from `first_index`, TR3), and whether the scan stopped
/// before the end.
async fn dead_letters(
    state: &AppState,
    session: &str,
    first_index: u64,
) -> a2_core::Result<(Vec<StoredEvent>, bool)> {
    let mut found = Vec::new();
    let mut after = first_index - 1;
    let mut through = None;
    loop {
        let page = state
            .store
            .read_events(
                session,
                ReadEventsOptions::new(1_000)
                    .after_index(after)
                    .through_index(through),
            )
            .await?;
        through = Some(page.through_index);
        let Some(last) = page.events.last().map(|e| e.event.index) else {
            return Ok((found, false));
        };
        found.extend(page.events.into_iter().filter(|e| e.failed_at.is_some()));
        if last >= page.through_index {
            return Ok((found, false));
        }
        if last - (first_index - 1) >= DEAD_LETTER_SCAN {
            return Ok((found, true));
        }
        after = last;
    }
}

fn store_error(error: a2_core::Error) -> Response {
    let error = crate::ApiError::from(error);
    let status = error.status();
    let body = format!(
        "<h1>Error</h1><p class=\"error\">{}: {}</p>",
        esc(error.code()),
        esc(&error.body().error.message)
    );
    (status, page("error", &body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn text_is_escaped_and_encoded() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(enc("chat/1 é"), "chat%2F1%20%C3%A9");
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(time(Some(0)), "1970-01-01 00:00:00");
        assert_eq!(time(Some(1_709_251_199_000)), "2024-02-29 23:59:59");
        assert_eq!(time(None), "");
    }

    #[test]
    fn the_cookie_token_is_found() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, "x=1; a2_token=ab%2Bc; y=2".parse().unwrap());
        assert_eq!(cookie_token(&headers).as_deref(), Some("ab+c"));
    }

    #[test]
    fn status_codes_pass_through() {
        let response = locked(crate::ApiError::unauthorized("no"));
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
}
