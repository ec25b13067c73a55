//! Webhook signatures and callback tokens.
//!
//! Each server process signs with its own Ed25519 key, made when it
//! starts; the private key never leaves the process. Its public key is
//! published, the first time the process needs it, as an event of the
//! session `__ds/keys`, and the JWKS at `/v1/stream/__ds/jwks.json` lists
//! the keys published last — so a receiver verifies a notification
//! whichever of several processes sent it.
//!
//! A callback token is 32 random bytes; a subscription keeps only its
//! SHA-256, so reading the store never hands out a token that works.

use a2_core::{NewEvent, ReadEventsOptions};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::OnceCell;

use crate::error::ApiError;
use crate::streams::Engine;

/// The session the public keys are published in.
const KEYS: &str = "__ds/keys";
/// The event type of a published key.
const KEY: &str = "a2.stream.key";
/// How many of the keys published last the JWKS lists.
const LISTED: u64 = 32;

/// This process's signing key.
pub(crate) struct Signer {
    pair: Ed25519KeyPair,
    kid: String,
    jwk: Value,
    published: OnceCell<()>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("kid", &self.kid).finish()
    }
}

impl Default for Signer {
    fn default() -> Self {
        Self::new()
    }
}

impl Signer {
    /// A new key pair.
    ///
    /// # Panics
    /// When the system has no secure random source.
    pub fn new() -> Self {
        let rng = SystemRandom::new();
        #[allow(clippy::expect_used)]
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("a secure random source");
        #[allow(clippy::expect_used)]
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("the key just made");
        let x = B64URL.encode(pair.public_key().as_ref());
        // The JWK thumbprint (RFC 7638): its required members, sorted.
        let thumbprint = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
        let kid = format!("ds_{}", B64URL.encode(sha256(thumbprint.as_bytes())));
        let jwk = json!({
            "kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "use": "sig", "alg": "EdDSA",
        });
        Self {
            pair,
            kid,
            jwk,
            published: OnceCell::new(),
        }
    }

    /// The key's id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// Publishes the public key (once per process).
    pub async fn publish(&self, state: &Arc<Engine>) -> Result<(), ApiError> {
        self.published
            .get_or_try_init(|| async {
                let event = NewEvent::new(KEY, self.jwk.clone())
                    .id(self.kid.clone())
                    .settled();
                state.store.append(KEYS, vec![event]).await?;
                Ok::<(), ApiError>(())
            })
            .await?;
        Ok(())
    }

    /// The `Webhook-Signature` header of `body` sent at `now_s` (seconds):
    /// `t={now_s},kid={kid},ed25519={signature of "{now_s}.{body}"}`.
    pub fn sign(&self, body: &str, now_s: i64) -> String {
        let signature = self.pair.sign(format!("{now_s}.{body}").as_bytes());
        format!(
            "t={now_s},kid={},ed25519={}",
            self.kid,
            B64URL.encode(signature.as_ref())
        )
    }
}

/// The JWKS: the keys published last.
pub(crate) async fn jwks(state: &Arc<Engine>) -> Result<Value, ApiError> {
    state.subscriptions.signer.publish(state).await?;
    let tail = state.summary(KEYS).await?.map_or(0, |s| s.event_count);
    let page = state
        .store
        .read_events(
            KEYS,
            ReadEventsOptions::new(LISTED as usize).after_index(tail.saturating_sub(LISTED)),
        )
        .await?;
    let keys: Vec<Value> = page
        .events
        .into_iter()
        .filter(|row| row.event.event_type == KEY)
        .map(|row| row.event.payload)
        .collect();
    Ok(json!({ "keys": keys }))
}

/// A new callback token and its hash.
pub(crate) fn token() -> (String, String) {
    let token = B64URL.encode(random::<32>());
    let hash = hash(&token);
    (token, hash)
}

/// A token's hash, as a subscription keeps it.
pub(crate) fn hash(token: &str) -> String {
    B64URL.encode(sha256(token.as_bytes()))
}

/// A new wake id.
pub(crate) fn wake_id() -> String {
    let bytes = random::<12>();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("w_{hex}")
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    #[allow(clippy::expect_used)]
    SystemRandom::new()
        .fill(&mut bytes)
        .expect("a secure random source");
    bytes
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{ED25519, UnparsedPublicKey};

    #[test]
    fn a_signature_verifies_with_the_published_key() {
        let signer = Signer::new();
        let header = signer.sign(r#"{"a":1}"#, 1_700_000_000);
        let (head, signature) = header.rsplit_once(",ed25519=").unwrap();
        assert_eq!(head, format!("t=1700000000,kid={}", signer.kid()));
        assert!(signer.kid().starts_with("ds_"));
        let x = B64URL.decode(signer.jwk["x"].as_str().unwrap()).unwrap();
        let key = UnparsedPublicKey::new(&ED25519, x);
        let signature = B64URL.decode(signature).unwrap();
        assert!(key.verify(br#"1700000000.{"a":1}"#, &signature).is_ok());
        assert!(key.verify(br#"1700000001.{"a":1}"#, &signature).is_err());
    }

    #[test]
    fn tokens_are_kept_as_hashes() {
        let (a, ha) = token();
        let (b, hb) = token();
        assert_ne!(a, b);
        assert_eq!(hash(&a), ha);
        assert_ne!(ha, hb);
        assert!(wake_id().starts_with("w_"));
    }
}
