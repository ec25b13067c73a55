//! Store URLs: `postgres://user:password@host:port/database?sslmode=…`, as
//! libpq takes them. tokio-postgres parses the URL; a2 takes `sslmode`
//! (libpq's six values, where tokio-postgres knows three) and
//! `sslrootcert` off it first and secures the connection with rustls
//! itself (`tls.rs`).

use std::path::PathBuf;

use a2_core::{Error, Result};
use percent_encoding::percent_decode_str;

/// How a connection is secured: libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it, plain otherwise; the certificate is
    /// not checked (libpq's `allow` and `prefer`, and the default).
    Prefer,
    /// TLS or no connection; the certificate is not checked unless
    /// `sslrootcert` names a CA (then as `VerifyCa`).
    Require,
    /// TLS with a certificate signed by a trusted CA, for any host name.
    VerifyCa,
    /// TLS with a certificate signed by a trusted CA for the host connected
    /// to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(Error::invalid(format!(
                    "sslmode {other:?} is not one of disable, allow, prefer, require, \
                     verify-ca, verify-full"
                )));
            }
        })
    }
}

/// A parsed store URL: what tokio-postgres connects with, and how the
/// connection is secured.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) ssl: SslMode,
    /// The CA certificates (PEM) to trust instead of the public roots.
    pub(crate) root_cert: Option<PathBuf>,
    /// The schema of a2's tables (`a2_schema`), when the URL names one.
    pub(crate) schema: Option<String>,
}

/// Whether `url` names a Postgres database (`postgres://`, `postgresql://`).
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Parses a store URL. A URL that is not a Postgres one, or that
/// tokio-postgres cannot read, is `InvalidArgument` naming it with its
/// password hidden.
pub(crate) fn parse(url: &str) -> Result<Target> {
    if !is_postgres_url(url) {
        return Err(Error::invalid(format!(
            "a Postgres store URL starts with postgres:// or postgresql://, not {}",
            redact(url)
        )));
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept = Vec::new();
    let mut ssl = SslMode::Prefer;
    let mut root_cert = None;
    let mut schema = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => ssl = SslMode::parse(&decode(value)?)?,
            "sslrootcert" => root_cert = Some(PathBuf::from(decode(value)?)),
            "a2_schema" => schema = Some(decode(value)?),
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let mut config: tokio_postgres::Config = rest.parse().map_err(|e| {
        Error::invalid(format!(
            "the Postgres URL {} is not valid: {e}",
            redact(url)
        ))
    })?;
    // libpq: `require` with a CA to trust checks the chain.
    if ssl == SslMode::Require && root_cert.is_some() {
        ssl = SslMode::VerifyCa;
    }
    config.ssl_mode(match ssl {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    });
    if config.get_application_name().is_none() {
        config.application_name("a2");
    }
    Ok(Target {
        config,
        ssl,
        root_cert,
        schema,
    })
}

/// A query parameter's value, percent-decoded.
fn decode(value: &str) -> Result<String> {
    percent_decode_str(value)
        .decode_utf8()
        .map(|v| v.into_owned())
        .map_err(|_| Error::invalid(format!("the URL parameter {value:?} is not UTF-8")))
}

/// `url` with the password of its user info, if any, as `***`: what error
/// messages and logs show.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2_core::ErrorCode;

    #[test]
    fn libpq_ssl_modes_are_taken_off_the_url() {
        let target =
            parse("postgres://u:p@db.example:6432/app?sslmode=verify-full&connect_timeout=3")
                .unwrap();
        assert_eq!(target.ssl, SslMode::VerifyFull);
        assert_eq!(target.config.get_dbname(), Some("app"));
        assert_eq!(target.config.get_ports(), [6432]);
        assert_eq!(
            target.config.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(3))
        );
        let plain = parse("postgresql://localhost/app").unwrap();
        assert_eq!(plain.ssl, SslMode::Prefer, "libpq's default");
        assert_eq!(plain.config.get_application_name(), Some("a2"));
        let ca = parse("postgres://h/d?sslmode=require&sslrootcert=%2Ftmp%2Fca%20x.pem").unwrap();
        assert_eq!(
            ca.ssl,
            SslMode::VerifyCa,
            "require with a CA checks the chain"
        );
        assert_eq!(ca.root_cert, Some(PathBuf::from("/tmp/ca x.pem")));
    }

    #[test]
    fn bad_urls_are_refused_naming_them_without_their_password() {
        for (url, says) in [
            ("redis://h/", "starts with postgres://"),
            (
                "postgres://u:secret@h/d?sslmode=sometimes",
                "sslmode \"sometimes\"",
            ),
            ("postgres://u:secret@h:notaport/d", "is not valid"),
        ] {
            let error = parse(url).unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidArgument, "{url}");
            let message = error.to_string();
            assert!(message.contains(says), "{url}: {message}");
            assert!(!message.contains("secret"), "{url}: {message}");
        }
        assert_eq!(
            redact("postgres://me:pw@h:5432/d?x=1"),
            "postgres://me:***@h:5432/d?x=1"
        );
        assert_eq!(redact("postgres://me@h/d"), "postgres://me@h/d");
    }
}
