//! The reads of the Redis store: `read` (R1), `read_history` (R2),
//! `read_state` (S1), `pending_sessions` (PS1), `list_sessions` (I1),
//! `read_events` (I2), `list_snapshots` (I3); each checks what it returns
//! for holes (E1).

use a2_core::rules::read::missing;
use a2_core::validate;
use a2_core::*;

use crate::inner::{Inner, PAGE};
use crate::ops::{self, read::Bounds, read::Page};

use super::shares::{self, Share};
use super::*;

impl Inner {
    /// One ascending page of rows, with the session's bounds.
    pub(super) async fn read_page(
        &self,
        session: &str,
        after: u64,
        through: Option<u64>,
        count: usize,
    ) -> Result<(Bounds, Vec<StoredEvent>)> {
        let page = Page::Asc { after, through };
        let reply = self.read_reply(session, &page, count).await?;
        ops::read::decode(session, reply)
    }

    /// Every row in `after < index ≤ min(through, frontier)`, a page at a
    /// time, up to one frontier (R1).
    pub(super) async fn read_rows(
        &self,
        session: &str,
        after: u64,
        through: Option<u64>,
        limit: usize,
    ) -> Result<(u64, Vec<StoredEvent>)> {
        let mut rows = Vec::new();
        let mut gapless = rules::read::Gapless::after(session, after);
        let mut through = through;
        let mut frontier = None;
        loop {
            let want = (limit - rows.len()).min(PAGE);
            let (bounds, page) = self
                .read_page(session, gapless.last(), through, want)
                .await?;
            // TR3: the events after `after` must all be retained; a later
            // page that finds them trimmed meanwhile says so too.
            rules::lifecycle::check_retained(session, bounds.first, gapless.last())?;
            let last = bounds.frontier;
            let bound = *frontier.get_or_insert(through.map_or(last, |t| t.min(last)));
            through = Some(bound);
            let got = page.len();
            // Every index up to the bound exists (E1): a hole is an error,
            // never silently skipped.
            for row in &page {
                gapless.next(row.event.index)?;
            }
            rows.extend(page);
            if rows.len() >= limit || gapless.last() >= bound {
                return Ok((bound, rows));
            }
            if got < want {
                gapless.reached(bound)?;
            }
        }
    }
}

impl RedisStore {
    pub(super) async fn read_op(
        &self,
        session: &str,
        range: ReadRange,
    ) -> Result<Vec<StoredEvent>> {
        self.inner.check_open()?;
        validate::session_id(session)?;
        if range.through_index.is_some_and(|t| t <= range.after_index) {
            return Ok(Vec::new());
        }
        let (_, rows) = self
            .inner
            .read_rows(session, range.after_index, range.through_index, usize::MAX)
            .await?;
        Ok(rows)
    }

    pub(super) async fn read_history_op(
        &self,
        session: &str,
        options: HistoryOptions,
    ) -> Result<HistoryPage> {
        let inner = self.open()?;
        validate::session_id(session)?;
        let limit = validate::page_limit(options.limit)?;
        let mut before = options.before_index;
        let mut newest_first = Vec::new();
        let mut first = 1;
        while newest_first.len() < limit {
            let want = (limit - newest_first.len()).min(PAGE);
            let args = ops::read::encode(&Page::Desc { before }, want);
            let reply = inner
                .run(&ops::read::SCRIPT, session, inner.now(), args)
                .await?;
            let (bounds, page) = ops::read::decode(session, reply)?;
            // TR3: a page reaches back at most to the first retained event.
            first = bounds.first;
            let got = page.len();
            // Contiguous down from the first page's start (E1).
            let frontier = bounds.frontier;
            let mut expect = before.map_or(frontier, |b| b.min(frontier + 1).saturating_sub(1));
            for row in &page {
                if row.event.index != expect {
                    return Err(missing(session, expect));
                }
                expect -= 1;
            }
            if let Some(oldest) = page.last() {
                before = Some(oldest.event.index);
            }
            newest_first.extend(page);
            if expect < first {
                break;
            }
            if got < want {
                return Err(missing(session, expect));
            }
        }
        newest_first.reverse();
        let has_more = newest_first.first().is_some_and(|e| e.event.index > first);
        Ok(HistoryPage {
            events: newest_first,
            has_more,
            first_index: first,
        })
    }

    pub(super) async fn pending_sessions_op(&self, page: PageRequest) -> Result<SessionPage> {
        let inner = self.open()?;
        validate::limit("limit", page.limit)?;
        let min = match &page.cursor {
            Some(cursor) => [b"(", cursor.as_bytes()].concat(),
            None => b"-".to_vec(),
        };
        let limit = validate::effective_limit(page.limit);
        let parts = inner.layout.partitions();
        let now = inner.now();
        let (sessions, cursor) = shares::page(parts.len(), limit, String::as_str, |asked| {
            let calls: Vec<(&str, ops::Args)> = asked
                .iter()
                .map(|&(p, quota)| {
                    let part = &parts[p];
                    let args = ops::sessions::encode_pending(&part.base, &min, quota, now);
                    (part.pending.as_str(), args)
                })
                .collect();
            async move {
                pipelined(inner, &ops::sessions::PENDING, &calls)
                    .await?
                    .into_iter()
                    .map(|reply| {
                        // The script goes on past sessions it drops, so
                        // it gives fewer than asked only when it ran out.
                        let ids = ops::sessions::decode_pending(reply)?;
                        Ok(Share {
                            seen: ids.len(),
                            last: ids.last().cloned(),
                            items: ids,
                        })
                    })
                    .collect()
            }
        })
        .await?;
        Ok(SessionPage { sessions, cursor })
    }

    pub(super) async fn read_state_op(&self, session: &str, reducer: &str) -> Result<StateRead> {
        let inner = self.open()?;
        validate::session_id(session)?;
        validate::name("reducer", reducer)?;
        let reply = inner
            .run(
                &ops::read_state::SCRIPT,
                session,
                inner.now(),
                ops::read_state::encode(reducer, PAGE),
            )
            .await?;
        let (frontier, first, stored, mut events) = ops::read_state::decode(session, reply)?;
        let snapshot = match stored {
            Some(stored) => {
                let (index, _, state) = ops::snapshots::parse(&stored)?;
                Some(Snapshot { index, state })
            }
            None => None,
        };
        // TR3: the fold needs every event after the snapshot.
        rules::lifecycle::check_retained(session, first, snapshot.as_ref().map_or(0, |s| s.index))?;
        // Events are immutable: later pages up to the frontier read in the
        // script complete the same atomic view (S1).
        let mut last = events
            .last()
            .map_or(snapshot.as_ref().map_or(0, |s| s.index), |e| e.index);
        while last < frontier {
            let (_, page) = inner
                .read_events_after(session, last, PAGE.min((frontier - last) as usize))
                .await?;
            if page.is_empty() {
                return Err(missing(session, last + 1));
            }
            events.extend(page.into_iter().filter(|e| e.index <= frontier));
            last = events.last().map_or(last, |e| e.index);
        }
        // Every event after the snapshot, none missing (E1).
        let mut gapless =
            rules::read::Gapless::after(session, snapshot.as_ref().map_or(0, |s| s.index));
        for event in &events {
            gapless.next(event.index)?;
        }
        Ok(StateRead { snapshot, events })
    }

    pub(super) async fn list_sessions_op(
        &self,
        options: ListSessionsOptions,
    ) -> Result<SessionList> {
        let inner = self.open()?;
        validate::limit("limit", options.limit)?;
        let now = inner.now();
        let prefix = options.prefix.as_deref().filter(|p| !p.is_empty());
        let from_prefix = prefix.map(|p| [b"[", p.as_bytes()].concat());
        let min = match (&options.cursor, prefix) {
            (Some(cursor), Some(p)) if cursor.as_str() < p => from_prefix.clone(),
            (Some(cursor), _) => Some([b"(", cursor.as_bytes()].concat()),
            (None, _) => from_prefix,
        }
        .unwrap_or_else(|| b"-".to_vec());
        // UTF-8 never holds the byte 0xFF, so every id starting with the
        // prefix sorts before `prefix + 0xFF`.
        let max = prefix
            .map(|p| [b"(", p.as_bytes(), b"\xff"].concat())
            .unwrap_or_else(|| b"+".to_vec());
        let limit = validate::effective_limit(options.limit);
        let parts = inner.layout.partitions();
        fn id(s: &SessionSummary) -> &str {
            s.session_id.as_str()
        }
        let (sessions, cursor) = shares::page(parts.len(), limit, id, |asked| {
            let calls: Vec<(&str, ops::Args)> = asked
                .iter()
                .map(|&(p, quota)| {
                    let part = &parts[p];
                    let args = ops::sessions::encode_list(&part.base, &min, &max, quota);
                    (part.sessions.as_str(), args)
                })
                .collect();
            async move {
                pipelined(inner, &ops::sessions::LIST, &calls)
                    .await?
                    .into_iter()
                    .map(|reply| {
                        let (items, seen, last) = ops::sessions::decode_list(reply, now)?;
                        Ok(Share { items, seen, last })
                    })
                    .collect()
            }
        })
        .await?;
        Ok(SessionList { sessions, cursor })
    }

    pub(super) async fn read_events_op(
        &self,
        session: &str,
        options: ReadEventsOptions,
    ) -> Result<EventsPage> {
        self.inner.check_open()?;
        validate::session_id(session)?;
        validate::limit("limit", options.limit)?;
        let (through_index, events) = self
            .inner
            .read_rows(
                session,
                options.after_index,
                options.through_index,
                validate::effective_limit(options.limit),
            )
            .await?;
        Ok(EventsPage {
            events,
            through_index,
        })
    }

    pub(super) async fn list_snapshots_op(&self, session: &str) -> Result<Vec<SnapshotInfo>> {
        let inner = self.open()?;
        validate::session_id(session)?;
        let keys = inner.session_keys(session);
        // EX3: an expired session's snapshots are gone with it, whatever
        // its keys still hold until the server expires them.
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&keys.meta).arg("exp").arg("updated_at");
        let meta = crate::codec::array(inner.transport.call_replayable(cmd).await?)?;
        if let [exp, updated_at] = &meta[..]
            && let Some(exp) = crate::codec::opt_string(exp.clone())?
        {
            let updated_at = crate::codec::opt_int(updated_at.clone())?.unwrap_or(0);
            let deadline = ops::sessions::parse_expiry(&exp)?.deadline(updated_at);
            if rules::lifecycle::expired(deadline, inner.now()) {
                return Ok(Vec::new());
            }
        }
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&keys.snapshots);
        let reply = inner.transport.call_replayable(cmd).await?;
        let mut items = match reply {
            redis::Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            other => crate::codec::array(other)?,
        }
        .into_iter();
        let mut snapshots = Vec::new();
        while let (Some(reducer), Some(stored)) = (items.next(), items.next()) {
            let (index, updated_at, _) = ops::snapshots::parse(&crate::codec::string(stored)?)?;
            snapshots.push(SnapshotInfo {
                reducer: crate::codec::string(reducer)?,
                index,
                updated_at,
            });
        }
        snapshots.sort_by(|a, b| a.reducer.cmp(&b.reducer));
        Ok(snapshots)
    }
}
