//! The schema, and opening a database file: recognising an a2 database,
//! refusing anything else without writing to it, creating the tables in a
//! fresh file.
//!
//! `docs/sqlite-layout.md` explains every table and index and what each
//! operation costs.

use std::path::Path;
use std::time::Duration;

use a2_core::{Error, Result};
use rusqlite::{Connection, ErrorCode, OpenFlags};

/// `PRAGMA application_id` of an a2 database ("a2sq"): how a2 tells its
/// own files from other SQLite databases.
pub const APPLICATION_ID: i32 = 0x6132_7371;

/// A session's deadline (EX1) as SQL text, written once: the index
/// `sessions_deadline` and every query that must use it (`DEADLINE`) need
/// the same expression, character for character.
macro_rules! deadline {
    () => {
        "min(coalesce(expires_at, 9223372036854775807), \
         coalesce(updated_at + ttl_ms, 9223372036854775807))"
    };
}

/// The table of cancels' announcements (CN5), as SQL text: the schema and
/// the migration that adds it create the same table.
macro_rules! cancels {
    () => {
        "
CREATE TABLE cancels (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL,
    idx     INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    at      INTEGER NOT NULL
);"
    };
}

/// `PRAGMA user_version` of the layout this version writes. A file with a
/// higher version was written by a newer a2 and is refused, never altered.
pub const SCHEMA_VERSION: i32 = 7;

/// The tables and indexes of [`SCHEMA_VERSION`] (see docs/sqlite-layout.md).
const SCHEMA: &str = concat!(
    "
CREATE TABLE sessions (
    sid            INTEGER PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    frontier       INTEGER NOT NULL,
    pending_count  INTEGER NOT NULL,
    failed_count   INTEGER NOT NULL,
    attempt_count  INTEGER NOT NULL,
    failure_count  INTEGER NOT NULL,
    first_event_at INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    first_index    INTEGER NOT NULL DEFAULT 1,
    closed_frontier INTEGER,
    closed_at      INTEGER,
    ttl_ms         INTEGER,
    expires_at     INTEGER,
    forked_from    TEXT,
    forked_index   INTEGER,
    tail_from      INTEGER NOT NULL DEFAULT 1,
    woke           INTEGER
);
CREATE INDEX sessions_pending ON sessions (name) WHERE pending_count > 0;
CREATE INDEX sessions_woke ON sessions (woke) WHERE woke IS NOT NULL;
CREATE INDEX sessions_deadline ON sessions (",
    deadline!(),
    ")
    WHERE ttl_ms IS NOT NULL OR expires_at IS NOT NULL;

CREATE TABLE events (
    sid                  INTEGER NOT NULL,
    idx                  INTEGER NOT NULL,
    id                   TEXT NOT NULL,
    type                 TEXT NOT NULL,
    payload              TEXT NOT NULL,
    created_at           INTEGER NOT NULL,
    lane                 TEXT,
    cause_index          INTEGER,
    cause_attempt        INTEGER,
    cause_batch          INTEGER,
    processed_at         INTEGER,
    processed_by_attempt INTEGER,
    returned_ids         TEXT,
    first_claimed_at     INTEGER,
    last_claimed_at      INTEGER,
    attempt_count        INTEGER NOT NULL DEFAULT 0,
    claim_holder         TEXT,
    claim_expires_at     INTEGER,
    retry_at             INTEGER,
    failure_count        INTEGER NOT NULL DEFAULT 0,
    last_failed_at       INTEGER,
    last_failed_attempt  INTEGER,
    last_error           TEXT,
    failed_at            INTEGER,
    free                 INTEGER,
    due_at               INTEGER,
    cancelled_at         INTEGER,
    cancel_reason        TEXT,
    PRIMARY KEY (sid, idx)
);
CREATE UNIQUE INDEX events_by_id ON events (id, sid);
CREATE INDEX events_free ON events (sid, idx) WHERE free = 1;
CREATE INDEX events_due ON events (sid, due_at, idx) WHERE due_at IS NOT NULL;
CREATE INDEX events_lane ON events (sid, lane, idx)
    WHERE lane IS NOT NULL AND processed_at IS NULL;

CREATE TABLE snapshots (
    session    TEXT NOT NULL,
    reducer    TEXT NOT NULL,
    idx        INTEGER NOT NULL,
    state      TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (session, reducer)
) WITHOUT ROWID;

CREATE TABLE presence (
    ns          TEXT NOT NULL,
    participant TEXT NOT NULL,
    field       TEXT NOT NULL,
    value       TEXT NOT NULL,
    seen        INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (ns, participant, field)
) WITHOUT ROWID;

CREATE TABLE commits (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);
INSERT INTO commits (id, seq) VALUES (1, 0);

",
    cancels!(),
);

/// What turns a database of each older version into the next one, by the
/// version it starts from. Each runs in the transaction that checks the
/// version, so a migration is all or nothing.
const MIGRATIONS: &[(i32, &str)] = &[
    (
        // Version 2: closes (CL1) and trims (TR1) of sessions.
        1,
        "ALTER TABLE sessions ADD COLUMN first_index INTEGER NOT NULL DEFAULT 1;
         ALTER TABLE sessions ADD COLUMN closed_frontier INTEGER;
         ALTER TABLE sessions ADD COLUMN closed_at INTEGER;",
    ),
    (
        // Version 3: expiries of sessions (EX1).
        2,
        concat!(
            "ALTER TABLE sessions ADD COLUMN ttl_ms INTEGER;
             ALTER TABLE sessions ADD COLUMN expires_at INTEGER;
             CREATE INDEX sessions_deadline ON sessions (",
            deadline!(),
            ") WHERE ttl_ms IS NOT NULL OR expires_at IS NOT NULL;"
        ),
    ),
    (
        // Version 4: forks (FK5).
        3,
        "ALTER TABLE sessions ADD COLUMN forked_from TEXT;
         ALTER TABLE sessions ADD COLUMN forked_index INTEGER;",
    ),
    (
        // Version 5: cancels (CN1) and their announcements (CN5).
        4,
        concat!(
            "ALTER TABLE events ADD COLUMN cancelled_at INTEGER;
             ALTER TABLE events ADD COLUMN cancel_reason TEXT;",
            cancels!()
        ),
    ),
    (
        // Version 6: ids indexed id first, so that time-ordered ids of many
        // sessions land on the same pages; appended events free in the
        // session's tail (`free = 2`, `tail_from`) instead of in
        // `events_free`. Every event of an older file is indexed, so each
        // session's tail starts after its frontier.
        5,
        "DROP INDEX events_by_id;
         CREATE UNIQUE INDEX events_by_id ON events (id, sid);
         DROP INDEX events_free;
         CREATE INDEX events_free ON events (sid, idx) WHERE free = 1;
         ALTER TABLE sessions ADD COLUMN tail_from INTEGER NOT NULL DEFAULT 1;
         UPDATE sessions SET tail_from = frontier + 1;",
    ),
    (
        // Version 7: announcements of new work (PS2): the commit that last
        // announced each session, read by other processes' pollers.
        6,
        "ALTER TABLE sessions ADD COLUMN woke INTEGER;
         CREATE INDEX sessions_woke ON sessions (woke) WHERE woke IS NOT NULL;",
    ),
];

/// A session's deadline (EX1) in SQL, as the index `sessions_deadline` has
/// it: the earlier of `expires_at` and `updated_at + ttl_ms`, the largest
/// integer for a session that never expires.
pub const DEADLINE: &str = deadline!();

/// Maps an error of opening or checking the file: what the caller must fix
/// (the path, the file) is `InvalidArgument`, a damaged a2 database
/// `Corrupted` (E1: no retry can mend it), the rest `StoreUnavailable`.
pub fn open_error(path: &Path, error: rusqlite::Error) -> Error {
    let shown = path.display();
    match error.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => Error::invalid(format!(
            "{shown} is not an a2 database (it is not a SQLite file); nothing was written to it"
        )),
        Some(ErrorCode::ReadOnly) => Error::invalid(format!(
            "{shown} is read-only; the a2 store needs to write to it and beside it (-wal, -shm)"
        )),
        Some(ErrorCode::CannotOpen) | Some(ErrorCode::PermissionDenied) => Error::invalid(format!(
            "cannot open {shown} for reading and writing: {error}"
        )),
        Some(ErrorCode::DatabaseCorrupt) => Error::corrupted(
            format!("{shown} is damaged ({error}); restore it from a backup"),
            None,
            None,
        ),
        _ => Error::unavailable_from(format!("cannot open the SQLite database {shown}"), error),
    }
}

/// Opens one connection to `path` (creating the file when missing) with the
/// busy timeout every a2 connection uses: a writer of another process holds
/// the write lock for one transaction, so waiting beats failing.
pub fn connect(path: &Path, busy_timeout: Duration) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(busy_timeout)
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// What a file holds, read without writing anything.
enum Found {
    /// No tables and no application id: a new (or empty) file.
    Empty,
    /// An a2 database with this schema version.
    A2(i32),
}

fn inspect(conn: &Connection, path: &Path) -> Result<Found> {
    let shown = path.display();
    let read = |sql: &str| -> Result<i64> {
        conn.query_row(sql, [], |row| row.get(0))
            .map_err(|e| open_error(path, e))
    };
    let application_id = read("PRAGMA application_id")?;
    let version = read("PRAGMA user_version")?;
    let objects = read("SELECT count(*) FROM sqlite_schema")?;
    if application_id == i64::from(APPLICATION_ID) {
        return Ok(Found::A2(i32::try_from(version).unwrap_or(i32::MAX)));
    }
    if application_id == 0 && objects == 0 && version == 0 {
        return Ok(Found::Empty);
    }
    Err(Error::invalid(format!(
        "{shown} is a SQLite database of another application (application_id {application_id:#x}, \
         {objects} schema objects), not an a2 database; nothing was written to it"
    )))
}

fn check_version(path: &Path, version: i32) -> Result<()> {
    if version > SCHEMA_VERSION {
        return Err(Error::invalid(format!(
            "{} has a2 schema version {version}, newer than the {SCHEMA_VERSION} this a2 reads; \
             upgrade a2 to open it (nothing was written to it)",
            path.display()
        )));
    }
    if version < 1 {
        return Err(Error::invalid(format!(
            "{} is marked as an a2 database but has no schema version",
            path.display()
        )));
    }
    Ok(())
}

/// Checks that the file behind `conn` is an a2 database this version can
/// use, or an empty file, and creates the schema in an empty one.
///
/// Nothing is written before the checks pass: a file of another application
/// or of a newer a2 is left byte for byte as it was. Two processes opening
/// one new file at once are serialized by `BEGIN IMMEDIATE`; the second
/// finds the schema there and leaves it.
///
/// SQLite answers `SQLITE_BUSY` at once, without waiting out the busy
/// timeout, where waiting could deadlock: switching a new file to WAL while
/// another connection reads it, or upgrading a read to a write. Openers of
/// one new file meet exactly there, so a busy step is tried again, with a
/// short pause, for up to `patience` (the store's busy timeout).
pub fn prepare(conn: &Connection, path: &Path, patience: Duration) -> Result<()> {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match prepare_once(conn, path) {
            Err(error) if is_busy(&error) && started.elapsed() < patience => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            done => return done,
        }
    }
}

/// Brings a database of schema `version` to [`SCHEMA_VERSION`], inside the
/// caller's transaction.
fn migrate(conn: &Connection, path: &Path, version: i32) -> Result<()> {
    for (from, sql) in MIGRATIONS {
        if *from >= version {
            conn.execute_batch(sql).map_err(|e| open_error(path, e))?;
            conn.execute_batch(&format!("PRAGMA user_version = {};", from + 1))
                .map_err(|e| open_error(path, e))?;
        }
    }
    Ok(())
}

/// Whether `error` is SQLite's `SQLITE_BUSY`.
fn is_busy(error: &Error) -> bool {
    error
        .backend()
        .and_then(|e| e.downcast_ref::<rusqlite::Error>())
        .and_then(rusqlite::Error::sqlite_error_code)
        == Some(ErrorCode::DatabaseBusy)
}

fn prepare_once(conn: &Connection, path: &Path) -> Result<()> {
    // One read transaction, so that the header (application id, version)
    // and the schema are read from one snapshot: read as separate
    // statements, a creator's commit between them made a new a2 file look
    // like another application's (schema objects, no application id yet).
    conn.execute_batch("BEGIN")
        .map_err(|e| open_error(path, e))?;
    let found = inspect(conn, path);
    let _ = conn.execute_batch("COMMIT");
    if let Found::A2(version) = found? {
        check_version(path, version)?;
    }
    if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
        return Err(Error::invalid(format!(
            "{} is read-only; the a2 store needs to write to it",
            path.display()
        )));
    }
    // WAL: readers never block the writer nor each other, and a commit is
    // one append to the log (plus its fsync), not a rewrite of pages.
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::invalid(format!(
            "{} cannot use write-ahead logging (journal mode stays {mode:?})",
            path.display()
        )));
    }
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| open_error(path, e))?;
    let created = (|| -> Result<()> {
        match inspect(conn, path)? {
            Found::A2(version) => {
                check_version(path, version)?;
                migrate(conn, path, version)
            }
            Found::Empty => {
                conn.execute_batch(SCHEMA)
                    .map_err(|e| open_error(path, e))?;
                conn.execute_batch(&format!(
                    "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
                ))
                .map_err(|e| open_error(path, e))
            }
        }
    })();
    match created {
        Ok(()) => conn
            .execute_batch("COMMIT")
            .map_err(|e| open_error(path, e)),
        Err(error) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(error)
        }
    }
}
