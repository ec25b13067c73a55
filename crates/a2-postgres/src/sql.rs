//! Running statements: the schema they name, and the driver's errors told
//! as a2's (what a retry can mend is `StoreUnavailable`).

use a2_core::{Error, Result};
use async_trait::async_trait;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

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
        client: &impl Conn,
        doing: &str,
        statement: &str,
        params: Params<'_>,
    ) -> Result<Vec<Row>> {
        client
            .rows(statement, params)
            .await
            .map_err(|e| self.error(doing, e))
    }
}

/// What a2's statements run on: a transaction of the store's own, whose
/// statements are prepared once per pooled connection and kept
/// (deadpool's statement cache: one round trip per statement after the
/// first), or the application's transaction (`append_in`), where each is
/// prepared as it runs.
#[async_trait]
pub(crate) trait Conn: Send + Sync {
    /// The rows `statement` returns with `params`.
    async fn rows(&self, statement: &str, params: Params<'_>) -> Rows;
}

/// What [`Conn::rows`] answers.
type Rows = std::result::Result<Vec<Row>, tokio_postgres::Error>;

#[async_trait]
impl Conn for deadpool_postgres::Transaction<'_> {
    async fn rows(&self, statement: &str, params: Params<'_>) -> Rows {
        let prepared = deadpool_postgres::GenericClient::prepare_cached(self, statement).await?;
        tokio_postgres::GenericClient::query(&**self, &prepared, params).await
    }
}

#[async_trait]
impl Conn for tokio_postgres::Transaction<'_> {
    async fn rows(&self, statement: &str, params: Params<'_>) -> Rows {
        self.query(statement, params).await
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

/// A string as a2's `text` columns hold it. Postgres' `text` cannot hold
/// NUL, which a2's names, ids, types, lanes, holders and errors may; they
/// are stored with `\u{1}` as an escape: NUL as `\u{1}\u{1}`, `\u{1}` as
/// `\u{1}\u{2}`, everything else as it is. The code keeps byte order and
/// prefixes (a name sorts, and starts with a prefix, exactly as its stored
/// form does), so listings and prefix filters run on the stored column.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Text<'a>(pub(crate) &'a str);

/// `s` as stored (see [`Text`]).
pub(crate) fn encode(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\u{0}', '\u{1}']) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        match c {
            '\u{0}' => out.push_str("\u{1}\u{1}"),
            '\u{1}' => out.push_str("\u{1}\u{2}"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A stored string as it was written (see [`Text`]).
pub(crate) fn decode(s: &str) -> String {
    if !s.contains('\u{1}') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\u{1}') {
            (_, true) => match chars.next() {
                Some('\u{1}') => out.push('\u{0}'),
                _ => out.push('\u{1}'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

impl tokio_postgres::types::ToSql for Text<'_> {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut tokio_postgres::types::private::BytesMut,
    ) -> std::result::Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        encode(self.0).as_ref().to_sql(ty, out)
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        <&str as tokio_postgres::types::ToSql>::accepts(ty)
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A string read from a `text` column, as it was written (see [`Text`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored(pub(crate) String);

impl<'a> tokio_postgres::types::FromSql<'a> for Stored {
    fn from_sql(
        ty: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        <&str as tokio_postgres::types::FromSql>::from_sql(ty, raw).map(|s| Stored(decode(s)))
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        <&str as tokio_postgres::types::FromSql>::accepts(ty)
    }
}

/// Column `i` of `row`, a `text` column (see [`Text`]).
pub(crate) fn text(row: &Row, i: usize) -> String {
    row.get::<_, Stored>(i).0
}

/// Column `i` of `row`, a `text` column that may be NULL.
pub(crate) fn text_opt(row: &Row, i: usize) -> Option<String> {
    row.get::<_, Option<Stored>>(i).map(|s| s.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_round_trips_and_keeps_byte_order_and_prefixes() {
        let names = [
            "",
            "a",
            "a\u{0}",
            "a\u{0}b",
            "a\u{1}",
            "a\u{1}\u{0}",
            "a\u{2}",
            "ab",
            "b",
        ];
        for a in names {
            assert_eq!(decode(&encode(a)), a);
            assert!(!encode(a).contains('\u{0}'));
            for b in names {
                assert_eq!(a.cmp(b), encode(a).cmp(&encode(b)), "{a:?} vs {b:?}");
                assert_eq!(
                    b.starts_with(a),
                    encode(b).starts_with(&*encode(a)),
                    "{a:?} in {b:?}"
                );
            }
        }
    }
}
