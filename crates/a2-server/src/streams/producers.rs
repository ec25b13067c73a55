//! Idempotent producers (`Producer-Id`, `Producer-Epoch`, `Producer-Seq`)
//! and `Stream-Seq` writer ordering, on a2's conditional append (A13).
//!
//! A write that carries either appends, after its data, one settled
//! `a2.stream.write` event (hidden from readers) saying who wrote it: the
//! producer with its epoch and sequence number, and the `Stream-Seq`. The
//! writers' state of a stream — each producer's epoch and last sequence
//! number, the last `Stream-Seq` — is a fold of those events. A write is
//! judged on the state folded through the stream's tail `F` and appended
//! with `if_frontier = F`: if anything came in between (from this process
//! or another sharing the store), the append is refused (`FrontierMoved`)
//! and the write is judged again on the new state. So a retry after a lost
//! response is acknowledged without a second write, a fenced producer
//! stays fenced, and a sequence gap is refused — on every store, across
//! restarts (the state is in the log) and across processes.
//!
//! Each process keeps the folded state of the streams it wrote to lately,
//! so a write reads only what came since; a stream written first after a
//! restart is folded from its start once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use a2_core::{Event, NewEvent, ReadEventsOptions};
use serde::{Deserialize, Serialize};

use super::config::Stream;
use crate::error::ApiError;
use crate::streams::Engine;

/// The event type that records who wrote an append.
pub(crate) const WRITE: &str = "a2.stream.write";
/// Streams whose writers' state a process keeps at most.
const CACHED: usize = 10_000;

/// A producer's claim on a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Producer {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// What a write event says.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Written {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    producer: Option<Producer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seq: Option<String>,
}

/// How a producer's write is judged against its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The next write of the producer: append it.
    Accept,
    /// Written before (a retry): acknowledge with the last accepted seq.
    Duplicate { last_seq: u64 },
    /// An older epoch than the producer's current one: fenced (403).
    Stale { current: u64 },
    /// A new epoch that does not start at sequence 0 (400).
    EpochNotAtZero,
    /// A sequence number past the next one (409).
    Gap { expected: u64, received: u64 },
}

/// The producer state machine: `state` is the producer's `(epoch, last
/// seq)` in the stream, if it wrote before.
pub(crate) fn judge(state: Option<(u64, u64)>, p: &Producer) -> Verdict {
    match state {
        None if p.seq == 0 => Verdict::Accept,
        None => Verdict::Gap {
            expected: 0,
            received: p.seq,
        },
        Some((epoch, _)) if p.epoch < epoch => Verdict::Stale { current: epoch },
        Some((epoch, _)) if p.epoch > epoch => {
            if p.seq == 0 {
                Verdict::Accept
            } else {
                Verdict::EpochNotAtZero
            }
        }
        Some((_, last)) if p.seq <= last => Verdict::Duplicate { last_seq: last },
        Some((_, last)) if p.seq == last + 1 => Verdict::Accept,
        Some((_, last)) => Verdict::Gap {
            expected: last + 1,
            received: p.seq,
        },
    }
}

/// The writers' state of one stream, folded through `through`.
#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    /// The index the fold has read through.
    through: u64,
    /// Which incarnation of the session (its first event's time): a stream
    /// deleted and made again starts over.
    incarnation: i64,
    producers: HashMap<String, (u64, u64)>,
    last_seq: Option<String>,
}

impl State {
    /// The producer's `(epoch, last seq)`, if it wrote before.
    pub fn producer(&self, id: &str) -> Option<(u64, u64)> {
        self.producers.get(id).copied()
    }

    /// The last `Stream-Seq` written, if any.
    pub fn last_seq(&self) -> Option<&str> {
        self.last_seq.as_deref()
    }

    fn fold(&mut self, event: &Event) {
        self.through = self.through.max(event.index);
        if event.event_type != WRITE {
            return;
        }
        let Ok(written) = serde_json::from_value::<Written>(event.payload.clone()) else {
            return;
        };
        if let Some(p) = written.producer {
            self.producers.insert(p.id, (p.epoch, p.seq));
        }
        if written.seq.is_some() {
            self.last_seq = written.seq;
        }
    }
}

/// The event that records a write's producer and `Stream-Seq`.
pub(crate) fn write_event(producer: Option<&Producer>, seq: Option<&str>) -> NewEvent {
    let written = Written {
        producer: producer.cloned(),
        seq: seq.map(str::to_owned),
    };
    NewEvent::new(WRITE, serde_json::to_value(written).unwrap_or_default()).settled()
}

/// The writers' states of the streams this process wrote to lately.
#[derive(Debug, Default)]
pub(crate) struct Writers {
    cache: Mutex<HashMap<String, State>>,
}

impl Writers {
    /// The state of `session` folded through `stream.tail`.
    pub async fn state(
        &self,
        app: &Arc<Engine>,
        session: &str,
        stream: &Stream,
    ) -> Result<State, ApiError> {
        let cached = self
            .cache
            .lock()
            .ok()
            .and_then(|cache| cache.get(session).cloned())
            .filter(|s| s.incarnation == stream.first_event_at && s.through <= stream.tail);
        // A fork's writers start afresh: what it took from its source was
        // written to the source.
        let mut state = cached.unwrap_or_else(|| State {
            incarnation: stream.first_event_at,
            through: stream.forked_at.unwrap_or(0),
            ..State::default()
        });
        while state.through < stream.tail {
            let page = app
                .store
                .read_events(
                    session,
                    ReadEventsOptions::new(1_000)
                        .after_index(state.through)
                        .through_index(Some(stream.tail)),
                )
                .await?;
            if page.events.is_empty() {
                break;
            }
            for row in &page.events {
                state.fold(&row.event);
            }
        }
        Ok(state)
    }

    /// Keeps `state` advanced by what this process just appended.
    pub fn wrote(&self, session: &str, mut state: State, appended: &[a2_core::StoredEvent]) {
        for row in appended {
            state.fold(&row.event);
        }
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= CACHED && !cache.contains_key(session) {
                // Crude but bounded: a stream folded again costs one read
                // of its log.
                cache.clear();
            }
            cache.insert(session.to_owned(), state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(epoch: u64, seq: u64) -> Producer {
        Producer {
            id: "w".into(),
            epoch,
            seq,
        }
    }

    #[test]
    fn the_producer_state_machine() {
        assert_eq!(judge(None, &p(0, 0)), Verdict::Accept);
        assert_eq!(judge(None, &p(3, 0)), Verdict::Accept);
        assert_eq!(
            judge(None, &p(0, 2)),
            Verdict::Gap {
                expected: 0,
                received: 2
            }
        );
        assert_eq!(judge(Some((1, 4)), &p(1, 5)), Verdict::Accept);
        assert_eq!(
            judge(Some((1, 4)), &p(1, 4)),
            Verdict::Duplicate { last_seq: 4 }
        );
        assert_eq!(
            judge(Some((1, 4)), &p(1, 0)),
            Verdict::Duplicate { last_seq: 4 }
        );
        assert_eq!(
            judge(Some((1, 4)), &p(1, 7)),
            Verdict::Gap {
                expected: 5,
                received: 7
            }
        );
        assert_eq!(judge(Some((1, 4)), &p(0, 5)), Verdict::Stale { current: 1 });
        assert_eq!(judge(Some((1, 4)), &p(2, 0)), Verdict::Accept);
        assert_eq!(judge(Some((1, 4)), &p(2, 1)), Verdict::EpochNotAtZero);
    }
}
