//! The producer headers of the protocol (`Producer-Id`,
//! `Producer-Epoch`, `Producer-Seq`, and the answers'
//! `Producer-Expected-Seq`, `Producer-Received-Seq`): what a request says
//! about its producer, for the engine's writers' state
//! ([`crate::streams::producers`]).

use axum::http::{HeaderMap, HeaderName};

use super::text;
use crate::error::ApiError;
use crate::streams::producers::Producer;

pub(crate) const PRODUCER_ID: HeaderName = HeaderName::from_static("producer-id");
pub(crate) const PRODUCER_EPOCH: HeaderName = HeaderName::from_static("producer-epoch");
pub(crate) const PRODUCER_SEQ: HeaderName = HeaderName::from_static("producer-seq");
pub(crate) const EXPECTED_SEQ: HeaderName = HeaderName::from_static("producer-expected-seq");
pub(crate) const RECEIVED_SEQ: HeaderName = HeaderName::from_static("producer-received-seq");

/// A non-negative integer as the protocol writes it (digits only, at most
/// 2^53 − 1 so every client reads it back exactly).
fn number(text: &str, name: &str) -> Result<u64, ApiError> {
    let bad = || {
        ApiError::invalid(format!(
            "{name} must be a non-negative integer, not {text:?}"
        ))
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse::<u64>()
        .ok()
        .filter(|n| *n < (1 << 53))
        .ok_or_else(bad)
}

/// The producer headers of a request: all three, or none.
pub(crate) fn producer_of(headers: &HeaderMap) -> Result<Option<Producer>, ApiError> {
    let id = text(headers, PRODUCER_ID);
    let epoch = text(headers, PRODUCER_EPOCH);
    let seq = text(headers, PRODUCER_SEQ);
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            if id.is_empty() {
                return Err(ApiError::invalid("Producer-Id must not be empty"));
            }
            Ok(Some(Producer {
                id: id.to_owned(),
                epoch: number(epoch, "Producer-Epoch")?,
                seq: number(seq, "Producer-Seq")?,
            }))
        }
        _ => Err(ApiError::invalid(
            "Producer-Id, Producer-Epoch and Producer-Seq go together",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_headers_go_together_and_are_integers() {
        let mut h = HeaderMap::new();
        assert_eq!(producer_of(&h).unwrap(), None);
        h.insert(PRODUCER_ID, "w".parse().unwrap());
        assert!(producer_of(&h).is_err());
        h.insert(PRODUCER_EPOCH, "0".parse().unwrap());
        h.insert(PRODUCER_SEQ, "12".parse().unwrap());
        let twelfth = Producer {
            id: "w".into(),
            epoch: 0,
            seq: 12,
        };
        assert_eq!(producer_of(&h).unwrap(), Some(twelfth));
        for bad in ["-1", "1.5", "", " 1", "9007199254740992", "abc"] {
            h.insert(PRODUCER_SEQ, bad.parse().unwrap());
            assert!(producer_of(&h).is_err(), "{bad:?}");
        }
    }
}
