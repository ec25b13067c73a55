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
    let checked = |chain| Arc::new(Checked { chain, algorithms });
    let config = match mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(checked(None))
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
                .with_custom_certificate_verifier(checked(Some(chain)))
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

/// The certificate check of `prefer` and `require` (no `chain`: the
/// certificate is not checked, the handshake's signatures still are) and of
/// `verify-ca` (the chain to a trusted CA, whatever host name the
/// certificate is for). `verify-full` is rustls' own check.
#[derive(Debug)]
struct Checked {
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // The name is checked after the chain: a name error means the chain
        // was good.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
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
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
