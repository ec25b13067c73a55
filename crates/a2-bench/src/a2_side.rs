//! The a2 side of each scenario, written against `Arc<dyn Store>` so every
//! store runs the very same code. (The baselines' sides are in `raw` and
//! `bullmq`; the runtime's work cycle is in `wiring`.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2::{NewEvent, Store};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;

use crate::BoxError;

pub fn event(n: u64) -> NewEvent {
    NewEvent::new("bench", json!({ "n": n }))
}

/// `calls` appends of `batch` events each, spread over `tasks` concurrent
/// tasks, each appending to its own session. Returns the wall time.
pub async fn append(
    store: &Arc<dyn Store>,
    batch: usize,
    tasks: usize,
    calls: u64,
    tag: &str,
) -> Result<Duration, BoxError> {
    let per_task = calls / tasks as u64;
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = store.clone();
        let session = format!("bench:append:{tag}:{t}");
        handles.push(tokio::spawn(async move {
            for c in 0..per_task {
                let events = (0..batch as u64)
                    .map(|i| event(c * batch as u64 + i))
                    .collect();
                store.append(&session, events).await?;
            }
            Ok::<_, a2::Error>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(started.elapsed())
}

/// Live latency: `events` single-event appends on `writer`, one every
/// `interval`, to a session that a caught-up feed of `reader` (another store
/// instance on the same backend) follows. Returns each append-to-delivery
/// latency.
pub async fn feed_latency(
    writer: &Arc<dyn Store>,
    reader: &Arc<dyn Store>,
    events: u64,
    interval: Duration,
    tag: &str,
) -> Result<(Vec<Duration>, Vec<Duration>), BoxError> {
    let session = format!("bench:live:{tag}");
    let (tx, mut rx) = mpsc::unbounded_channel::<(u64, Instant)>();
    let mut feed = reader.stream(&session, 0);
    let follower = tokio::spawn(async move {
        while let Some(item) = feed.next().await {
            let e = item?;
            if tx.send((e.index, Instant::now())).is_err() {
                break;
            }
        }
        Ok::<_, a2::Error>(())
    });
    // One warm-up event, so the feed is caught up and live before timing.
    writer.append(&session, vec![event(0)]).await?;
    wait_for(&mut rx, 1).await?;
    let mut sent = Vec::with_capacity(events as usize);
    let mut writes = Vec::with_capacity(events as usize);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 1..=events {
        ticker.tick().await;
        let at = Instant::now();
        sent.push(at);
        writer.append(&session, vec![event(n)]).await?;
        writes.push(at.elapsed());
    }
    let mut latencies = Vec::with_capacity(events as usize);
    while (latencies.len() as u64) < events {
        let (index, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .map_err(|_| "feed stalled: an event was not delivered within 30 s")?
            .ok_or("feed ended early")?;
        // Index 1 was the warm-up; timed events are 2 ..= events + 1.
        if index >= 2 {
            latencies.push(at.saturating_duration_since(sent[(index - 2) as usize]));
        }
    }
    follower.abort();
    Ok((latencies, writes))
}

async fn wait_for(
    rx: &mut mpsc::UnboundedReceiver<(u64, Instant)>,
    index: u64,
) -> Result<(), BoxError> {
    loop {
        let (i, _) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .map_err(|_| "feed stalled before it was live")?
            .ok_or("feed ended early")?;
        if i >= index {
            return Ok(());
        }
    }
}

/// Feeds opened by [`FanOut::open`]: `feeds` feeds over `sessions` sessions,
/// all in this process.
pub struct FanOut {
    sessions: Vec<String>,
    per_session: usize,
    rx: mpsc::UnboundedReceiver<(usize, u64, Instant)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    frontier: u64,
}

impl FanOut {
    /// Opens the feeds on `reader` and waits until every one is live: one
    /// event appended (by `writer`) to each session has reached all its feeds.
    pub async fn open(
        reader: &Arc<dyn Store>,
        writer: &Arc<dyn Store>,
        feeds: usize,
        sessions: usize,
        tag: &str,
    ) -> Result<Self, BoxError> {
        let names: Vec<String> = (0..sessions)
            .map(|s| format!("bench:fanout:{tag}:{s}"))
            .collect();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut tasks = Vec::with_capacity(feeds);
        for f in 0..feeds {
            let s = f % sessions;
            let mut feed = reader.stream(&names[s], 0);
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(Ok(e)) = feed.next().await {
                    if tx.send((s, e.index, Instant::now())).is_err() {
                        break;
                    }
                }
            }));
        }
        let mut fan = Self {
            sessions: names,
            per_session: feeds / sessions,
            rx,
            tasks,
            frontier: 0,
        };
        let started = Instant::now();
        for name in &fan.sessions {
            writer.append(name, vec![event(0)]).await?;
        }
        fan.frontier = 1;
        let mut live = 0;
        while live < feeds {
            let (_, index, _) = tokio::time::timeout(Duration::from_secs(120), fan.rx.recv())
                .await
                .map_err(|_| format!("only {live} of {feeds} feeds went live within 120 s"))?
                .ok_or("feeds ended early")?;
            if index == 1 {
                live += 1;
            }
        }
        eprintln!(
            "  {feeds} feeds live in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Ok(fan)
    }

    /// Appends one event to each session in turn (by `writer`), waiting each
    /// time until all its feeds have it. Returns every delivery latency.
    pub async fn deliver_round(
        &mut self,
        writer: &Arc<dyn Store>,
    ) -> Result<Vec<Duration>, BoxError> {
        self.frontier += 1;
        let index = self.frontier;
        let mut latencies = Vec::with_capacity(self.sessions.len() * self.per_session);
        for (s, name) in self.sessions.iter().enumerate() {
            let sent = Instant::now();
            writer.append(name, vec![event(index)]).await?;
            let mut got = 0;
            while got < self.per_session {
                let (from, i, at) = tokio::time::timeout(Duration::from_secs(30), self.rx.recv())
                    .await
                    .map_err(|_| "a fan-out delivery stalled for 30 s")?
                    .ok_or("feeds ended early")?;
                if from == s && i == index {
                    got += 1;
                    latencies.push(at.saturating_duration_since(sent));
                }
            }
        }
        Ok(latencies)
    }

    /// Drops every feed.
    pub fn close(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// The steps of the command-count scenario, run one window at a time so the
/// caller can cut the server's counts between them.
pub struct CommandSteps {
    writer: Arc<dyn Store>,
    session: String,
    live: String,
    claimed: Vec<(u64, u32)>,
    rx: Option<mpsc::UnboundedReceiver<(u64, Instant)>>,
    follower: Option<tokio::task::JoinHandle<()>>,
}

impl CommandSteps {
    /// Steps on `writer`.
    pub fn new(writer: Arc<dyn Store>, tag: &str) -> Self {
        Self {
            writer,
            session: format!("bench:cmds:{tag}"),
            live: format!("bench:cmds-live:{tag}"),
            claimed: Vec::new(),
            rx: None,
            follower: None,
        }
    }

    /// One append, claim and completion on a session of its own, so every
    /// script is loaded before counting starts.
    pub async fn warm_up(&mut self) -> Result<(), BoxError> {
        let session = format!("{}:warm-up", self.session);
        self.writer.append(&session, vec![event(0)]).await?;
        let outcome = self
            .writer
            .claim_available(a2::ClaimRequest {
                session: session.clone(),
                holder: "bench".into(),
                lease: a2::Lease::Ttl(60_000),
                exclude_indexes: Vec::new(),
                limit: 1,
            })
            .await?;
        if let a2::ClaimOutcome::Claimed { events, .. } = outcome {
            for e in events {
                self.writer
                    .complete_attempt(a2::CompleteRequest {
                        session: session.clone(),
                        index: e.index(),
                        attempt: e.attempt_count,
                        events: Vec::new(),
                        batch_size: None,
                    })
                    .await?;
            }
        }
        Ok(())
    }

    /// `ops` single-event appends, one at a time.
    pub async fn appends(&mut self, ops: u64) -> Result<u64, BoxError> {
        for n in 0..ops {
            self.writer.append(&self.session, vec![event(n)]).await?;
        }
        Ok(ops)
    }

    /// Claims everything pending, 100 at a time. Returns how many were claimed.
    pub async fn claims(&mut self) -> Result<u64, BoxError> {
        loop {
            let outcome = self
                .writer
                .claim_available(a2::ClaimRequest {
                    session: self.session.clone(),
                    holder: "bench".into(),
                    lease: a2::Lease::Ttl(60_000),
                    exclude_indexes: Vec::new(),
                    limit: 100,
                })
                .await?;
            match outcome {
                a2::ClaimOutcome::Claimed { events, .. } => {
                    self.claimed
                        .extend(events.iter().map(|e| (e.index(), e.attempt_count)));
                }
                _ => return Ok(self.claimed.len() as u64),
            }
        }
    }

    /// Completes every claimed event with no returned events.
    pub async fn completes(&mut self) -> Result<u64, BoxError> {
        for (index, attempt) in &self.claimed {
            self.writer
                .complete_attempt(a2::CompleteRequest {
                    session: self.session.clone(),
                    index: *index,
                    attempt: *attempt,
                    events: Vec::new(),
                    batch_size: None,
                })
                .await?;
        }
        Ok(self.claimed.len() as u64)
    }

    /// Opens a feed in `reader` (another instance) and waits until it is
    /// caught up and live (one warm-up event delivered).
    pub async fn open_feed(&mut self, reader: &Arc<dyn Store>) -> Result<(), BoxError> {
        let (tx, mut rx) = mpsc::unbounded_channel::<(u64, Instant)>();
        let mut feed = reader.stream(&self.live, 0);
        self.follower = Some(tokio::spawn(async move {
            while let Some(Ok(e)) = feed.next().await {
                if tx.send((e.index, Instant::now())).is_err() {
                    break;
                }
            }
        }));
        self.writer.append(&self.live, vec![event(0)]).await?;
        wait_for(&mut rx, 1).await?;
        self.rx = Some(rx);
        Ok(())
    }

    /// `ops` single-event appends to the followed session, each waited for
    /// until the feed delivered it.
    pub async fn deliveries(&mut self, ops: u64) -> Result<u64, BoxError> {
        let rx = self.rx.as_mut().ok_or("open_feed first")?;
        for n in 1..=ops {
            self.writer.append(&self.live, vec![event(n)]).await?;
            wait_for(rx, n + 1).await?;
        }
        Ok(ops)
    }

    /// Drops the feed.
    pub fn close_feed(&mut self) {
        if let Some(f) = self.follower.take() {
            f.abort();
        }
    }
}
