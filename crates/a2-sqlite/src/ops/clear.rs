//! `clear` (I4), and the deletion of an expired session (EX3).

use a2_core::*;
use rusqlite::Connection;

use super::*;
use crate::effects::{Change, Effects};
use crate::rows::db;

/// I4.
pub fn clear(conn: &Connection, effects: &mut Effects, name: &str) -> Result<()> {
    delete(conn, effects, name, true)
}

/// Deletes the session `name` entirely, expired or not: its events, its
/// row and its snapshots, and with `presence` the presence of the
/// namespace named like it (I4; an expired session keeps it, EX3). Its
/// feeds hear a clear.
pub(super) fn delete(
    conn: &Connection,
    effects: &mut Effects,
    name: &str,
    presence: bool,
) -> Result<()> {
    if let Some(current) = session_row(conn, name)? {
        conn.prepare_cached("DELETE FROM events WHERE sid = ?1")
            .map_err(db)?
            .execute([current.sid])
            .map_err(db)?;
        conn.prepare_cached("DELETE FROM sessions WHERE sid = ?1")
            .map_err(db)?
            .execute([current.sid])
            .map_err(db)?;
    }
    conn.prepare_cached("DELETE FROM snapshots WHERE session = ?1")
        .map_err(db)?
        .execute([name])
        .map_err(db)?;
    if presence {
        conn.prepare_cached("DELETE FROM presence WHERE ns = ?1")
            .map_err(db)?
            .execute([name])
            .map_err(db)?;
    }
    effects.frontiers.push((name.to_owned(), Change::Cleared));
    Ok(())
}
