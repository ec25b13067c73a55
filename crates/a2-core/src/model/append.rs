//! Appends (§2): what an append does besides adding its batch, and the
//! request a store applies.

use serde::{Deserialize, Serialize};

use super::lifecycle::Expiry;

/// Options of [`crate::Store::append_with`]: a claim of the appended events
/// (AC2), the session's expiry (EX2), the frontier the append expects
/// (A13) and a close of the session at its new frontier (CL6), each
/// optional.
///
/// ```
/// use a2_core::{AppendOptions, Expiry};
///
/// // Append only if nothing came after index 41, and keep the session a day.
/// let options = AppendOptions::new().if_frontier(41).expiry(Expiry::ttl(86_400_000));
/// assert_eq!(options.if_frontier, Some(41));
/// // The last answer of a conversation: appended and closed in one step.
/// assert!(AppendOptions::new().close().close);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AppendOptions {
    /// Lease the appended events that are ready at once, as
    /// [`crate::Store::append_and_claim`] does.
    pub claim: Option<crate::model::AppendClaim>,
    /// Set the session's expiry in the same step.
    pub expiry: Option<Expiry>,
    /// Append only if the session's frontier is this index (0: the session
    /// has no events), else `FrontierMoved` (A13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_frontier: Option<u64>,
    /// Close the session at its new frontier in the same atomic step
    /// (CL6): the batch (not empty) and the close are written together or
    /// not at all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
}

impl AppendOptions {
    /// A plain append.
    pub fn new() -> Self {
        Self::default()
    }

    /// Claims the appended events that are ready at once (AC2).
    pub fn claim(mut self, claim: crate::model::AppendClaim) -> Self {
        self.claim = Some(claim);
        self
    }

    /// Closes the session at the frontier this append reaches, in the same
    /// atomic step (CL6): later appends are refused (CL2) and its feeds end
    /// after the last event (CL4). The batch must not be empty
    /// (`close_session` closes without appending).
    pub fn close(mut self) -> Self {
        self.close = true;
        self
    }

    /// Sets the session's expiry (EX2).
    pub fn expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = Some(expiry);
        self
    }

    /// Appends only if the session's frontier is `frontier` (A13): a writer
    /// that decided on what it read through `frontier` writes only if
    /// nothing came in between.
    pub fn if_frontier(mut self, frontier: u64) -> Self {
        self.if_frontier = Some(frontier);
        self
    }
}

/// An append that [`crate::validate::append_request`] accepted: what a store
/// writes in [`crate::Store::append_apply`].
#[derive(Debug, Clone, PartialEq)]
pub struct AppendRequest<'a> {
    /// The session appended to.
    pub session: &'a str,
    /// The batch.
    pub events: Vec<crate::model::NewEvent>,
    /// What the append does besides.
    pub options: AppendOptions,
}
