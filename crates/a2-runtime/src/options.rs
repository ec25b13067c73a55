//! [`Options`]: the knobs of the runtime (RT1).

use std::time::Duration;

use crate::backoff::Backoff;

/// The knobs of RT1. `Options::default()` gives the values listed per field.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// The lease holder id of this process (default: `worker-` and random hex).
    pub holder: String,
    /// How long a claim lasts before another process may take it over
    /// (default 30 s).
    pub lease_ttl: Duration,
    /// How often running handlers' leases are renewed (default 10 s; keep it
    /// well under `lease_ttl`).
    pub renew_interval: Duration,
    /// Failures after which an event is dead-lettered (default 5).
    pub max_failures: u32,
    /// Wait before retrying a failed event (default: [`Backoff::default`]).
    pub backoff: Backoff,
    /// Handlers running at once in this process, over all sessions
    /// (default 16). Events claimed past the free slots wait in a prefetch
    /// of four times as many places (RT13); a handler's slot frees when it
    /// returns, and recording the outcomes in the store takes up to five
    /// times as many places of their own (RT14).
    pub concurrency: usize,
    /// Write a reducer's snapshot back once a state read folded at least
    /// this many events (default 100; 0 never writes).
    pub snapshot_every: u64,
    /// How often a worker looks for sessions with pending events, and the
    /// longest a drain waits before asking again when the store says
    /// `Busy` (default 1 s).
    pub poll_interval: Duration,
    /// How long presence set through the runtime lives (default 30 s).
    pub presence_ttl: Duration,
    /// What workers keep of the sessions they drain (RT16; default: all).
    pub retention: Option<crate::Retention>,
    /// How long a handler whose event was cancelled may go on after it was
    /// told (`Context::cancelled`) before it is dropped (RT17; default 5 s).
    pub cancel_grace: Duration,
}

impl Default for Options {
    fn default() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Self {
            holder: format!("worker-{}", &id[..12]),
            lease_ttl: Duration::from_secs(30),
            renew_interval: Duration::from_secs(10),
            max_failures: 5,
            backoff: Backoff::default(),
            concurrency: 16,
            snapshot_every: 100,
            poll_interval: Duration::from_secs(1),
            presence_ttl: Duration::from_secs(30),
            retention: None,
            cancel_grace: Duration::from_secs(5),
        }
    }
}
