//! Running statements: the schema they name, and the driver's errors told
//! as a2's (what a retry can mend is `StoreUnavailable`).

use a2_core::{Error, Result};
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Row};

use crate::Database;

/// The schema of a store's tables and the database that reports errors:
/// what every operation's statements are written and run with.
#[derive(Clone, Copy)]
pub(crate) struct Sql<'a> {
    /// The schema, quoted: `{s}.events`.
    pub(crate) schema: &'a str,
    db: &'a Database,
}

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl<'a> Sql<'a> {
    pub(crate) fn new(db: &'a Database) -> Self {
        Self {
            schema: db.quoted(),
            db,
        }
    }

    pub(crate) fn error(&self, doing: &str, error: tokio_postgres::Error) -> Error {
        self.db.error(doing, error)
    }

    pub(crate) async fn query(
        &self,
        client: &impl GenericClient,
        doing: &str,
        statement: &str,
        params: Params<'_>,
    ) -> Result<Vec<Row>> {
        client
            .query(statement, params)
            .await
            .map_err(|e| self.error(doing, e))
    }
}

/// A broken stored invariant.
pub(crate) fn corrupt(message: impl Into<String>) -> Error {
    Error::corrupted(message, None, None)
}

/// An index (or count) read from a `bigint` column.
pub(crate) fn index_of(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| corrupt(format!("a negative index {value} is stored")))
}

/// An attempt number read from an `integer` column.
pub(crate) fn attempt_of(value: i32) -> Result<u32> {
    u32::try_from(value).map_err(|_| corrupt(format!("a negative attempt {value} is stored")))
}

/// An index as a `bigint` parameter, when it fits.
pub(crate) fn sql_index(index: u64) -> Option<i64> {
    i64::try_from(index).ok()
}

/// An attempt number as an `integer` parameter.
pub(crate) fn sql_attempt(attempt: u32) -> i32 {
    i32::try_from(attempt).unwrap_or(i32::MAX)
}
