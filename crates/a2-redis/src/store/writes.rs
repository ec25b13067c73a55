//! The other writes: `put_snapshots` (S2), presence (P1, P2, P3) and
//! `clear` (I4).

use a2_core::validate;
use a2_core::*;
use serde_json::Value as Json;

use crate::ops::{self};

use super::*;

impl RedisStore {
    pub(super) async fn put_snapshots_op(
        &self,
        session: &str,
        snapshots: Vec<SnapshotWrite>,
    ) -> Result<()> {
        let inner = self.open()?;
        validate::snapshots(session, &snapshots)?;
        if snapshots.is_empty() {
            return Ok(());
        }
        let reply = inner
            .run(
                &ops::snapshots::SCRIPT,
                session,
                inner.now(),
                ops::snapshots::encode(&snapshots),
            )
            .await?;
        ops::snapshots::decode(reply)?.map_err(|index| {
            Error::invalid(format!(
                "snapshot index {index} is beyond the frontier of session {session:?}"
            ))
        })
    }

    pub(super) async fn presence_apply_op(
        &self,
        write: PresenceRequest<'_>,
    ) -> Result<Option<PresencePatch>> {
        let PresenceRequest {
            ns,
            participant,
            values,
            meta,
        } = write;
        let inner = self.open()?;
        let keys = inner.session_keys(ns);
        let args = ops::presence::encode_set(&keys.presence_channel, participant, &values, &meta)?;
        let reply = inner
            .run(&ops::presence::SET, ns, inner.now(), args)
            .await?;
        let applied = ops::presence::decode_set(reply)?;
        if applied.is_empty() {
            return Ok(None);
        }
        let all: Vec<(String, Option<Json>)> = values.into_iter().collect();
        let values = applied
            .into_iter()
            .filter_map(|k| all.get((k as usize).wrapping_sub(1)).cloned())
            .collect();
        Ok(Some(PresencePatch {
            participant: participant.to_owned(),
            values,
            seen: meta.seen,
            at: meta.at,
        }))
    }

    pub(super) async fn presence_read_op(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        self.inner.check_open()?;
        validate::name("namespace", ns)?;
        self.inner.presence_entries(ns).await
    }

    pub(super) async fn close_session_op(&self, session: &str) -> Result<CloseOutcome> {
        let inner = self.open()?;
        validate::session_id(session)?;
        let reply = inner
            .run(
                &ops::lifecycle::CLOSE,
                session,
                inner.now(),
                ops::lifecycle::encode_close(),
            )
            .await?;
        match ops::lifecycle::decode_close(reply)? {
            Some(outcome) => Ok(outcome),
            // CL1: the same refusal as every store's.
            None => Err(rules::lifecycle::nothing_to_close(session)),
        }
    }

    pub(super) async fn set_expiry_op(
        &self,
        session: &str,
        expiry: Expiry,
    ) -> Result<ExpiryOutcome> {
        let inner = self.open()?;
        validate::session_id(session)?;
        let now = inner.now();
        let expiry = validate::session_expiry(expiry, now)?;
        let reply = inner
            .run(
                &ops::lifecycle::SET_EXPIRY,
                session,
                now,
                ops::lifecycle::encode_set_expiry(expiry),
            )
            .await?;
        match ops::lifecycle::decode_set_expiry(reply)? {
            Some(deadline) => Ok(ExpiryOutcome { deadline }),
            None => Err(rules::lifecycle::no_session(session)),
        }
    }

    /// TR1, TR2: the log's ids of the range are read first (`XRANGE`,
    /// here, is cheaper than in Lua, which makes a table of every entry's
    /// fields), and `trim.lua` checks them against the id index before it
    /// writes: a read overtaken by another trim (or a clear) is read again.
    pub(super) async fn trim_op(&self, session: &str, through: u64) -> Result<TrimOutcome> {
        /// Reads of the ids before a trim gives up, each overtaken by
        /// another writer's trim or clear.
        const READS: usize = 3;
        let inner = self.open()?;
        validate::session_id(session)?;
        for _ in 0..READS {
            let ids = inner.log_ids(session, through, validate::MAX_LIMIT).await?;
            if let Some(outcome) = self.trim_with(session, through, &ids).await? {
                return Ok(outcome);
            }
        }
        Err(Error::unavailable(format!(
            "trim of session {session:?}: other writers trimmed or cleared it during each of \
             {READS} tries; nothing was trimmed, try again"
        )))
    }

    /// One run of `trim.lua` with `ids` as the log's ids from the first
    /// retained event (`#{event id}`): `None` when they are not the log's
    /// now (nothing written).
    pub(super) async fn trim_with(
        &self,
        session: &str,
        through: u64,
        ids: &[Vec<u8>],
    ) -> Result<Option<TrimOutcome>> {
        use ops::lifecycle::TrimReply;
        let inner = self.open()?;
        let reply = inner
            .run(
                &ops::lifecycle::TRIM,
                session,
                inner.now(),
                ops::lifecycle::encode_trim(through, ids),
            )
            .await?;
        match ops::lifecycle::decode_trim(reply)? {
            TrimReply::Trimmed(outcome) => Ok(Some(outcome)),
            // TR2: the same refusals as every store's.
            TrimReply::Beyond { frontier } => Err(rules::lifecycle::beyond_frontier(
                session, through, frontier,
            )),
            TrimReply::Unsettled { index, dead } => {
                Err(rules::lifecycle::unsettled(session, index, dead))
            }
            TrimReply::Corrupted { index } => Err(rules::read::missing(session, index)),
            TrimReply::Stale => Ok(None),
        }
    }

    pub(super) async fn clear_op(&self, session: &str) -> Result<()> {
        let inner = self.open()?;
        validate::session_id(session)?;
        inner
            .run(
                &ops::clear::SCRIPT,
                session,
                inner.now(),
                ops::clear::encode(),
            )
            .await?;
        Ok(())
    }
}
