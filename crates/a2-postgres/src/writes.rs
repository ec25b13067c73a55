//! Writes whose answer nobody reads, sent as few statements as Postgres
//! allows: consecutive writes to distinct tables go out as one statement of
//! data-modifying `WITH` queries (`docs/postgres-layout.md`, "Round
//! trips").

use std::fmt::Write as _;

use a2_core::Result;

use crate::sql::{Conn, Owned, Sql};

/// Writes gathered in order, each to one table, none reading a table
/// another one writes: what an append inserts and the `UPDATE sessions`
/// that counts it, what a completion changes of its event.
///
/// [`Writes::defer`] joins each run of writes to distinct tables into one
/// statement. Postgres runs a statement's `WITH` queries on one snapshot,
/// none seeing what another changed, and changes a row at most once per
/// statement: hence one table per write, a new statement when a table
/// comes again, and no write that reads what another wrote.
#[derive(Default)]
pub(crate) struct Writes {
    parts: Vec<Part>,
}

struct Part {
    table: &'static str,
    statement: String,
    params: Vec<Owned>,
}

impl Writes {
    /// Adds `statement` (parameters `$1…`), which writes `table` only.
    pub(crate) fn push(&mut self, table: &'static str, statement: String, params: Vec<Owned>) {
        self.parts.push(Part {
            table,
            statement,
            params,
        });
    }

    /// Puts the writes off until the transaction's next round trip
    /// ([`Sql::defer`]), as few statements as the tables allow, and empties
    /// the list.
    pub(crate) async fn defer(
        &mut self,
        sql: &Sql<'_>,
        client: &impl Conn,
        doing: &'static str,
    ) -> Result<()> {
        for (statement, params) in joined(std::mem::take(&mut self.parts)) {
            sql.defer(client, doing, statement, params).await?;
        }
        Ok(())
    }
}

/// `parts` as statements: each run of parts to distinct tables one
/// statement, every part but the run's last a `WITH` query.
fn joined(parts: Vec<Part>) -> Vec<(String, Vec<Owned>)> {
    let mut runs: Vec<Vec<Part>> = Vec::new();
    for part in parts {
        match runs.last_mut() {
            Some(run) if run.iter().all(|p| p.table != part.table) => run.push(part),
            _ => runs.push(vec![part]),
        }
    }
    runs.into_iter().map(one_statement).collect()
}

/// One statement of `run` (not empty): `WITH w0 AS (…), w1 AS (…) last`,
/// the parameters numbered through.
fn one_statement(run: Vec<Part>) -> (String, Vec<Owned>) {
    let last = run.len() - 1;
    let mut text = String::new();
    let mut params: Vec<Owned> = Vec::new();
    for (at, part) in run.into_iter().enumerate() {
        let statement = renumber(&part.statement, params.len());
        if at < last {
            let _ = write!(
                text,
                "{} w{at} AS ({statement})",
                if at == 0 { "WITH" } else { "," }
            );
        } else if at == 0 {
            text = statement;
        } else {
            let _ = write!(text, " {statement}");
        }
        params.extend(part.params);
    }
    (text, params)
}

/// `statement` with each parameter `$k` written `$(k + offset)`. a2's
/// statements have no string literal or dollar quote holding a `$`.
fn renumber(statement: &str, offset: usize) -> String {
    if offset == 0 {
        return statement.to_owned();
    }
    let mut out = String::with_capacity(statement.len() + 16);
    let mut rest = statement;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if let Ok(k) = rest[..digits].parse::<usize>() {
            let _ = write!(out, "{}", k + offset);
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(table: &'static str, statement: &str, params: usize) -> Part {
        Part {
            table,
            statement: statement.to_owned(),
            params: (0..params).map(|n| Box::new(n as i64) as Owned).collect(),
        }
    }

    #[test]
    fn renumbering_shifts_every_parameter_and_nothing_else() {
        assert_eq!(
            renumber("SELECT $1, $10::bigint[], a$b, $2", 3),
            "SELECT $4, $13::bigint[], a$b, $5"
        );
        assert_eq!(renumber("UPDATE t SET x = $1", 0), "UPDATE t SET x = $1");
    }

    #[test]
    fn writes_to_distinct_tables_join_and_a_table_met_again_starts_a_statement() {
        let statements = joined(vec![
            part("records", "UPDATE records SET a = $1 WHERE b = $2", 2),
            part("ready", "DELETE FROM ready WHERE c = $1", 1),
            part("ready", "INSERT INTO ready SELECT $1", 1),
            part("sessions", "UPDATE sessions SET d = $1", 1),
        ]);
        let texts: Vec<(&str, usize)> = statements
            .iter()
            .map(|(text, params)| (text.as_str(), params.len()))
            .collect();
        assert_eq!(
            texts,
            vec![
                (
                    "WITH w0 AS (UPDATE records SET a = $1 WHERE b = $2) \
                     DELETE FROM ready WHERE c = $3",
                    3
                ),
                (
                    "WITH w0 AS (INSERT INTO ready SELECT $1) UPDATE sessions SET d = $2",
                    2
                ),
            ]
        );
    }

    #[test]
    fn a_single_write_is_sent_as_written() {
        let statements = joined(vec![part("sessions", "UPDATE sessions SET d = $1", 1)]);
        assert_eq!(statements[0].0, "UPDATE sessions SET d = $1");
        assert!(joined(Vec::new()).is_empty());
    }
}
