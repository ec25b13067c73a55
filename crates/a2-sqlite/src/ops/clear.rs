//! `clear` (I4).

use a2_core::*;
use rusqlite::Connection;

use super::*;
use crate::rows::db;
use crate::writer::{Change, Effects};

/// I4.
pub fn clear(conn: &Connection, effects: &mut Effects, name: &str) -> Result<()> {
    if let Some(current) = session(conn, name)? {
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
    conn.prepare_cached("DELETE FROM presence WHERE ns = ?1")
        .map_err(db)?
        .execute([name])
        .map_err(db)?;
    effects.frontiers.push((name.to_owned(), Change::Cleared));
    Ok(())
}
