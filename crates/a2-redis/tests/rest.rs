//! The conformance suite over REST (the Upstash protocol), twice:
//!
//! - `rest::<case>`: through the test gateway (`testing::gateway`), with
//!   subscriptions (live feeds over server-sent events) and base64 replies,
//!   opened by URL scheme with `RedisStore::connect("http://:token@…")`;
//! - `rest_polling::<case>`: through the third-party
//!   `@humanwhocodes/upstash-redis-server` (no subscriptions, no base64),
//!   which the store detects, falling back to polling. Without `node` this
//!   fails when `CI` is set; elsewhere it says so and uses the gateway with
//!   subscriptions and base64 off instead.
//!
//! Both sit in front of this test binary's `redis-server`; each case works
//! under its own key prefix, its peer a second store on the same endpoint.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use a2_conformance::{Capabilities, Stores};
use a2_core::StoreOptions;
use a2_redis::rest::{self as rest_api, LiveMode, RestOptions};
use a2_redis::testing::{self, gateway, node};
use a2_redis::{RedisOptions, RedisStore};

/// The polling interval of the `rest_polling` stores: short, so feed cases
/// wait little.
const POLL: Duration = Duration::from_millis(25);

fn options(label: &str, store: StoreOptions) -> RedisOptions {
    RedisOptions::default()
        .prefix(testing::unique_prefix(label))
        .store(store)
}

async fn setup_rest(store: StoreOptions) -> Stores {
    let url = gateway::shared().url();
    let options = options("rest", store);
    let first = RedisStore::connect(&url, options.clone())
        .await
        .expect("connect to the gateway");
    let peer = RedisStore::connect(&url, options)
        .await
        .expect("connect to the gateway");
    let first = Arc::new(first);
    let keys = first.clone();
    Stores::new(first, Arc::new(peer))
        .with_caps(
            Capabilities::default()
                .with_independent_peer(true)
                .with_pending_wakeups(true)
                .with_cancellations(true),
        )
        .with_damage(move |session, index| damage(&keys, session, index))
}

/// E1's damage, on the server behind the REST endpoint.
fn damage(
    store: &RedisStore,
    session: String,
    index: u64,
) -> impl std::future::Future<Output = ()> + use<> {
    let log = store.session_keys(&session).log;
    async move { testing::delete_log_entry(&testing::shared().url(), &log, index).await }
}

/// The emulator in front of the shared server, or `None` without node
/// (outside CI).
static EMULATOR: LazyLock<Option<node::EmulatorServer>> = LazyLock::new(|| {
    node::node_available("rest_polling (the @humanwhocodes/upstash-redis-server emulator)")
        .then(|| node::EmulatorServer::start(&testing::shared().url()))
});

fn polling_url() -> String {
    match &*EMULATOR {
        Some(emulator) => emulator.url(),
        None => gateway::shared_without_subscribe().url(),
    }
}

async fn setup_polling(store: StoreOptions) -> Stores {
    let url = polling_url();
    let options = options("rest-polling", store);
    // `Auto`: the store must find out by itself that it has to poll.
    let rest = RestOptions::default().poll_interval(POLL);
    let first = RedisStore::connect_rest(&url, options.clone(), rest.clone())
        .await
        .expect("connect to the emulator");
    let peer = RedisStore::connect_rest(&url, options, rest)
        .await
        .expect("connect to the emulator");
    let first = Arc::new(first);
    let keys = first.clone();
    Stores::new(first, Arc::new(peer))
        .with_caps(
            Capabilities::default()
                .with_independent_peer(true)
                .with_presence_patches_merge(true),
        )
        .with_damage(move |session, index| damage(&keys, session, index))
}

// The model-based property test takes 64 cases over REST rather than 256:
// each of its operations is an HTTP request (to the gateway, or to a Node
// emulator that every feed polls), and 256 cases took 3.5 and over 4
// minutes, the two longest tests of the suite. The scripts behind REST are
// Redis's, whose configurations run all 256.
mod rest {
    a2_conformance::conformance!(super::setup_rest, property_cases = 64);
}

mod rest_polling {
    a2_conformance::conformance!(super::setup_polling, property_cases = 64);
}

/// The gateway offers subscriptions and base64; the emulator neither, so
/// stores on it poll.
#[tokio::test]
async fn rest_capabilities_are_detected() {
    let options = RedisOptions::default();
    let found = rest_api::capabilities(&gateway::shared().url(), &options, &RestOptions::default())
        .await
        .expect("the gateway answers");
    assert_eq!(
        found,
        rest_api::Capabilities {
            subscribe: true,
            base64: true
        }
    );
    let found = rest_api::capabilities(&polling_url(), &options, &RestOptions::default())
        .await
        .expect("the emulator answers");
    assert_eq!(
        found,
        rest_api::Capabilities {
            subscribe: false,
            base64: false
        }
    );
    let forced = RedisStore::connect_rest(
        &polling_url(),
        RedisOptions::default().prefix(testing::unique_prefix("forced")),
        RestOptions::default().live(LiveMode::Subscribe),
    )
    .await
    .expect_err("no subscriptions to force");
    assert_eq!(forced.code(), a2_core::ErrorCode::StoreUnavailable);
    assert!(forced.to_string().contains("subscribe"), "{forced}");
}

/// The capability check: an endpoint that does not answer `PING` with
/// `PONG` is `StoreUnavailable` with a message that says so; a wrong token
/// too.
#[tokio::test]
async fn rest_capability_check_rejects_what_is_not_redis() {
    let gateway = gateway::shared();
    let options = RedisOptions::default()
        .prefix(testing::unique_prefix("check"))
        .connect_timeout(Duration::from_millis(500))
        .command_timeout(Duration::from_millis(500));
    let wrong = format!("http://:wrong@127.0.0.1:{}", gateway.port());
    let error = RedisStore::connect(&wrong, options.clone())
        .await
        .expect_err("a wrong token");
    assert_eq!(error.code(), a2_core::ErrorCode::StoreUnavailable);
    assert!(error.to_string().contains("PING"), "{error}");

    // Something that speaks HTTP but not this protocol.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = other.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in other.incoming().take(4) {
            let Ok(mut stream) = stream else { continue };
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let body = r#"{"result":"hello"}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let error = RedisStore::connect(&format!("http://:t@127.0.0.1:{port}"), options.clone())
        .await
        .expect_err("not Redis");
    assert_eq!(error.code(), a2_core::ErrorCode::StoreUnavailable);
    assert!(error.to_string().contains("PONG"), "{error}");

    let error = RedisStore::connect(&format!("http://127.0.0.1:{}", gateway.port()), options)
        .await
        .expect_err("no token");
    assert_eq!(error.code(), a2_core::ErrorCode::InvalidArgument);
}

/// Scripts reload after `NOSCRIPT` on either server, also where the
/// emulator wraps Redis's error text ("Failed to execute Redis command:
/// NOSCRIPT …"): after `SCRIPT FLUSH`, the next write still succeeds. On a
/// server of its own, so the flush disturbs no other test.
#[tokio::test]
async fn rest_scripts_reload_after_script_flush() {
    let server = testing::RedisServer::start();
    let gateway = gateway::Gateway::start(&server.url(), gateway::GatewayOptions::default());
    let emulator = EMULATOR
        .is_some()
        .then(|| node::EmulatorServer::start(&server.url()));
    let mut urls = vec![gateway.url()];
    urls.extend(emulator.as_ref().map(node::EmulatorServer::url));
    let mut admin = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for url in urls {
        let store = RedisStore::connect(
            &url,
            RedisOptions::default().prefix(testing::unique_prefix("flush")),
        )
        .await
        .expect("connect");
        let event = || vec![a2_core::NewEvent::new("e", serde_json::json!({}))];
        a2_core::Store::append(&store, "s", event())
            .await
            .expect("append");
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin)
            .await
            .unwrap();
        let out = a2_core::Store::append(&store, "s", event())
            .await
            .unwrap_or_else(|e| panic!("append after SCRIPT FLUSH via {url}: {e}"));
        assert_eq!(out.events[0].event.index, 2);
    }
}

/// C2 over REST: a claim is one HTTP request. The claim script brings the
/// claimed log entries back with their records, where over RESP the
/// client reads them in a second call.
#[tokio::test]
async fn rest_claims_cost_one_request() {
    use a2_core::{ClaimOutcome, ClaimRequest, Lease, NewEvent, Store};
    let gateway =
        gateway::Gateway::start(&testing::shared().url(), gateway::GatewayOptions::default());
    let store = RedisStore::connect(
        &gateway.url(),
        RedisOptions::default().prefix(testing::unique_prefix("claim-requests")),
    )
    .await
    .expect("connect");
    let events = (0..5)
        .map(|n| NewEvent::new("job", serde_json::json!({ "n": n })))
        .collect();
    store.append("s", events).await.expect("append");
    let total = |r: gateway::Requests| r.commands + r.pipelines + r.transactions;
    let before = total(gateway.requests());
    let claimed = store
        .claim_available(ClaimRequest {
            session: "s".into(),
            holder: "w".into(),
            lease: Lease::Ttl(60_000),
            exclude_indexes: vec![],
            limit: 10,
        })
        .await
        .expect("claim");
    assert_eq!(total(gateway.requests()) - before, 1, "one request");
    let ClaimOutcome::Claimed { events: rows, .. } = claimed else {
        panic!("{claimed:?}");
    };
    let payloads: Vec<_> = rows.iter().map(|r| r.event.payload["n"].clone()).collect();
    assert_eq!(payloads, [0, 1, 2, 3, 4].map(serde_json::Value::from));
    assert!(
        rows.iter()
            .all(|r| r.attempt_count == 1 && r.event.session_id == "s")
    );
}
