//! What a write tells other processes, sent with `pg_notify` in the
//! write's own transaction: Postgres delivers a notice only when that
//! transaction commits, so a rolled-back write (the application's own
//! transaction included) wakes nobody (docs/postgres-layout.md,
//! "Notices").

use a2_core::Result;
use serde_json::json;
use tokio_postgres::GenericClient;

use crate::sql::Sql;

/// The channels of a store's notices in `schema` (its plain name): one
/// set per schema, so that deployments sharing a database do not hear each
/// other.
pub(crate) fn channel(schema: &str, what: Channel) -> String {
    let what = match what {
        Channel::Events => "events",
        Channel::Work => "work",
        Channel::Cancels => "cancels",
    };
    format!("{schema}.{what}")
}

/// What a notice is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channel {
    /// A session's log moved or closed (ST2, CL4): `{"s", "f", "c"?}`.
    Events,
    /// A session has new claimable work (PS2): the session's name.
    Work,
    /// A leased attempt was cancelled (CN5): `{"session", "index",
    /// "attempt"}`.
    Cancels,
}

/// The notices of one transaction, sent just before it commits.
#[derive(Debug, Default)]
pub(crate) struct Notices {
    events: Vec<(String, u64, bool)>,
    work: Vec<String>,
    cancels: Vec<String>,
}

impl Notices {
    /// Session `name`'s log reached `frontier`, closed there when `closed`.
    pub(crate) fn appended(&mut self, name: &str, frontier: u64, closed: bool) {
        self.events.push((name.to_owned(), frontier, closed));
    }

    /// Session `name` has new claimable work (PS2).
    pub(crate) fn work(&mut self, name: &str) {
        if !self.work.iter().any(|w| w == name) {
            self.work.push(name.to_owned());
        }
    }

    /// Attempt `attempt` of event `index` of session `name` was cancelled
    /// (CN5).
    pub(crate) fn cancelled(&mut self, name: &str, index: u64, attempt: u32) {
        let payload = json!({ "session": name, "index": index, "attempt": attempt });
        self.cancels.push(payload.to_string());
    }

    /// Queues every notice in the transaction `client` is in: each is
    /// delivered when it commits, never if it rolls back.
    pub(crate) async fn send(
        self,
        sql: &Sql<'_>,
        client: &impl GenericClient,
        schema: &str,
    ) -> Result<()> {
        let mut channels = Vec::new();
        let mut payloads = Vec::new();
        for (name, frontier, closed) in self.events {
            channels.push(channel(schema, Channel::Events));
            let payload = if closed {
                json!({ "s": name, "f": frontier, "c": 1 })
            } else {
                json!({ "s": name, "f": frontier })
            };
            payloads.push(payload.to_string());
        }
        for name in self.work {
            channels.push(channel(schema, Channel::Work));
            payloads.push(name);
        }
        for payload in self.cancels {
            channels.push(channel(schema, Channel::Cancels));
            payloads.push(payload);
        }
        if channels.is_empty() {
            return Ok(());
        }
        sql.query(
            client,
            "sending notices",
            "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS u(c, p)",
            &[&channels, &payloads],
        )
        .await?;
        Ok(())
    }
}
