//! `a2 serve`: the HTTP server (crates/a2-server) on a store, until
//! SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use a2_server::{Config, Tokens};

use crate::out::tell;
use crate::store::StoreUrl;

pub struct ServeArgs {
    pub store: String,
    pub key_prefix: String,
    pub listen: String,
    pub tokens: Option<PathBuf>,
    pub cors_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub max_batch: usize,
    pub max_payload_bytes: usize,
    pub session_ttl_ms: Option<u64>,
    pub long_poll_ms: u64,
    pub follow_refresh_ms: u64,
}

/// The token list of `--tokens FILE`, else of `A2_TOKENS`, else none.
fn tokens(file: Option<&PathBuf>) -> Result<Option<Tokens>, String> {
    let (text, origin) = match file {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?,
            format!("the token file {}", path.display()),
        ),
        None => match std::env::var("A2_TOKENS") {
            Ok(text) => (text, "A2_TOKENS".to_owned()),
            Err(_) => return Ok(None),
        },
    };
    Tokens::parse(&text)
        .map(Some)
        .map_err(|e| format!("{origin}: {e}"))
}

pub async fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let url = StoreUrl::parse(&args.store)?;
    let addr: SocketAddr = tokio::net::lookup_host(&args.listen)
        .await
        .map_err(|e| {
            format!(
                "cannot resolve --listen {}: {e}; give HOST:PORT, such as 127.0.0.1:7373",
                args.listen
            )
        })?
        .next()
        .ok_or_else(|| format!("--listen {} names no address", args.listen))?;
    let config = Config::default()
        .with_tokens(tokens(args.tokens.as_ref())?)
        .with_cors_origins(args.cors_origins)
        .with_max_body_bytes(args.max_body_bytes)
        .with_max_batch_len(args.max_batch)
        .with_long_poll(std::time::Duration::from_millis(args.long_poll_ms));
    // Refuse before touching the store: an open port without tokens is a
    // mistake to report, not to half-start.
    config.check_listen(addr)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let limits = a2::Limits::default().with_max_payload_bytes(args.max_payload_bytes);
    let mut options = a2::StoreOptions::default().with_limits(limits);
    if let Some(ttl) = args.session_ttl_ms {
        if ttl == 0 {
            return Err("--session-ttl-ms must be at least 1".into());
        }
        // EX2: every session created without an expiry of its own.
        options = options.with_default_expiry(a2::Expiry::ttl(ttl));
    }
    if args.follow_refresh_ms < 10 {
        return Err("--follow-refresh-ms must be at least 10".into());
    }
    let tuning = crate::store::Tuning {
        follow_refresh: std::time::Duration::from_millis(args.follow_refresh_ms),
    };
    let store = url.open_tuned(&args.key_prefix, options, tuning).await?;
    let local = listener.local_addr()?;
    let auth = if config.tokens.is_some() {
        "bearer tokens"
    } else {
        "no tokens (loopback only)"
    };
    tell!(
        "a2 serve: listening on http://{local} (store {}, {auth})",
        args.store
    );
    let result = a2_server::serve(listener, store.clone(), config, async {
        if let Err(e) = crate::worker::shutdown_signal().await {
            tell!("a2 serve: cannot wait for signals: {e}");
        }
    })
    .await;
    store.close().await;
    tell!("a2 serve: stopped");
    Ok(result?)
}
