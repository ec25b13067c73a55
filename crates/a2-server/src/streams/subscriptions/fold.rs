//! A subscription's state: a fold of the events of its session
//! (`__ds/subscriptions/{id}`), and the decisions taken on it. Every
//! decision is a list of changes appended at the frontier it was taken at
//! (A13), so two processes sharing a store never both wake one generation
//! or both grant one claim.

use std::collections::{BTreeMap, HashMap, VecDeque};

use a2_core::{Event, Millis, NewEvent};
use serde::{Deserialize, Serialize};

use crate::streams::offsets::{self, Position};

/// An index as an offset, as subscriptions give them.
fn offset(index: u64) -> String {
    offsets::text(Position::index(index))
}

/// The session prefix of subscriptions.
pub(crate) const PREFIX: &str = "__ds/subscriptions/";
/// The event type of every change of a subscription.
pub(crate) const CHANGE: &str = "a2.subscription";
/// Callback tokens a subscription remembers after their wake ended, to
/// answer a late callback `FENCED` rather than `TOKEN_INVALID`.
const SPENT: usize = 64;
/// How long a callback token is good for.
pub(crate) const TOKEN_TTL_MS: Millis = 3_600_000;

/// How a subscription tells of pending work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// A signed `POST` to a URL.
    Webhook,
    /// An event in a wake stream; a worker claims the wake.
    PullWake,
}

/// A subscription's configuration, as its creator gave it (normalized):
/// a second `PUT` with the same one confirms it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Spec {
    #[serde(rename = "type")]
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Explicit streams, sorted, without duplicates.
    #[serde(default)]
    pub streams: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_stream: Option<String>,
    pub lease_ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A callback token, kept as its SHA-256 only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Token {
    pub hash: String,
    pub expires: Millis,
}

/// One change of a subscription: the payload of an `a2.subscription` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub(crate) enum Change {
    /// Made, with the streams linked at once and their acknowledged index
    /// (their tail then: only what comes later is work).
    Created {
        spec: Spec,
        /// The server's URL as the creator reached it (callbacks, JWKS).
        base: String,
        at: Millis,
        links: Vec<(String, bool, Option<u64>)>,
    },
    /// A stream linked explicitly (`glob: false`) or by the pattern.
    Linked {
        path: String,
        glob: bool,
        acked: Option<u64>,
    },
    /// An explicit link removed (a stream the pattern matches stays).
    Unlinked { path: String },
    /// A stream the pattern linked is gone.
    Dropped { path: String },
    /// A new wake generation, with the tails it was taken at; a webhook's
    /// token and lease come with it.
    Woke {
        generation: u64,
        wake_id: String,
        snapshot: Vec<(String, u64)>,
        token: Option<Token>,
        lease_until: Option<Millis>,
    },
    /// A pull-wake worker holds the wake.
    Claimed {
        holder: String,
        token: Token,
        lease_until: Millis,
    },
    /// Offsets acknowledged, the lease extended.
    Acked {
        acks: Vec<(String, u64)>,
        lease_until: Millis,
    },
    /// The wake is over (done, released, or done by the webhook's answer:
    /// then its snapshot is acknowledged).
    Ended { snapshot_acked: bool },
    /// The whole state, so what came before it can be trimmed away: a
    /// subscription's log does not grow with every wake.
    Compacted { state: Box<Whole> },
}

/// A subscription's whole state, as a compaction writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Whole {
    spec: Spec,
    base: String,
    at: Millis,
    links: BTreeMap<String, Link>,
    generation: u64,
    wake: Option<Wake>,
    spent: VecDeque<String>,
}

impl Change {
    pub fn event(&self) -> NewEvent {
        NewEvent::new(CHANGE, serde_json::to_value(self).unwrap_or_default()).settled()
    }
}

/// A linked stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Link {
    pub explicit: bool,
    pub glob: bool,
    /// The index acknowledged (`None`: nothing, the protocol's `-1`).
    pub acked: Option<u64>,
}

/// The wake in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Wake {
    pub id: String,
    pub snapshot: Vec<(String, u64)>,
    pub holder: Option<String>,
    pub token: Option<Token>,
    pub lease_until: Option<Millis>,
}

/// A subscription, folded through `through`.
#[derive(Debug, Clone)]
pub(crate) struct Sub {
    pub id: String,
    pub spec: Spec,
    pub base: String,
    pub created_at: Millis,
    pub links: BTreeMap<String, Link>,
    pub generation: u64,
    pub wake: Option<Wake>,
    /// Tokens of ended wakes, newest last.
    spent: VecDeque<String>,
    /// The index folded through: the frontier of the next decision.
    pub through: u64,
    /// The index of the event the fold starts from (its creation, or its
    /// last compaction).
    pub first: u64,
    /// Which incarnation of the session (its first event's time).
    pub incarnation: Millis,
}

/// Why a token does not let a request act on the wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Invalid,
    Expired,
    Fenced,
}

impl Sub {
    /// The state of a session whose first retained event is `first`: its
    /// creation, or its last compaction. `incarnation` is the session's
    /// first event's time (a trim keeps it).
    pub fn from_first(id: &str, first: &Event, incarnation: Millis) -> Option<Self> {
        let mut sub = Self {
            id: id.to_owned(),
            spec: Spec {
                kind: Kind::Webhook,
                pattern: None,
                streams: Vec::new(),
                webhook: None,
                wake_stream: None,
                lease_ttl_ms: 0,
                description: None,
            },
            base: String::new(),
            created_at: 0,
            links: BTreeMap::new(),
            generation: 0,
            wake: None,
            spent: VecDeque::new(),
            through: first.index,
            first: first.index,
            incarnation,
        };
        match serde_json::from_value(first.payload.clone()).ok()? {
            Change::Created {
                spec,
                base,
                at,
                links,
            } => {
                sub.spec = spec;
                sub.base = base;
                sub.created_at = at;
                for (path, glob, acked) in links {
                    sub.link(path, glob, acked);
                }
            }
            change @ Change::Compacted { .. } => sub.fold_change(change),
            _ => return None,
        }
        Some(sub)
    }

    /// The change that holds the whole state.
    pub fn compacted(&self) -> Change {
        Change::Compacted {
            state: Box::new(Whole {
                spec: self.spec.clone(),
                base: self.base.clone(),
                at: self.created_at,
                links: self.links.clone(),
                generation: self.generation,
                wake: self.wake.clone(),
                spent: self.spent.clone(),
            }),
        }
    }

    /// Folds one event.
    pub fn fold(&mut self, event: &Event) {
        self.through = self.through.max(event.index);
        if event.event_type != CHANGE {
            return;
        }
        let Ok(change) = serde_json::from_value::<Change>(event.payload.clone()) else {
            return;
        };
        if matches!(change, Change::Compacted { .. }) {
            self.first = event.index;
        }
        self.fold_change(change);
    }

    /// Folds one change.
    pub fn fold_change(&mut self, change: Change) {
        match change {
            Change::Created { .. } => {}
            Change::Compacted { state } => {
                let Whole {
                    spec,
                    base,
                    at,
                    links,
                    generation,
                    wake,
                    spent,
                } = *state;
                self.spec = spec;
                self.base = base;
                self.created_at = at;
                self.links = links;
                self.generation = generation;
                self.wake = wake;
                self.spent = spent;
            }
            Change::Linked { path, glob, acked } => self.link(path, glob, acked),
            Change::Unlinked { path } => {
                if let Some(link) = self.links.get_mut(&path) {
                    link.explicit = false;
                    if !link.glob {
                        self.links.remove(&path);
                    }
                }
            }
            Change::Dropped { path } => {
                self.links.remove(&path);
            }
            Change::Woke {
                generation,
                wake_id,
                snapshot,
                token,
                lease_until,
            } => {
                self.retire();
                self.generation = generation;
                self.wake = Some(Wake {
                    id: wake_id,
                    snapshot,
                    holder: None,
                    token,
                    lease_until,
                });
            }
            Change::Claimed {
                holder,
                token,
                lease_until,
            } => {
                if let Some(old) = self.wake.as_mut().and_then(|w| w.token.take()) {
                    self.spend(old.hash);
                }
                if let Some(wake) = &mut self.wake {
                    wake.holder = Some(holder);
                    wake.token = Some(token);
                    wake.lease_until = Some(lease_until);
                }
            }
            Change::Acked { acks, lease_until } => {
                for (path, index) in acks {
                    if let Some(link) = self.links.get_mut(&path) {
                        link.acked = Some(index);
                    }
                }
                if let Some(wake) = &mut self.wake {
                    wake.lease_until = Some(lease_until);
                }
            }
            Change::Ended { snapshot_acked } => {
                if snapshot_acked && let Some(wake) = &self.wake {
                    for (path, tail) in &wake.snapshot {
                        if let Some(link) = self.links.get_mut(path) {
                            link.acked = Some(link.acked.unwrap_or(0).max(*tail));
                        }
                    }
                }
                self.retire();
            }
        }
    }

    /// Links `path` by the pattern (`glob`) or explicitly; a new link
    /// starts at `acked`, an existing one keeps what it acknowledged.
    fn link(&mut self, path: String, glob: bool, acked: Option<u64>) {
        let link = self.links.entry(path).or_insert(Link {
            explicit: false,
            glob: false,
            acked,
        });
        if glob {
            link.glob = true;
        } else {
            link.explicit = true;
        }
    }

    /// Ends the wake in progress, remembering its token.
    fn retire(&mut self) {
        if let Some(token) = self.wake.take().and_then(|w| w.token) {
            self.spend(token.hash);
        }
    }

    fn spend(&mut self, hash: String) {
        self.spent.push_back(hash);
        while self.spent.len() > SPENT {
            self.spent.pop_front();
        }
    }

    /// The wake in progress at `now`: one whose lease ran out is over.
    pub fn live_wake(&self, now: Millis) -> Option<&Wake> {
        self.wake
            .as_ref()
            .filter(|w| w.lease_until.is_none_or(|until| until > now))
    }

    /// Whether `path` has work past what was acknowledged, given its tail.
    pub fn pending(&self, path: &str, tail: u64) -> bool {
        self.links
            .get(path)
            .is_some_and(|link| tail > link.acked.unwrap_or(0))
    }

    /// Whether the token (by its hash) lets a request act on the wake
    /// `wake_id` of `generation` at `now`.
    pub fn check_token(
        &self,
        hash: &str,
        wake_id: Option<&str>,
        generation: Option<u64>,
        now: Millis,
    ) -> Result<(), Refusal> {
        let current = self
            .wake
            .as_ref()
            .and_then(|w| w.token.as_ref().map(|t| (w, t)));
        if let Some((wake, token)) = current
            && token.hash == hash
        {
            if token.expires <= now {
                return Err(Refusal::Expired);
            }
            let live = wake.lease_until.is_none_or(|until| until > now);
            let same = wake_id == Some(wake.id.as_str()) && generation == Some(self.generation);
            return if live && same {
                Ok(())
            } else {
                Err(Refusal::Fenced)
            };
        }
        if self.spent.iter().any(|h| h == hash) {
            Err(Refusal::Fenced)
        } else {
            Err(Refusal::Invalid)
        }
    }

    /// Whether the pattern links `path`.
    pub fn matches(&self, path: &str) -> bool {
        self.spec
            .pattern
            .as_deref()
            .is_some_and(|pattern| super::glob::glob_match(pattern, path))
    }
}

/// A stream's tail and whether it has work, as the protocol lists it.
pub(crate) fn stream_info(sub: &Sub, tails: &HashMap<String, u64>) -> Vec<serde_json::Value> {
    sub.links
        .iter()
        .map(|(path, link)| {
            let tail = tails.get(path).copied().unwrap_or(0);
            serde_json::json!({
                "path": path,
                "link_type": if link.explicit { "explicit" } else { "glob" },
                "acked_offset": acked_offset(link.acked),
                "tail_offset": offset(tail),
                "has_pending": sub.pending(path, tail),
            })
        })
        .collect()
}

/// An acknowledged index as an offset (`-1`: nothing).
pub(crate) fn acked_offset(acked: Option<u64>) -> String {
    acked.map_or_else(|| "-1".to_owned(), offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub() -> Sub {
        Sub {
            id: "s".into(),
            spec: Spec {
                kind: Kind::PullWake,
                pattern: None,
                streams: vec!["a".into()],
                webhook: None,
                wake_stream: Some("w".into()),
                lease_ttl_ms: 1_000,
                description: None,
            },
            base: "http://x".into(),
            created_at: 0,
            links: BTreeMap::from([(
                "a".to_owned(),
                Link {
                    explicit: true,
                    glob: false,
                    acked: None,
                },
            )]),
            generation: 0,
            wake: None,
            spent: VecDeque::new(),
            through: 1,
            first: 1,
            incarnation: 0,
        }
    }

    fn token(hash: &str) -> Token {
        Token {
            hash: hash.into(),
            expires: 10_000,
        }
    }

    /// [`sub`] woken: wake `w{generation}`, of stream `a` up to `tail`.
    fn woken(generation: u64, tail: u64, token: Option<Token>, lease_until: Option<Millis>) -> Sub {
        let mut s = sub();
        s.fold_change(Change::Woke {
            generation,
            wake_id: format!("w{generation}"),
            snapshot: vec![("a".into(), tail)],
            token,
            lease_until,
        });
        s
    }

    #[test]
    fn tokens_act_on_their_own_wake_only() {
        let mut s = woken(1, 3, None, None);
        s.fold_change(Change::Claimed {
            holder: "one".into(),
            token: token("t1"),
            lease_until: 500,
        });
        assert_eq!(s.check_token("t1", Some("w1"), Some(1), 100), Ok(()));
        assert_eq!(
            s.check_token("t1", Some("w0"), Some(1), 100),
            Err(Refusal::Fenced)
        );
        assert_eq!(
            s.check_token("t1", Some("w1"), Some(1), 600),
            Err(Refusal::Fenced),
            "the lease ran out"
        );
        assert_eq!(
            s.check_token("t1", Some("w1"), Some(1), 20_000),
            Err(Refusal::Expired)
        );
        assert_eq!(
            s.check_token("nope", Some("w1"), Some(1), 100),
            Err(Refusal::Invalid)
        );
        s.fold_change(Change::Ended {
            snapshot_acked: true,
        });
        assert_eq!(s.links["a"].acked, Some(3));
        assert_eq!(
            s.check_token("t1", Some("w1"), Some(1), 100),
            Err(Refusal::Fenced),
            "a token of an ended wake is fenced"
        );
        assert!(s.live_wake(100).is_none());
        assert!(!s.pending("a", 3));
        assert!(s.pending("a", 4));
    }

    #[test]
    fn a_compaction_holds_the_whole_state() {
        let s = woken(7, 9, Some(token("t7")), Some(900));
        let event = |index, change: Change| Event {
            id: format!("e{index}"),
            event_type: CHANGE.into(),
            payload: serde_json::to_value(change).unwrap(),
            index,
            session_id: "__ds/subscriptions/s".into(),
            created_at: 5,
            cause: None,
            lane: None,
        };
        let restored = Sub::from_first("s", &event(40, s.compacted()), 0).unwrap();
        assert_eq!((restored.first, restored.through), (40, 40));
        assert_eq!(restored.generation, 7);
        assert_eq!(restored.wake, s.wake);
        assert_eq!(restored.links, s.links);
        assert_eq!(restored.spec, s.spec);
        assert_eq!(
            restored.check_token("t7", Some("w7"), Some(7), 100),
            Ok(()),
            "the wake's token still works"
        );
        // A reader folding through the compaction gets the same state.
        let mut folded = sub();
        folded.fold(&event(40, s.compacted()));
        assert_eq!((folded.first, folded.generation), (40, 7));
        assert_eq!(folded.wake, s.wake);
    }
}
