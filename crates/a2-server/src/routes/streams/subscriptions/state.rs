//! A subscription's state: a fold of the events of its session
//! (`__ds/subscriptions/{id}`), and the decisions taken on it. Every
//! decision is a list of changes appended at the frontier it was taken at
//! (A13), so two processes sharing a store never both wake one generation
//! or both grant one claim.

use std::collections::{BTreeMap, HashMap, VecDeque};

use a2_core::{Event, Millis, NewEvent};
use serde::{Deserialize, Serialize};

use super::super::offset;

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
}

impl Change {
    pub fn event(&self) -> NewEvent {
        NewEvent::new(CHANGE, serde_json::to_value(self).unwrap_or_default()).settled()
    }
}

/// A linked stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub explicit: bool,
    pub glob: bool,
    /// The index acknowledged (`None`: nothing, the protocol's `-1`).
    pub acked: Option<u64>,
}

/// The wake in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The state of a session whose first event is `created`.
    pub fn from_created(id: &str, created: &Event) -> Option<Self> {
        let Ok(Change::Created {
            spec,
            base,
            at,
            links,
        }) = serde_json::from_value(created.payload.clone())
        else {
            return None;
        };
        let links = links
            .into_iter()
            .map(|(path, glob, acked)| {
                let link = Link {
                    explicit: !glob,
                    glob,
                    acked,
                };
                (path, link)
            })
            .collect();
        Some(Self {
            id: id.to_owned(),
            spec,
            base,
            created_at: at,
            links,
            generation: 0,
            wake: None,
            spent: VecDeque::new(),
            through: created.index,
            incarnation: created.created_at,
        })
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
        self.fold_change(change);
    }

    /// Folds one change.
    pub fn fold_change(&mut self, change: Change) {
        match change {
            Change::Created { .. } => {}
            Change::Linked { path, glob, acked } => {
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
            .is_some_and(|pattern| glob_match(pattern, path))
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

/// Glob matching of stream paths: `*` is one segment, `**` any number
/// (none too), anything else a literal segment.
pub(crate) fn glob_match(pattern: &str, path: &str) -> bool {
    fn parts(p: &str) -> Vec<&str> {
        p.split('/').filter(|s| !s.is_empty()).collect()
    }
    fn go(pattern: &[&str], path: &[&str]) -> bool {
        match pattern.split_first() {
            None => path.is_empty(),
            Some((&"**", rest)) => (0..=path.len()).any(|skip| go(rest, &path[skip..])),
            Some((&"*", rest)) => !path.is_empty() && go(rest, &path[1..]),
            Some((literal, rest)) => {
                path.first().is_some_and(|seg| seg == literal) && go(rest, &path[1..])
            }
        }
    }
    go(&parts(pattern), &parts(path))
}

/// The literal part of a pattern before its first wildcard segment: where
/// a listing of the streams it may match starts.
pub(crate) fn literal_prefix(pattern: &str) -> String {
    let mut prefix = String::new();
    for seg in pattern.split('/').filter(|s| !s.is_empty()) {
        if seg == "*" || seg == "**" {
            break;
        }
        prefix.push_str(seg);
        prefix.push('/');
    }
    prefix.pop();
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_segments() {
        assert!(glob_match("events/*", "events/a"));
        assert!(!glob_match("events/*", "events/a/b"));
        assert!(!glob_match("events/*", "events"));
        assert!(glob_match("events/**", "events"));
        assert!(glob_match("events/**", "events/a/b"));
        assert!(glob_match("**/b", "a/x/b"));
        assert!(!glob_match("a/*/c", "a/b/d"));
        assert_eq!(literal_prefix("events/*"), "events");
        assert_eq!(literal_prefix("a/b/**/c"), "a/b");
        assert_eq!(literal_prefix("exact/name"), "exact/name");
    }

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
            incarnation: 0,
        }
    }

    fn token(hash: &str) -> Token {
        Token {
            hash: hash.into(),
            expires: 10_000,
        }
    }

    #[test]
    fn tokens_act_on_their_own_wake_only() {
        let mut s = sub();
        s.fold_change(Change::Woke {
            generation: 1,
            wake_id: "w1".into(),
            snapshot: vec![("a".into(), 3)],
            token: None,
            lease_until: None,
        });
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
}
