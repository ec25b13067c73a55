//! What an append writes: its rows as arrays, one element per event, and
//! the statements that insert them.

use std::collections::HashSet;

use a2_core::{AppendClaim, Millis, NewEvent, Result, rules};

use crate::session::bound;
use crate::sql::owned;
use crate::sql::{corrupt, encode, sql_attempt, sql_index};
use crate::writes::Writes;

/// The rows a batch writes, as arrays with one element per event: each
/// statement inserts a whole batch (one round trip per table, whatever its
/// size), the records and the ready set picking their events by flag.
#[derive(Default)]
pub(crate) struct Plan {
    idx: Vec<i64>,
    id: Vec<String>,
    kind: Vec<String>,
    payload: Vec<String>,
    lane: Vec<Option<String>>,
    cause_index: Vec<Option<i64>>,
    cause_attempt: Vec<Option<i32>>,
    cause_batch: Vec<Option<i32>>,
    /// Unsettled: it gets a processing record.
    pending: Vec<bool>,
    /// Lane-less or heading its lane: it enters the ready set.
    ready: Vec<bool>,
    /// Leased at append (AC2), to the claim's holder until its expiry.
    leased: Vec<bool>,
    /// Its due time (DL1).
    due: Vec<Option<i64>>,
    /// Positions of the events leased at append, ascending.
    pub(crate) positions: Vec<usize>,
    /// How many unsettled events.
    pub(crate) pending_count: i64,
}

impl Plan {
    /// What to write for `events` appended after `frontier`: settled ones
    /// processed (no record), the others pending, ready when lane-less or
    /// heading their lane (DL2), waiting for their due time when delayed
    /// (DL1, never leased at append, DL3), else leased to `lease`'s holder
    /// up to its limit (AC2).
    pub(crate) fn new(
        events: &[NewEvent],
        frontier: u64,
        busy_lanes: &HashSet<String>,
        lease: Option<(&AppendClaim, Millis)>,
        now: Millis,
    ) -> Result<Self> {
        let mut plan = Plan::default();
        let mut lanes_taken: HashSet<&str> = HashSet::new();
        let limit = lease.map_or(0, |(claim, _)| claim.limit);
        for (position, new) in events.iter().enumerate() {
            let index = sql_index(frontier + position as u64 + 1)
                .ok_or_else(|| a2_core::Error::invalid("the session is full"))?;
            plan.idx.push(index);
            plan.id
                .push(encode(rules::append::final_id(new)).into_owned());
            plan.kind.push(encode(&new.event_type).into_owned());
            plan.payload
                .push(serde_json::to_string(&new.payload).map_err(|e| corrupt(e.to_string()))?);
            plan.lane
                .push(new.lane.as_deref().map(|l| encode(l).into_owned()));
            plan.cause_index.push(new.cause.map(|c| bound(c.index)));
            plan.cause_attempt
                .push(new.cause.map(|c| sql_attempt(c.attempt)));
            plan.cause_batch
                .push(new.cause.and_then(|c| c.batch_size).map(sql_attempt));
            let pending = !new.settled;
            let ready = pending
                && match new.lane.as_deref() {
                    None => true,
                    Some(lane) => !busy_lanes.contains(lane) && lanes_taken.insert(lane),
                };
            let due = rules::delay::due(new, now);
            // AC2: leased at once, as a claim leases (C2), up to the limit.
            let leased = lease.is_some() && ready && due.is_none() && plan.positions.len() < limit;
            if leased {
                plan.positions.push(position);
            }
            plan.pending_count += i64::from(pending);
            plan.pending.push(pending);
            plan.ready.push(ready);
            plan.leased.push(leased);
            plan.due.push(due);
        }
        Ok(plan)
    }

    /// Adds to `writes` the inserts of the rows — the log, the records,
    /// the ready set — into the tables of schema `s`.
    pub(crate) fn write(
        self,
        writes: &mut Writes,
        s: &str,
        sid: i64,
        lease: Option<(&AppendClaim, Millis)>,
        now: Millis,
    ) {
        let holder = lease.map(|(claim, _)| encode(&claim.holder).into_owned());
        let expires = lease.map(|(_, at)| at);
        let any_ready = self.ready.contains(&true);
        let any_pending = self.pending_count > 0;
        if !self.idx.is_empty() {
            let statement = format!(
                "INSERT INTO {s}.events (sid, idx, id, type, payload, created_at, lane,
                    cause_index, cause_attempt, cause_batch)
                 SELECT $1, idx, id, type, payload, $2, lane, ci, ca, cb
                 FROM unnest($3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],
                    $8::bigint[], $9::int[], $10::int[])
                    AS u(idx, id, type, payload, lane, ci, ca, cb)"
            );
            let params = owned![
                sid,
                now,
                self.idx.clone(),
                self.id,
                self.kind,
                self.payload,
                self.lane.clone(),
                self.cause_index,
                self.cause_attempt,
                self.cause_batch
            ];
            writes.push("events", statement, params);
        }
        if any_pending {
            let statement = format!(
                "INSERT INTO {s}.records (sid, idx, lane, attempt_count, first_claimed_at,
                    last_claimed_at, claim_holder, claim_expires_at, retry_at)
                 SELECT $1, idx, lane, CASE WHEN leased THEN 1 ELSE 0 END,
                    CASE WHEN leased THEN $2::bigint END, CASE WHEN leased THEN $2::bigint END,
                    CASE WHEN leased THEN $3::text END, CASE WHEN leased THEN $4::bigint END, due
                 FROM unnest($5::bigint[], $6::text[], $7::bool[], $8::bool[], $9::bigint[])
                    AS u(idx, lane, pending, leased, due)
                 WHERE pending"
            );
            let params = owned![
                sid,
                now,
                holder,
                expires,
                self.idx.clone(),
                self.lane,
                self.pending,
                self.leased.clone(),
                self.due.clone()
            ];
            writes.push("records", statement, params);
        }
        if any_ready {
            let statement = format!(
                "INSERT INTO {s}.ready (sid, idx, due_at)
                 SELECT $1, idx, CASE WHEN leased THEN $2::bigint ELSE coalesce(due, 0) END
                 FROM unnest($3::bigint[], $4::bool[], $5::bool[], $6::bigint[])
                    AS u(idx, ready, leased, due)
                 WHERE ready"
            );
            let params = owned![sid, expires, self.idx, self.ready, self.leased, self.due];
            writes.push("ready", statement, params);
        }
    }
}
