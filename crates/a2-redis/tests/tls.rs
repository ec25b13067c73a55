//! `rediss://`: the RESP store over TLS (rustls), against Debian's
//! `redis-server` started with `--tls-port` and certificates this test
//! generates (a CA and a server certificate for 127.0.0.1).
//!
//! The client trusts the test CA through `SSL_CERT_FILE`, which rustls'
//! native certificate loader reads: the same way a deployment adds a
//! private CA. This binary holds this one test, so setting the variable
//! races with nothing.

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use a2_core::{ErrorCode, NewEvent, ReadRange, Store};
use a2_redis::testing::unique_prefix;
use a2_redis::{RedisOptions, RedisStore};
use futures::StreamExt;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use serde_json::json;

struct TlsServer {
    port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes a CA and a server certificate signed by it, and starts
/// `redis-server` with TLS only (no plain port).
fn start_tls_server() -> TlsServer {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "a2 test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "a2 test server");
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();

    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args(["--port", "0", "--tls-port", &port.to_string()])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--tls-cert-file")
        .arg(dir.path().join("server.pem"))
        .arg("--tls-key-file")
        .arg(dir.path().join("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(dir.path().join("ca.pem"))
        .args(["--tls-auth-clients", "no", "--loglevel", "warning"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server is on PATH (the Redis tests need it)");
    let mut server = TlsServer { port, child, dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("redis-server with --tls-port exited with {status} (built without TLS?)");
        }
        assert!(
            Instant::now() < deadline,
            "redis-server did not listen for TLS"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Keep the directory (and certificates) until the server is dropped.
    let _ = &mut server.dir;
    server
}

#[tokio::test]
#[allow(unsafe_code)] // set_var: see the SAFETY notes below
async fn tls_rediss_store_verifies_the_server_and_works() {
    let server = start_tls_server();
    let url = format!("rediss://127.0.0.1:{}/", server.port);
    let options = RedisOptions::default()
        .prefix(unique_prefix("tls"))
        .connect_timeout(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(2));

    // A server whose CA nobody trusts is refused.
    let untrusted = tempfile::NamedTempFile::new().unwrap();
    // SAFETY: this test binary runs this one test; no other thread reads
    // the environment while it changes.
    unsafe { std::env::set_var("SSL_CERT_FILE", untrusted.path()) };
    let refused = RedisStore::connect(&url, options.clone())
        .await
        .expect_err("an unknown CA is refused");
    assert_eq!(refused.code(), ErrorCode::StoreUnavailable, "{refused}");

    // SAFETY: as above.
    unsafe { std::env::set_var("SSL_CERT_FILE", server.dir.path().join("ca.pem")) };
    let store = RedisStore::connect(&url, options)
        .await
        .expect("connect over TLS with the test CA trusted");
    let mut feed = store.stream("s", 0);
    let out = store
        .append("s", vec![NewEvent::new("e", json!({"text": "é\n"}))])
        .await
        .unwrap();
    assert_eq!(out.events[0].event.index, 1);
    let rows = store.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(rows.len(), 1);
    let event = tokio::time::timeout(Duration::from_secs(5), feed.next())
        .await
        .expect("the feed yields")
        .expect("open")
        .expect("an event");
    assert_eq!(event.payload, json!({"text": "é\n"}));
    // Live wake-ups travel over the TLS push connection too.
    store
        .append("s", vec![NewEvent::new("e", json!(2))])
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(5), feed.next())
        .await
        .expect("the feed yields")
        .expect("open")
        .expect("an event");
    assert_eq!(event.index, 2);
}
