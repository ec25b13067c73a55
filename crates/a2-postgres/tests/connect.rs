//! Connecting to a real Postgres (Debian's, started by the tests): plain,
//! and over TLS in each `sslmode` against a server whose certificate this
//! test signs with its own CA; what a wrong URL, database or certificate
//! answers.

use std::path::Path;

use a2_core::ErrorCode;
use a2_postgres::testing::{PostgresServer, ServerTls, shared};
use a2_postgres::{Database, PostgresOptions, SslMode};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

async fn connect(url: &str) -> a2_core::Result<Database> {
    Database::connect(url, PostgresOptions::default()).await
}

/// Whether the connection a fresh client of `db` holds is encrypted.
async fn encrypted(db: &Database) -> bool {
    let client = db.client().await.unwrap();
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    row.get(0)
}

#[tokio::test]
async fn a_plain_url_connects_and_reads_the_server() {
    let db = connect(&shared().url()).await.unwrap();
    let version = db.server_version().await.unwrap();
    assert!(
        version.chars().next().is_some_and(|c| c.is_ascii_digit()),
        "{version}"
    );
    assert_eq!(db.ssl_mode(), SslMode::Disable);
    assert!(!encrypted(&db).await);
}

#[tokio::test]
async fn what_a_retry_cannot_mend_is_invalid_and_the_rest_unavailable() {
    let missing = connect(&shared().url_for("no_such_db")).await.unwrap_err();
    assert_eq!(missing.code(), ErrorCode::InvalidArgument, "{missing}");
    assert!(missing.to_string().contains("no_such_db"), "{missing}");

    let url = format!(
        "postgres://nobody:hunter2@127.0.0.1:{}/postgres?sslmode=disable",
        shared().port()
    );
    let stranger = connect(&url).await.unwrap_err();
    assert_eq!(stranger.code(), ErrorCode::InvalidArgument, "{stranger}");
    assert!(stranger.to_string().contains("nobody"), "{stranger}");
    assert!(!stranger.to_string().contains("hunter2"), "{stranger}");

    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable");
    let down = connect(&url).await.unwrap_err();
    assert_eq!(down.code(), ErrorCode::StoreUnavailable, "{down}");
    assert!(down.is_retryable());

    let none = Database::connect(&shared().url(), PostgresOptions::default().pool_size(0))
        .await
        .unwrap_err();
    assert_eq!(none.code(), ErrorCode::InvalidArgument, "{none}");
}

#[tokio::test]
async fn a_full_pool_is_unavailable_naming_its_size() {
    let mut options = PostgresOptions::default().pool_size(1);
    options.acquire_timeout = std::time::Duration::from_millis(200);
    let db = Database::connect(&shared().url(), options).await.unwrap();
    let held = db.client().await.unwrap();
    let waited = db.client().await.unwrap_err();
    assert_eq!(waited.code(), ErrorCode::StoreUnavailable, "{waited}");
    assert!(
        waited.to_string().contains("at most 1 connections"),
        "{waited}"
    );
    drop(held);
    drop(db.client().await.unwrap());
}

/// A CA and a certificate it signs for `localhost` only, in `dir`:
/// `ca.pem`, `server.pem`, `server.key`; and a second CA, `other.pem`.
fn certificates(dir: &Path) {
    let ca = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        (cert, key)
    };
    let (ca_cert, ca_key) = ca("a2 test CA");
    let (other, _) = ca("another CA");
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = params.signed_by(&key, &ca_cert, &ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("other.pem"), other.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
}

#[tokio::test]
async fn each_sslmode_checks_what_libpq_checks() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let server = PostgresServer::start_with_tls(ServerTls {
        cert: dir.path().join("server.pem"),
        key: dir.path().join("server.key"),
    });
    let port = server.port();
    let ca = dir.path().join("ca.pem");
    let other = dir.path().join("other.pem");
    // The certificate names `localhost`; `hostaddr` keeps the connection
    // on IPv4 whatever `localhost` resolves to.
    let url = |host: &str, mode: &str, root: Option<&Path>| {
        let mut url =
            format!("postgres://postgres@{host}:{port}/postgres?hostaddr=127.0.0.1&sslmode={mode}");
        if let Some(root) = root {
            url.push_str(&format!("&sslrootcert={}", root.display()));
        }
        url
    };

    for (mode, root) in [
        ("prefer", None),
        ("require", None),
        ("require", Some(&ca)),
        ("verify-ca", Some(&ca)),
        ("verify-full", Some(&ca)),
    ] {
        let db = connect(&url("localhost", mode, root.map(|p| p.as_path())))
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(encrypted(&db).await, "{mode}");
    }
    // The chain alone, whatever the name: an address the certificate does
    // not name passes verify-ca, not verify-full.
    let by_address = connect(&url("127.0.0.1", "verify-ca", Some(&ca)))
        .await
        .unwrap();
    assert!(encrypted(&by_address).await);
    let wrong_name = connect(&url("127.0.0.1", "verify-full", Some(&ca)))
        .await
        .unwrap_err();
    assert_eq!(
        wrong_name.code(),
        ErrorCode::StoreUnavailable,
        "{wrong_name}"
    );
    for mode in ["verify-ca", "verify-full"] {
        let stranger = connect(&url("localhost", mode, Some(&other)))
            .await
            .unwrap_err();
        assert!(
            stranger.to_string().contains("certificate"),
            "{mode}: {stranger}"
        );
        // Not signed by a public CA either.
        connect(&url("localhost", mode, None)).await.unwrap_err();
    }
    let unreadable = connect(&url(
        "localhost",
        "verify-full",
        Some(&dir.path().join("none.pem")),
    ))
    .await
    .unwrap_err();
    assert_eq!(
        unreadable.code(),
        ErrorCode::InvalidArgument,
        "{unreadable}"
    );
    assert!(
        unreadable.to_string().contains("sslrootcert"),
        "{unreadable}"
    );

    // A server without TLS: `require` refuses it, `prefer` goes plain.
    let plain = shared().port();
    let require = format!("postgres://postgres@127.0.0.1:{plain}/postgres?sslmode=require");
    connect(&require).await.unwrap_err();
    let prefer = format!("postgres://postgres@127.0.0.1:{plain}/postgres?sslmode=prefer");
    assert!(!encrypted(&connect(&prefer).await.unwrap()).await);
}

#[tokio::test]
async fn messages_name_the_cause_once() {
    let error = connect(&shared().url_for("no_such_db")).await.unwrap_err();
    let message = error.to_string();
    assert_eq!(
        message.matches("no_such_db\" does not exist").count(),
        1,
        "{message}"
    );
}
