//! TLS with rustls (ring), for each `sslmode` (`url.rs`): no check of the
//! server's certificate for `prefer` and `require` (as libpq), its chain
//! for `verify-ca`, its chain and host name for `verify-full`. The CA
//! roots are `sslrootcert`'s certificates, or the public ones
//! (`webpki-roots`) without it.

use std::path::Path;
use std::sync::Arc;

use a2_core::{Error, Result};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::url::SslMode;

/// The connector tokio-postgres secures connections with for `mode`.
pub(crate) fn connector(mode: SslMode, root_cert: Option<&Path>) -> Result<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid(format!("TLS: {e}")))?;
    let algorithms = provider.signature_verification_algorithms;
    let config = match mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(algorithms)))
            .with_no_client_auth(),
        SslMode::VerifyCa => {
            let chain = WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(root_cert)?),
                provider.clone(),
            )
            .build()
            .map_err(|e| Error::invalid(format!("TLS: {e}")))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(chain)))
                .with_no_client_auth()
        }
        SslMode::VerifyFull => builder
            .with_root_certificates(roots(root_cert)?)
            .with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The CAs to trust: the certificates of the PEM file `path`, or the
/// public roots.
fn roots(path: Option<&Path>) -> Result<RootCertStore> {
    let Some(path) = path else {
        return Ok(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        });
    };
    let unreadable = |e: &dyn std::fmt::Display| {
        Error::invalid(format!(
            "sslrootcert {}: cannot read its certificates: {e}",
            path.display()
        ))
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| unreadable(&e))? {
        let cert = cert.map_err(|e| unreadable(&e))?;
        roots.add(cert).map_err(|e| unreadable(&e))?;
    }
    if roots.is_empty() {
        return Err(unreadable(&"the file holds no certificate"));
    }
    Ok(roots)
}

/// `prefer`, `require`: encrypted, the certificate unchecked (the
/// handshake's signatures still are).
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca`: the chain to a trusted CA, whatever host name the
/// certificate is for.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        // The name is checked after the chain: a name error means the chain
        // was good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
