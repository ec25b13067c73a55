//! Bearer tokens with scopes.
//!
//! A token list is text, one token a line: `TOKEN SCOPE[,SCOPE…]`, with
//! blank lines and `#` comments ignored (the `--tokens FILE` format; the
//! `A2_TOKENS` variable takes the same text, where `;` also separates
//! entries). Scopes: `read` (sessions, events, state, presence, live feeds,
//! metrics), `append` (append events, set presence), `work` (the remote
//! worker API) and `admin` (everything, including clearing a session).
//!
//! A request names its token in `Authorization: Bearer TOKEN`, or, for the
//! browser's `EventSource` which cannot set headers, in the `access_token`
//! query parameter. The comparison takes the same time whatever the token
//! presented and wherever it differs: every configured token is compared,
//! each in constant time ([`subtle`]).

use std::fmt;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::state::AppState;

/// Shortest accepted token: anything shorter is guessable.
pub const MIN_TOKEN_BYTES: usize = 16;

/// What a token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Read sessions, events, state, presence, live feeds and metrics.
    Read,
    /// Append events and set presence.
    Append,
    /// Claim, renew, complete, fail and release (remote workers).
    Work,
    /// Everything, including clearing a session and reviving dead letters.
    Admin,
}

impl Scope {
    /// The scope's name in a token list.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Append => "append",
            Scope::Work => "work",
            Scope::Admin => "admin",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "read" => Scope::Read,
            "append" => Scope::Append,
            "work" => Scope::Work,
            "admin" => Scope::Admin,
            _ => return None,
        })
    }

    fn bit(self) -> u8 {
        match self {
            Scope::Read => 1,
            Scope::Append => 2,
            Scope::Work => 4,
            Scope::Admin => 8,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A parsed token list.
#[derive(Clone)]
pub struct Tokens {
    entries: Arc<Vec<(Vec<u8>, u8)>>,
}

impl fmt::Debug for Tokens {
    // Never print a secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tokens({} entries)", self.entries.len())
    }
}

impl Tokens {
    /// Parses a token list (see the module docs). Fails on an unknown scope,
    /// a token without scopes, a token shorter than [`MIN_TOKEN_BYTES`], a
    /// repeated token, or a list without any token.
    ///
    /// ```
    /// use a2_server::auth::{Scope, Tokens};
    /// let tokens = Tokens::parse("# workers\nw0rker-0123456789abcdef work,read\n").unwrap();
    /// assert_eq!(tokens.scopes_of("w0rker-0123456789abcdef"), Some(vec![Scope::Read, Scope::Work]));
    /// assert!(Tokens::parse("short read").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries: Vec<(Vec<u8>, u8)> = Vec::new();
        for (n, line) in text.split(['\n', ';']).enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(token), Some(scopes), None) = (words.next(), words.next(), words.next())
            else {
                return Err(format!(
                    "token entry {} is not `TOKEN SCOPE[,SCOPE…]`",
                    n + 1
                ));
            };
            if token.len() < MIN_TOKEN_BYTES {
                return Err(format!(
                    "token entry {} is shorter than {MIN_TOKEN_BYTES} bytes",
                    n + 1
                ));
            }
            let mut bits = 0;
            for name in scopes.split(',').filter(|s| !s.is_empty()) {
                let scope = Scope::parse(name).ok_or_else(|| {
                    format!(
                        "token entry {}: unknown scope {name:?} (read, append, work, admin)",
                        n + 1
                    )
                })?;
                bits |= scope.bit();
            }
            if bits == 0 {
                return Err(format!("token entry {} has no scope", n + 1));
            }
            if entries.iter().any(|(t, _)| t == token.as_bytes()) {
                return Err(format!("token entry {} repeats a token", n + 1));
            }
            entries.push((token.as_bytes().to_vec(), bits));
        }
        if entries.is_empty() {
            return Err("the token list holds no token".into());
        }
        Ok(Self {
            entries: Arc::new(entries),
        })
    }

    /// The scopes of `token`, or `None` for an unknown token.
    pub fn scopes_of(&self, token: &str) -> Option<Vec<Scope>> {
        let bits = self.lookup(token.as_bytes())?;
        Some(
            [Scope::Read, Scope::Append, Scope::Work, Scope::Admin]
                .into_iter()
                .filter(|s| bits & s.bit() != 0)
                .collect(),
        )
    }

    /// The scope bits of `presented`, comparing it with every entry in
    /// constant time (no early exit, whichever entry matches).
    fn lookup(&self, presented: &[u8]) -> Option<u8> {
        let mut found = 0u8;
        for (token, bits) in self.entries.iter() {
            let equal = constant_time_eq(presented, token);
            // Branch-free select: `bits` when equal, else nothing.
            found |= bits & 0u8.wrapping_sub(equal as u8);
        }
        (found != 0).then_some(found)
    }

    /// Whether `presented` is a token with `scope` (admin holds every scope).
    fn allows(&self, presented: &[u8], scope: Scope) -> Result<(), ApiError> {
        match self.lookup(presented) {
            None => Err(ApiError::unauthorized("unknown token")),
            Some(bits) if bits & (scope.bit() | Scope::Admin.bit()) != 0 => Ok(()),
            Some(_) => Err(ApiError::forbidden(format!(
                "this token lacks the {scope} scope"
            ))),
        }
    }
}

/// Equality of two byte strings in time that depends only on the longer
/// length: both are compared over that length, padded with zeros, and the
/// lengths are compared too (a token's length is not secret, its bytes are).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut pa = vec![0u8; n];
    let mut pb = vec![0u8; n];
    pa[..a.len()].copy_from_slice(a);
    pb[..b.len()].copy_from_slice(b);
    let same_len = (a.len() as u64).ct_eq(&(b.len() as u64));
    (pa.ct_eq(&pb) & same_len).into()
}

/// The token a request presents: `Authorization: Bearer …`, else the
/// `access_token` query parameter.
fn presented(parts: &Parts) -> Option<String> {
    if let Some(value) = parts.headers.get(axum::http::header::AUTHORIZATION) {
        let value = value.to_str().ok()?;
        let (scheme, token) = value.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim().to_owned());
    }
    let query = parts.uri.query()?;
    form_pairs(query)
        .into_iter()
        .find(|(k, _)| k == "access_token")
        .map(|(_, v)| v)
}

fn form_pairs(query: &str) -> Vec<(String, String)> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query).unwrap_or_default()
}

/// Checks the request's token for `scope`. Without a token list every
/// request passes: the server then only listens on loopback (see
/// [`crate::Config::check_listen`]).
pub fn authorize(state: &AppState, parts: &Parts, scope: Scope) -> Result<(), ApiError> {
    let Some(tokens) = &state.config.tokens else {
        return Ok(());
    };
    let Some(token) = presented(parts) else {
        return Err(ApiError::unauthorized(
            "this server needs a bearer token (Authorization: Bearer TOKEN)",
        ));
    };
    tokens.allows(token.as_bytes(), scope)
}

macro_rules! scope_guard {
    ($(#[$doc:meta])* $name:ident, $scope:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(
            /// The router's state, for the handler the request reached.
            pub AppState,
        );

        impl FromRequestParts<AppState> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(
                parts: &mut Parts,
                state: &AppState,
            ) -> Result<Self, Self::Rejection> {
                authorize(state, parts, $scope).map(|()| $name(state.clone()))
            }
        }
    };
}

scope_guard!(
    /// An extractor that passes only requests whose token has `read`, and
    /// hands the handler the router's state.
    CanRead,
    Scope::Read
);
scope_guard!(
    /// An extractor that passes only requests whose token has `append`, and
    /// hands the handler the router's state.
    CanAppend,
    Scope::Append
);
scope_guard!(
    /// An extractor that passes only requests whose token has `work`, and
    /// hands the handler the router's state.
    CanWork,
    Scope::Work
);
scope_guard!(
    /// An extractor that passes only requests whose token has `admin`, and
    /// hands the handler the router's state.
    CanAdmin,
    Scope::Admin
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_scopes_combine() {
        let tokens = Tokens::parse(
            "# comment\n\nreader-0123456789abcdef read\nadmin-0123456789abcdef admin;worker-0123456789abcdef work,append",
        )
        .unwrap();
        assert_eq!(
            tokens.scopes_of("reader-0123456789abcdef"),
            Some(vec![Scope::Read])
        );
        assert_eq!(
            tokens.scopes_of("worker-0123456789abcdef"),
            Some(vec![Scope::Append, Scope::Work])
        );
        assert_eq!(tokens.scopes_of("reader-0123456789abcde"), None);
        assert_eq!(tokens.scopes_of("reader-0123456789abcdef0"), None);
        assert_eq!(tokens.scopes_of(""), None);
        assert!(
            tokens
                .allows(b"admin-0123456789abcdef", Scope::Work)
                .is_ok()
        );
        let refused = tokens
            .allows(b"reader-0123456789abcdef", Scope::Append)
            .unwrap_err();
        assert_eq!(refused.code(), "Forbidden");
        let unknown = tokens.allows(b"nobody", Scope::Read).unwrap_err();
        assert_eq!(unknown.code(), "Unauthorized");
    }

    #[test]
    fn bad_lists_are_refused_with_the_reason() {
        for (text, reason) in [
            ("", "no token"),
            ("abcdefghijklmnopq", "is not `TOKEN"),
            ("abcdefghijklmnopq read extra", "is not `TOKEN"),
            ("short read", "shorter than 16"),
            ("abcdefghijklmnopq write", "unknown scope \"write\""),
            ("abcdefghijklmnopq ,", "no scope"),
            ("abcdefghijklmnopq read\nabcdefghijklmnopq work", "repeats"),
        ] {
            let error = Tokens::parse(text).unwrap_err();
            assert!(error.contains(reason), "{text:?}: {error}");
        }
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abc\0"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }
}
