//! Running statements: the schema they name, and the driver's errors told
//! as a2's (what a retry can mend is `StoreUnavailable`).

use a2_core::{Error, Result};
use async_trait::async_trait;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::Database;

/// The schema of a store's tables and the database that reports errors:
/// what every operation's statements are written and run with.
#[derive(Clone, Copy)]
pub(crate) struct Sql<'a> {
    /// The schema, quoted: `{s}.events`.
    pub(crate) schema: &'a str,
    db: &'a Database,
}

/// A statement's parameters.
pub(crate) type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl<'a> Sql<'a> {
    pub(crate) fn new(db: &'a Database) -> Self {
        Self {
            schema: db.quoted(),
            db,
        }
    }

    /// The schema's plain name (the channels' prefix).
    pub(crate) fn schema_name(&self) -> &'a str {
        self.db.schema()
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
        let mut rows = self.pipeline(client, &[(doing, statement, params)]).await?;
        Ok(rows.pop().unwrap_or_default())
    }

    /// Runs `statements` in order in one round trip (the driver pipelines
    /// requests sent before their answers are read), after the writes
    /// deferred until now ([`Sql::defer`]), and returns each statement's
    /// rows: everything is prepared first (a no-op once cached), so the
    /// executions go out in the order given, each after the one before it
    /// ended (a statement sees what the ones before it wrote and, in
    /// `READ COMMITTED`, every commit before it started). The first failure
    /// is the answer; the statements after it fail with it (the transaction
    /// is aborted) and the caller rolls back.
    pub(crate) async fn pipeline(
        &self,
        client: &impl Conn,
        statements: &[(&str, &str, Params<'_>)],
    ) -> Result<Vec<Vec<Row>>> {
        let deferred = client.deferred().map(take).unwrap_or_default();
        let params: Vec<Vec<&(dyn ToSql + Sync)>> = deferred
            .iter()
            .map(|d| {
                d.params
                    .iter()
                    .map(|p| &**p as &(dyn ToSql + Sync))
                    .collect()
            })
            .collect();
        let all: Vec<(&str, &str, Params<'_>)> = deferred
            .iter()
            .zip(&params)
            .map(|(d, p)| (d.doing, d.statement.as_str(), p.as_slice()))
            .chain(statements.iter().copied())
            .collect();
        let prepared = futures::future::join_all(all.iter().map(|(_, s, _)| client.prepare(s)));
        let mut ready = Vec::with_capacity(all.len());
        for (result, (doing, _, _)) in prepared.await.into_iter().zip(&all) {
            ready.push(result.map_err(|e| self.error(doing, e))?);
        }
        let begin = client.begin();
        let queries = futures::future::join_all(
            ready
                .iter()
                .zip(&all)
                .map(|(p, (_, _, params))| client.query(p, params)),
        );
        let (began, answers) = match begin {
            Some(begin) => {
                let (began, answers) = futures::future::join(begin, queries).await;
                (Some(began), answers)
            }
            None => (None, queries.await),
        };
        if let Some(Err(e)) = began {
            return Err(self.error("starting a transaction", e));
        }
        let mut answers = answers
            .into_iter()
            .zip(&all)
            .map(|(rows, (doing, _, _))| rows.map_err(|e| self.error(doing, e)))
            .collect::<Result<Vec<_>>>()?;
        Ok(answers.split_off(deferred.len()))
    }

    /// Runs a write whose answer nobody reads: in a transaction of the
    /// store's own it goes out with the next round trip (at the latest
    /// with the `COMMIT`), in order, its failure failing that round trip;
    /// elsewhere it runs now.
    pub(crate) async fn defer(
        &self,
        client: &impl Conn,
        doing: &'static str,
        statement: String,
        params: Vec<Owned>,
    ) -> Result<()> {
        match client.deferred() {
            Some(queue) => {
                queue
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(Deferred {
                        doing,
                        statement,
                        params,
                    });
                Ok(())
            }
            None => {
                let params: Vec<&(dyn ToSql + Sync)> =
                    params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
                self.query(client, doing, &statement, &params)
                    .await
                    .map(drop)
            }
        }
    }
}

/// A statement parameter of its own.
pub(crate) type Owned = Box<dyn ToSql + Sync + Send>;

/// The parameters of a write put off ([`Sql::defer`]), each [`Owned`]:
/// `owned![sid, index, now]`.
macro_rules! owned {
    ($($param:expr),* $(,)?) => {
        vec![$(Box::new($param) as $crate::sql::Owned),*]
    };
}
pub(crate) use owned;

/// A write put off until the transaction's next round trip
/// ([`Sql::defer`]).
pub(crate) struct Deferred {
    doing: &'static str,
    statement: String,
    params: Vec<Owned>,
}

/// The writes put off so far, taken.
fn take(queue: &std::sync::Mutex<Vec<Deferred>>) -> Vec<Deferred> {
    std::mem::take(
        &mut *queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
}

/// What a2's statements run on: a transaction of the store's own
/// ([`crate::op::Tx`]), whose statements are prepared once per pooled
/// connection and kept (deadpool's statement cache) and whose `BEGIN` goes
/// out with its first statement, or the application's transaction
/// (`append_in`), where each is prepared as it runs.
#[async_trait]
pub(crate) trait Conn: Send + Sync {
    /// `statement`, prepared.
    async fn prepare(&self, statement: &str) -> Answer<Statement>;

    /// The rows of `statement` with `params`: the request goes out when the
    /// future is first polled.
    async fn query(&self, statement: &Statement, params: Params<'_>) -> Answer<Vec<Row>>;

    /// The transaction's start, when it is still to be sent: once, sent
    /// when first polled, before the statements polled after it.
    fn begin(&self) -> Option<futures::future::BoxFuture<'_, Answer<()>>> {
        None
    }

    /// Where writes are put off ([`Sql::defer`]); none where they run at
    /// once.
    fn deferred(&self) -> Option<&std::sync::Mutex<Vec<Deferred>>> {
        None
    }
}

/// What the driver answers.
pub(crate) type Answer<T> = std::result::Result<T, tokio_postgres::Error>;

#[async_trait]
impl Conn for tokio_postgres::Transaction<'_> {
    async fn prepare(&self, statement: &str) -> Answer<Statement> {
        tokio_postgres::Transaction::prepare(self, statement).await
    }

    async fn query(&self, statement: &Statement, params: Params<'_>) -> Answer<Vec<Row>> {
        tokio_postgres::Transaction::query(self, statement, params).await
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
