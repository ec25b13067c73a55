//! The tables of a Postgres store, and making a database ready for them:
//! creating them in a fresh schema, recognising a2's own, refusing a
//! layout written by a newer a2 without touching it.
//!
//! `docs/postgres-layout.md` explains every table and index, and what each
//! operation reads, locks and writes.

use a2_core::{Error, Result};
use tokio_postgres::GenericClient;

use crate::Database;

/// The version of the layout this a2 writes (`meta.version`). A schema
/// with a higher one was written by a newer a2 and is refused.
pub const VERSION: i32 = 1;

/// The tables and indexes of [`VERSION`] in schema `s` (already quoted).
fn layout(s: &str) -> String {
    format!(
        "
CREATE TABLE {s}.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- One row per session: its counters, and the row every write to the
-- session locks first (FOR UPDATE), so that writes of one session take
-- turns, on any number of hosts. Updated by every write: room on each
-- page keeps the updates HOT (no index changes while `pending` holds).
CREATE TABLE {s}.sessions (
    sid             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text COLLATE \"C\" NOT NULL UNIQUE,
    frontier        bigint NOT NULL DEFAULT 0,
    pending_count   bigint NOT NULL DEFAULT 0,
    pending         boolean GENERATED ALWAYS AS (pending_count > 0) STORED,
    failed_count    bigint NOT NULL DEFAULT 0,
    attempt_count   bigint NOT NULL DEFAULT 0,
    failure_count   bigint NOT NULL DEFAULT 0,
    first_event_at  bigint NOT NULL,
    updated_at      bigint NOT NULL,
    first_index     bigint NOT NULL DEFAULT 1,
    closed_frontier bigint,
    closed_at       bigint,
    ttl_ms          bigint,
    expires_at      bigint,
    forked_from     text,
    forked_index    bigint
) WITH (fillfactor = 50);
CREATE INDEX sessions_pending ON {s}.sessions (name) WHERE pending;

-- The log: one row per event, written once and never updated (a trim or
-- a clear deletes rows; nothing else changes them).
CREATE TABLE {s}.events (
    sid           bigint NOT NULL,
    idx           bigint NOT NULL,
    id            text NOT NULL,
    type          text NOT NULL,
    payload       text NOT NULL,
    created_at    bigint NOT NULL,
    lane          text,
    cause_index   bigint,
    cause_attempt integer,
    cause_batch   integer,
    PRIMARY KEY (sid, idx)
);
CREATE UNIQUE INDEX events_by_id ON {s}.events (sid, id);

-- The processing record of each event appended unsettled (§1). Settled
-- events appended settled have none.
CREATE TABLE {s}.records (
    sid                  bigint NOT NULL,
    idx                  bigint NOT NULL,
    lane                 text,
    open                 boolean NOT NULL DEFAULT true,
    attempt_count        integer NOT NULL DEFAULT 0,
    first_claimed_at     bigint,
    last_claimed_at      bigint,
    claim_holder         text,
    claim_expires_at     bigint,
    retry_at             bigint,
    failure_count        integer NOT NULL DEFAULT 0,
    last_failed_at       bigint,
    last_failed_attempt  integer,
    last_error           text,
    failed_at            bigint,
    processed_at         bigint,
    processed_by_attempt integer,
    returned_ids         text,
    cancelled_at         bigint,
    cancel_reason        text,
    PRIMARY KEY (sid, idx)
) WITH (fillfactor = 70);
CREATE INDEX records_lane ON {s}.records (sid, lane, idx) WHERE lane IS NOT NULL AND open;

-- The ready set: every pending event a claim may take, now or from a
-- time (lane-less events, and each lane's head; a dead letter is not
-- ready, C4). `due_at` is 0 for an event claimable at once, else its
-- lease expiry or retry time. A claim reads only this table.
CREATE TABLE {s}.ready (
    sid    bigint NOT NULL,
    idx    bigint NOT NULL,
    due_at bigint NOT NULL,
    PRIMARY KEY (sid, idx)
);
CREATE INDEX ready_due ON {s}.ready (sid, due_at, idx);

-- Reducers' snapshots (S1, S2), by session name: they outlive a trim
-- (TR5) and are written by name before a session exists.
CREATE TABLE {s}.snapshots (
    session    text COLLATE \"C\" NOT NULL,
    reducer    text COLLATE \"C\" NOT NULL,
    idx        bigint NOT NULL,
    state      text NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (session, reducer)
);

-- Presence (P1, P3): one row per namespace, participant and field; last
-- writer wins under an advisory lock of the participant.
CREATE TABLE {s}.presence (
    ns          text COLLATE \"C\" NOT NULL,
    participant text COLLATE \"C\" NOT NULL,
    field       text COLLATE \"C\" NOT NULL,
    value       text NOT NULL,
    seen        bigint NOT NULL,
    at          bigint NOT NULL,
    expires_at  bigint NOT NULL,
    PRIMARY KEY (ns, participant, field)
);
"
    )
}

/// Makes `schema` ready for a store of this version, under a lock of the
/// database, so that processes starting together create it once: creates
/// the schema and its tables when it has none, checks the version of a
/// layout it has. A schema with other tables and no `meta` is refused
/// untouched, as is a newer layout.
pub(crate) async fn prepare(db: &Database, schema: &str) -> Result<()> {
    let quoted = quote(schema)?;
    let mut client = db.client().await?;
    let fail = |doing: &str, e: tokio_postgres::Error| db.error(doing, e);
    let tx = client
        .transaction()
        .await
        .map_err(|e| fail("preparing the schema", e))?;
    // One lock for every process preparing this schema: a transaction-level
    // advisory lock, released at commit or rollback.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&format!("a2 schema {schema}")],
    )
    .await
    .map_err(|e| fail("locking the schema", e))?;
    let tables: i64 = tx
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&schema],
        )
        .await
        .map_err(|e| fail("reading the schema", e))?
        .get(0);
    if tables == 0 {
        let create = format!(
            "CREATE SCHEMA IF NOT EXISTS {quoted};{}INSERT INTO {quoted}.meta (key, value) VALUES ('version', '{VERSION}');",
            layout(&quoted)
        );
        tx.batch_execute(&create)
            .await
            .map_err(|e| fail("creating the tables", e))?;
    } else {
        check_version(&*tx, schema, &quoted)
            .await
            .map_err(|e| match e {
                Checked::Refused(e) => e,
                Checked::Driver(e) => fail("reading the layout version", e),
            })?;
    }
    tx.commit()
        .await
        .map_err(|e| fail("preparing the schema", e))?;
    Ok(())
}

enum Checked {
    Refused(Error),
    Driver(tokio_postgres::Error),
}

/// The version of the layout in a schema that has tables.
async fn check_version(
    client: &impl GenericClient,
    schema: &str,
    quoted: &str,
) -> std::result::Result<(), Checked> {
    let has_meta: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'meta')",
            &[&schema],
        )
        .await
        .map_err(Checked::Driver)?
        .get(0);
    if !has_meta {
        return Err(Checked::Refused(Error::invalid(format!(
            "schema {schema:?} holds tables that are not a2's (no `meta` table): name another \
             schema for a2 (`?a2_schema=` in the URL, or `PostgresOptions::schema`)"
        ))));
    }
    let row = client
        .query_opt(
            &format!("SELECT value FROM {quoted}.meta WHERE key = 'version'"),
            &[],
        )
        .await
        .map_err(Checked::Driver)?;
    let version: Option<i32> = row.and_then(|r| r.get::<_, String>(0).parse().ok());
    match version {
        Some(VERSION) => Ok(()),
        Some(newer) if newer > VERSION => Err(Checked::Refused(Error::invalid(format!(
            "schema {schema:?} was written by a newer a2 (layout version {newer}; this a2 \
             knows up to {VERSION}): upgrade a2, or name another schema"
        )))),
        other => Err(Checked::Refused(Error::corrupted(
            format!("schema {schema:?} has a2's tables with layout version {other:?}"),
            None,
            None,
        ))),
    }
}

/// `schema` as a quoted SQL identifier, after checking it is a plain name
/// (lower-case letters, digits and `_`, not starting with a digit, at most
/// 63 bytes: Postgres' limit).
pub(crate) fn quote(schema: &str) -> Result<String> {
    let plain = !schema.is_empty()
        && schema.len() <= 63
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit();
    if !plain {
        return Err(Error::invalid(format!(
            "Postgres schema {schema:?}: a2 takes a plain name (a-z, 0-9 and _, not starting \
             with a digit, at most 63 bytes)"
        )));
    }
    Ok(format!("\"{schema}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_and_quoted() {
        assert_eq!(quote("a2").unwrap(), "\"a2\"");
        assert_eq!(quote("app_events_2").unwrap(), "\"app_events_2\"");
        for bad in ["", "A2", "a-2", "2a", "a2; DROP TABLE x", &"a".repeat(64)] {
            assert!(quote(bad).is_err(), "{bad:?}");
        }
    }
}
