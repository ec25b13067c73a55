//! `put_snapshots` (S2): the decisions are [`rules::state`]'s.

use a2_core::rules;
use a2_core::*;
use rusqlite::{Connection, params};

use super::*;
use crate::rows::{db, json_text, sql_index};

/// S2 (validated names).
pub fn put_snapshots(
    conn: &Connection,
    effects: &mut Effects,
    name: &str,
    snapshots: Vec<SnapshotWrite>,
    now: Millis,
) -> Result<()> {
    let current = session_row(conn, name)?;
    if current
        .as_ref()
        .is_some_and(|s| rules::lifecycle::expired(s.deadline, now))
    {
        // EX3: what is left of an expired session goes first, so these
        // snapshots are not deleted with it later.
        clear::delete(conn, effects, name, false)?;
    }
    let frontier = session(conn, name, now)?.map_or(0, |s| s.frontier);
    rules::state::check_snapshots(frontier, &snapshots)?;
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO snapshots (session, reducer, idx, state, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (session, reducer) DO UPDATE SET
                idx = excluded.idx, state = excluded.state, updated_at = excluded.updated_at
             WHERE excluded.idx > snapshots.idx",
        )
        .map_err(db)?;
    for snapshot in snapshots {
        // Checked against the frontier above, so it fits.
        let index = sql_index(snapshot.index).unwrap_or(i64::MAX);
        stmt.execute(params![
            name,
            snapshot.reducer,
            index,
            json_text(&snapshot.state),
            now
        ])
        .map_err(db)?;
    }
    Ok(())
}
