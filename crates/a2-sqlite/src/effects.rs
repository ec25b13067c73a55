//! What a committed write changed that others may be waiting for: the
//! record each operation fills as it runs in the writer's transaction
//! (`writer`), and that the hub publishes after the commit (`hub`).

use a2_core::{PresencePatch, Result};
use rusqlite::Connection;

use crate::rows::db;

/// What a committed operation changed that others may be waiting for.
#[derive(Default)]
pub struct Effects {
    /// Sessions whose log changed, in commit order: what each appended, or
    /// that it was cleared.
    pub frontiers: Vec<(String, Change)>,
    /// Applied presence patches, by namespace.
    pub patches: Vec<(String, PresencePatch)>,
    /// Attempts cancelled while leased (CN5).
    pub cancels: Vec<a2_core::Cancellation>,
    /// Sessions that gained claimable work (PS2), see [`Effects::announce`].
    pub wakeups: Vec<String>,
    /// Whether appended events are worth carrying to feeds: false when no
    /// session had a feed as the group began, so that appends nobody
    /// follows do not copy their events for nothing.
    carry_events: bool,
    /// The connection's change count when the operation had undone all
    /// it wrote (see [`Effects::restored`]).
    pub(crate) restored_at: Option<u64>,
}

impl Effects {
    pub(crate) fn new(carry_events: bool) -> Self {
        Self {
            carry_events,
            ..Self::default()
        }
    }

    /// Notes that `rows` were appended to `session`, with copies of their
    /// events for its feeds when any session is followed.
    pub fn appended(&mut self, session: &str, rows: &[a2_core::StoredEvent]) {
        let change = if self.carry_events {
            Change::Appended(rows.iter().map(|row| row.event.clone()).collect())
        } else {
            Change::Grew
        };
        self.frontiers.push((session.to_owned(), change));
    }

    /// Notes that the operation has undone everything it wrote so far (an
    /// append that found an id taken deleted its rows): if it fails with
    /// nothing written after this, the rest of its group stands.
    pub fn restored(&mut self, conn: &Connection) {
        self.restored_at = Some(conn.total_changes());
    }

    /// PS2: announces that session `name` (row `sid`) gained claimable
    /// work: to this process's wake-up streams at the commit, and to other
    /// processes' through the session's `woke` column, set to the number
    /// this group's commit will have, which their pollers read.
    pub fn announce(&mut self, conn: &Connection, sid: i64, name: &str) -> Result<()> {
        conn.prepare_cached(
            "UPDATE sessions SET woke = (SELECT seq + 1 FROM commits WHERE id = 1) WHERE sid = ?1",
        )
        .and_then(|mut stmt| stmt.execute([sid]))
        .map_err(db)?;
        self.wakeups.push(name.to_owned());
        Ok(())
    }

    pub(crate) fn absorb(&mut self, other: Effects) {
        self.frontiers.extend(other.frontiers);
        self.patches.extend(other.patches);
        self.cancels.extend(other.cancels);
        self.wakeups.extend(other.wakeups);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.frontiers.is_empty()
            && self.patches.is_empty()
            && self.cancels.is_empty()
            && self.wakeups.is_empty()
    }
}

/// How one operation changed a session's log.
pub enum Change {
    /// These events were appended, in index order.
    Appended(Vec<a2_core::Event>),
    /// Events were appended, without copies: no session was followed when
    /// the group began. A feed opened since reads them.
    Grew,
    /// The session was cleared (I4).
    Cleared,
    /// The session was closed (CL1): its feeds read once more, find the
    /// log final and end (CL4).
    Closed,
}
