//! Claims, renewals and releases (C1, C2, C3, C4, C5, C6, C7, RN1, RN2,
//! RN3, RL1): each one transaction that locks the session's row first. The
//! decisions are `a2_core::rules`'; a claim reads the ready set alone.

use std::collections::BTreeSet;

use crate::sql::Conn;
use a2_core::rules::renew::Renewal;
use a2_core::{
    ClaimOutcome, ClaimRequest, Millis, ReleaseRequest, RenewOutcome, RenewRequest, Result, rules,
    validate,
};

use crate::op::On;
use crate::rows;
use crate::session::{self, bound};
use crate::sql::owned;
use crate::sql::{Text, encode, index_of};
use crate::writes::Writes;
use tokio_postgres::types::ToSql;

/// C1, C2, C3, C4, C5, C7 (a validated request): leases the ready events
/// claimable at `now`, in index order, up to the limit; else `Busy` with
/// the earliest time one comes, else `Settled`.
pub(crate) async fn claim(on: On<'_, impl Conn>, request: ClaimRequest) -> Result<ClaimOutcome> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let expires_at = validate::claim_expiry(request.lease, now)?;
    let name = request.session.as_str();
    let s = sql.schema;
    let sid = session::sid_of(s);
    let exclude: Vec<i64> = request.exclude_indexes.iter().map(|&i| bound(i)).collect();
    let limit = i64::try_from(request.limit).unwrap_or(i64::MAX);
    // Without indexes to leave out, no array: its length would make
    // Postgres plan the statements anew at every call.
    let others = if exclude.is_empty() {
        ""
    } else {
        " AND NOT (idx = ANY($3))"
    };
    // C2, C5: what is due (free, an expired lease, a retry or due time
    // come), by index, with its row as it stands before the lease.
    let picked = format!(
        "SELECT {c}, p.idx FROM (SELECT idx FROM {s}.ready
                WHERE sid = {sid} AND due_at <= $2{others} ORDER BY idx LIMIT {at}) AS p
            LEFT JOIN ({from}) ON e.sid = {sid} AND e.idx = p.idx
         ORDER BY p.idx",
        c = rows::COLUMNS,
        from = rows::from(s),
        at = if exclude.is_empty() { "$3" } else { "$4" },
    );
    // C3, C7: the earliest time of the others, the picked ones being
    // claimable now.
    let later = format!(
        "SELECT due_at FROM {s}.ready WHERE sid = {sid} AND due_at > $2{others}
         ORDER BY due_at, idx LIMIT 1"
    );
    let named = Text(name);
    let (with_limit, without): (Vec<&(dyn ToSql + Sync)>, Vec<&(dyn ToSql + Sync)>) =
        if exclude.is_empty() {
            (vec![&named, &now, &limit], vec![&named, &now])
        } else {
            (
                vec![&named, &now, &exclude, &limit],
                vec![&named, &now, &exclude],
            )
        };
    let (current, answers) = session::lock_with(
        sql,
        client,
        name,
        &[
            ("claiming", &picked, &with_limit),
            ("claiming", &later, &without),
        ],
    )
    .await?;
    let current = match current {
        Some(s) if !s.expired(now) && s.pending_count > 0 => s,
        // C1, EX3.
        _ => return Ok(ClaimOutcome::Settled),
    };
    let next_at: Option<Millis> = answers[1].first().map(|row| row.get(0));
    if answers[0].is_empty() {
        return Ok(match next_at {
            Some(retry_at) => ClaimOutcome::Busy { retry_at },
            None => ClaimOutcome::Settled,
        });
    }
    // C2: a new attempt each, leased to the holder — in the rows read, as
    // the statements below write it.
    let mut events = Vec::with_capacity(answers[0].len());
    for row in &answers[0] {
        if row.get::<_, Option<i64>>(0).is_none() {
            let index = index_of(row.get(rows::WIDTH))?;
            return Err(rules::read::missing(name, index));
        }
        let mut event = rows::stored(name, row)?;
        event.lease(&request.holder, expires_at, now);
        events.push(event);
    }
    let picked: Vec<i64> = events.iter().map(|e| bound(e.event.index)).collect();
    let count = picked.len() as i64;
    let lease = format!(
        "UPDATE {s}.records SET attempt_count = attempt_count + 1,
            first_claimed_at = coalesce(first_claimed_at, $3), last_claimed_at = $3,
            claim_holder = $4, claim_expires_at = $5, retry_at = NULL
         WHERE sid = $1 AND idx = ANY($2)"
    );
    let due = format!("UPDATE {s}.ready SET due_at = $3 WHERE sid = $1 AND idx = ANY($2)");
    let counted = format!(
        "UPDATE {s}.sessions SET attempt_count = attempt_count + $2,
            updated_at = greatest(updated_at, $3)
         WHERE sid = $1"
    );
    let sid = current.sid;
    let params = owned![
        sid,
        picked.clone(),
        now,
        encode(&request.holder).into_owned(),
        expires_at
    ];
    let mut writes = Writes::default();
    writes.push("records", lease, params);
    let params = owned![sid, picked, expires_at];
    writes.push("ready", due, params);
    let params = owned![sid, count, now];
    writes.push("sessions", counted, params);
    writes.defer(sql, client, "leasing").await?;
    Ok(ClaimOutcome::Claimed { events, next_at })
}

/// RN1, RN2, RN3 (a validated request).
pub(crate) async fn renew(on: On<'_, impl Conn>, request: RenewRequest) -> Result<RenewOutcome> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let expires_at = request.lease.expires_at(now);
    let mut outcome = RenewOutcome::default();
    let Some(current) = session::lock(sql, client, &request.session).await? else {
        return Ok(outcome);
    };
    if current.expired(now) {
        return Ok(outcome);
    }
    let indexes: Vec<i64> = request.claims.iter().map(|c| bound(c.index)).collect();
    let records = rows::by_index(sql, client, &request.session, current.sid, &indexes).await?;
    let (mut renewed, mut superseded) = (BTreeSet::new(), BTreeSet::new());
    for claim in &request.claims {
        let Some(record) = records.get(&claim.index) else {
            continue;
        };
        match rules::renew::decide(
            &record.into(),
            claim.attempt,
            &request.holder,
            now,
            expires_at,
        ) {
            Renewal::Superseded => {
                superseded.insert(claim.index);
            }
            Renewal::Renew => {
                renewed.insert(claim.index);
            }
            _ => {}
        }
    }
    let moved: Vec<i64> = renewed.iter().map(|&i| bound(i)).collect();
    if !moved.is_empty() {
        let s = sql.schema;
        for statement in [
            format!(
                "UPDATE {s}.records SET claim_expires_at = $3 WHERE sid = $1 AND idx = ANY($2)"
            ),
            format!("UPDATE {s}.ready SET due_at = $3 WHERE sid = $1 AND idx = ANY($2)"),
        ] {
            sql.query(
                client,
                "renewing",
                &statement,
                &[&current.sid, &moved, &expires_at],
            )
            .await?;
        }
    }
    outcome.renewed = renewed.into_iter().collect();
    outcome.superseded = superseded.into_iter().collect();
    Ok(outcome)
}

/// RL1 (a validated request): released events are claimable at once, and
/// announced (PS2).
pub(crate) async fn release(on: On<'_, impl Conn>, request: ReleaseRequest) -> Result<Vec<u64>> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let Some(current) = session::lock(sql, client, &request.session).await? else {
        return Ok(Vec::new());
    };
    if current.expired(now) {
        return Ok(Vec::new());
    }
    let indexes: Vec<i64> = request.claims.iter().map(|c| bound(c.index)).collect();
    let records = rows::by_index(sql, client, &request.session, current.sid, &indexes).await?;
    let released: BTreeSet<u64> = request
        .claims
        .iter()
        .filter(|claim| {
            records.get(&claim.index).is_some_and(|record| {
                rules::release::releases(&record.into(), claim.attempt, &request.holder, now)
            })
        })
        .map(|claim| claim.index)
        .collect();
    if !released.is_empty() {
        let freed: Vec<i64> = released.iter().map(|&i| bound(i)).collect();
        let s = sql.schema;
        for statement in [
            format!(
                "UPDATE {s}.records SET claim_holder = NULL, claim_expires_at = NULL
                 WHERE sid = $1 AND idx = ANY($2)"
            ),
            format!("UPDATE {s}.ready SET due_at = 0 WHERE sid = $1 AND idx = ANY($2)"),
        ] {
            sql.query(client, "releasing", &statement, &[&current.sid, &freed])
                .await?;
        }
        on.notices.work(&request.session);
    }
    Ok(released.into_iter().collect())
}
