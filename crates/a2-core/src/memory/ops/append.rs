//! `append` and `append_and_claim` (A1, A2, A3, A4, A5, A6, A7, A8, A9,
//! A10, A11, AC1, AC2, AC3, AC4, AC5), with a close (CL6): the decisions
//! are [`rules::append`]'s.

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn append_sync(
        &self,
        session_id: &str,
        events: Vec<NewEvent>,
        claim: Option<&AppendClaim>,
        expiry: Option<Expiry>,
        if_frontier: Option<u64>,
        close: bool,
    ) -> Result<AppendOutcome> {
        // The session id, the claim and the close passed
        // `validate::append_request` in `Store::append_with`.
        let payloads = validate::encode_batch(&events, &self.inner.options.limits, true)?;
        let events = self.assign_ids(events)?;
        let mut guard = self.inner.lock()?;
        let now = self.now();
        // DL1: a due time more than 100 years ahead, before anything is written.
        rules::delay::due_times(&events, now)?;
        // AC1: the lease is checked like a claim's, before anything is written.
        let claim = match claim {
            Some(claim) => {
                let expires_at = validate::claim_expiry(claim.lease, now)?;
                Some((claim, expires_at))
            }
            None => None,
        };
        // EX1: the expiry is checked before anything is written.
        let expiry = expiry
            .map(|e| validate::session_expiry(e, now))
            .transpose()?;
        let State {
            sessions,
            pending,
            feeds,
            deadlines,
            ..
        } = &mut *guard;
        // One look-up for every check; the write looks it up once more.
        if let Some(answer) =
            answer_unwritten(session_id, sessions.get(session_id), &events, if_frontier)?
        {
            return Ok(answer);
        }
        // EX2: this append's expiry, or the store's default for a new
        // session, checked before anything is written.
        let set = match expiry {
            Some(expiry) => Some(expiry),
            None if !sessions.contains_key(session_id) => self
                .inner
                .options
                .default_expiry
                .map(|e| validate::session_expiry(e, now))
                .transpose()?,
            None => None,
        };
        let session = match sessions.get_mut(session_id) {
            Some(session) => session,
            None => {
                let id: Arc<str> = Arc::from(session_id);
                sessions
                    .entry(id.clone())
                    .or_insert_with(|| SessionState::new(id))
            }
        };
        let first = session.frontier() + 1;
        // PS2: whether the session had pending work but none claimable
        // (all of it leased, waiting for a time or behind a lane head).
        let idle = session.has_pending() && !session.has_claimable(now);
        let mut rows = write_events(session, events, &payloads, None, now);
        if let Some(expiry) = set {
            session.expiry = (!expiry.is_none()).then_some(expiry);
            if let Some(deadline) = session.deadline() {
                deadlines.insert((deadline, session.id.clone()));
            }
        }
        let claimed = match claim {
            Some((claim, expires_at)) => {
                claim_appended(session, &mut rows, first, claim, expires_at, now)?
            }
            None => Vec::new(),
        };
        if close {
            // CL6: closed at the frontier it reached, in the same step; its
            // feeds, woken below, read the last events and end (CL4).
            session.closed = Some((session.frontier(), now));
        }
        // AC5: work all claimed by its appender is nobody else's to take;
        // counted only when a wake-up would go out at all. Announced when
        // the pending count rose from zero, or when the session had nothing
        // claimable before (PS2).
        if (sync_pending(pending, session) || idle)
            && self.inner.wakeups.receiver_count() > 0
            && rows.iter().filter(|r| r.is_pending()).count() > claimed.len()
        {
            let _ = self.inner.wakeups.send(session.id.clone());
        }
        let wake = FeedWake::of(feeds, session);
        let has_pending = session.has_pending();
        drop(guard);
        wake.send();
        Ok(AppendOutcome {
            events: rows,
            has_pending,
            claimed,
        })
    }
}

/// What an append answers without writing, decided before anything is
/// written (`current`: the session, if it has events): an empty batch
/// (A2), a retry (A5), or an error for a partial duplicate (A6) or a bad
/// cause (A7). `None`: the batch is to be written.
fn answer_unwritten(
    session_id: &str,
    current: Option<&SessionState>,
    events: &[NewEvent],
    if_frontier: Option<u64>,
) -> Result<Option<AppendOutcome>> {
    if events.is_empty() {
        return Ok(Some(AppendOutcome {
            events: Vec::new(),
            has_pending: current.is_some_and(|s| s.has_pending()),
            claimed: Vec::new(),
        }));
    }
    // A5 / A6; ids of other sessions are other events (A4).
    let index_of = |id: &str| Ok(current.and_then(|s| s.index_of(id)));
    if let (rules::append::Existing::All(existing), Some(session)) =
        (rules::append::existing(events, index_of)?, current)
    {
        return retry_rows(session, events, &existing).map(Some);
    }
    // CL2: a closed session's log is final; only replays pass.
    rules::lifecycle::check_open(session_id, current.is_some_and(|s| s.closed.is_some()))?;
    // A13: only at the frontier the caller expects.
    rules::append::check_frontier(session_id, if_frontier, current.map_or(0, |s| s.frontier()))?;
    // A7; a cause that was trimmed away is TR3's.
    let first = current.map_or(1, |s| s.first_index());
    for (position, event) in events.iter().enumerate() {
        if let Some(cause) = event.cause {
            rules::lifecycle::check_cause_retained(session_id, first, cause.index)?;
            let record = current.and_then(|s| s.record(cause.index));
            rules::append::check_cause(session_id, position, cause, record)?;
        }
    }
    Ok(None)
}

/// AC2: leases the appended events (`rows`, from index `first` on) that
/// are ready at once to the claim's holder, up to its limit, and puts
/// their leased rows in `rows`. Returns their indexes, ascending.
fn claim_appended(
    session: &mut SessionState,
    rows: &mut [StoredEvent],
    first: u64,
    claim: &AppendClaim,
    expires_at: Millis,
    now: Millis,
) -> Result<Vec<u64>> {
    let limit = validate::effective_limit(claim.limit);
    let claimed = session.claim_appended(first, now, &claim.holder, expires_at, limit);
    for &index in &claimed {
        // `first ≤ index`, and the rows start at `first`.
        let at = (index - first) as usize;
        rows[at] = rec_row(session, index)?;
    }
    Ok(claimed)
}

/// A5: every id exists in this session; the batch is a retry if each event
/// has the stored type and payload. Returns the stored rows by index.
fn retry_rows(
    session: &SessionState,
    events: &[NewEvent],
    existing: &[u64],
) -> Result<AppendOutcome> {
    let mut rows = Vec::with_capacity(events.len());
    for (event, &index) in events.iter().zip(existing) {
        let row = rec_row(session, index)?;
        rules::append::check_retry(event, &row.event)?;
        rows.push(row);
    }
    rows.sort_by_key(|r| r.event.index);
    Ok(AppendOutcome {
        events: rows,
        has_pending: session.has_pending(),
        claimed: Vec::new(),
    })
}
