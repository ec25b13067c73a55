//! What a write tells other processes, sent with `pg_notify` in the
//! write's own transaction: Postgres delivers a notice only when that
//! transaction commits, so a rolled-back write (the application's own
//! transaction included) wakes nobody (docs/postgres-layout.md,
//! "Notices").

use crate::sql::Conn;
use a2_core::Result;
use serde_json::json;

use crate::sql::Sql;

/// The channels of a store's notices in `schema` (its plain name): one
/// set per schema, so that deployments sharing a database do not hear each
/// other.
pub(crate) fn channel(schema: &str, what: Channel) -> String {
    let what = match what {
        Channel::Events => "events",
        Channel::Work => "work",
        Channel::Cancels => "cancels",
        Channel::Presence => "presence",
    };
    format!("{schema}.{what}")
}

/// What a notice is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channel {
    /// A session's log moved (ST2): `{"s": session, "f": frontier}`, with
    /// `"r": 1` when its feeds must read whatever their position (a close,
    /// CL4; a clear, a trim, a fork, an expiry: ST6, TR3, EX4).
    Events,
    /// A session has new claimable work (PS2): the session's name, as a
    /// JSON string.
    Work,
    /// A leased attempt was cancelled (CN5): `{"session", "index",
    /// "attempt"}`.
    Cancels,
    /// A presence patch was applied (P4): `{"ns", "p": patch}`, or `{"ns"}`
    /// alone when the patch is too large for a notice (subscribers read).
    Presence,
}

/// The channels and payloads of a transaction's notices.
pub(crate) type Notify = (Vec<String>, Vec<String>);

/// Postgres refuses a notice payload of 8 000 bytes or more.
const MAX_PAYLOAD: usize = 7_900;

/// The notices of one transaction, sent just before it commits.
#[derive(Debug, Default)]
pub(crate) struct Notices {
    events: Vec<(String, u64, bool)>,
    work: Vec<String>,
    cancels: Vec<String>,
    presence: Vec<String>,
}

impl Notices {
    /// Session `name`'s log reached `frontier`; with `read`, its feeds
    /// read whatever their position (it closed, was cleared, trimmed,
    /// forked into, or its expiry changed).
    pub(crate) fn appended(&mut self, name: &str, frontier: u64, read: bool) {
        self.events.push((name.to_owned(), frontier, read));
    }

    /// `patch` was applied to namespace `ns` (P4).
    pub(crate) fn presence(&mut self, ns: &str, patch: &a2_core::PresencePatch) {
        let full = json!({ "ns": ns, "p": patch }).to_string();
        self.presence.push(if full.len() <= MAX_PAYLOAD {
            full
        } else {
            json!({ "ns": ns }).to_string()
        });
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
    pub(crate) async fn send(self, sql: &Sql<'_>, client: &impl Conn, schema: &str) -> Result<()> {
        if let Some((statement, (channels, payloads))) = self.statement(schema) {
            sql.query(
                client,
                "sending notices",
                statement,
                &[&channels, &payloads],
            )
            .await?;
        }
        Ok(())
    }

    /// The statement that queues every notice, with its channels and
    /// payloads; none when there is nothing to tell.
    pub(crate) fn statement(self, schema: &str) -> Option<(&'static str, Notify)> {
        let mut channels = Vec::new();
        let mut payloads = Vec::new();
        for (name, frontier, read) in self.events {
            channels.push(channel(schema, Channel::Events));
            let payload = if read {
                json!({ "s": name, "f": frontier, "r": 1 })
            } else {
                json!({ "s": name, "f": frontier })
            };
            payloads.push(payload.to_string());
        }
        for name in self.work {
            channels.push(channel(schema, Channel::Work));
            payloads.push(json!(name).to_string());
        }
        for payload in self.cancels {
            channels.push(channel(schema, Channel::Cancels));
            payloads.push(payload);
        }
        for payload in self.presence {
            channels.push(channel(schema, Channel::Presence));
            payloads.push(payload);
        }
        let statement = "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS u(c, p)";
        (!channels.is_empty()).then_some((statement, (channels, payloads)))
    }
}
