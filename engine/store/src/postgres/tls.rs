//! TLS to Postgres, as libpq's `sslmode` means it, with rustls:
//!
//! | `sslmode` | encrypted | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | when the server offers TLS | not checked |
//! | `require` | always | not checked, unless `sslrootcert` is given: then as `verify-ca` |
//! | `verify-ca` | always | signed by a trusted root |
//! | `verify-full` | always | signed by a trusted root, and names the host |
//!
//! The trusted roots are those of `sslrootcert=PATH` (PEM), else the Mozilla set
//! (`webpki-roots`): a managed Postgres signed by a public CA verifies without a file; a
//! private CA needs its certificate. Unchecked certificates still get their handshake
//! signatures verified, so the session key is bound to the certificate shown; what goes
//! unchecked is only who shows it, as with libpq.

use std::sync::Arc;

use colloquy_core::store::StoreError;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How much of the server's certificate to check (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Encrypt, whoever the server is.
    Nothing,
    /// A chain to a trusted root.
    Chain,
    /// A chain to a trusted root, for the host connected to.
    ChainAndHost,
}

/// The rustls connector for `check`, trusting the roots in the PEM file `roots` (else the
/// Mozilla set).
pub(crate) fn connector(
    check: Check,
    roots: Option<&str>,
) -> Result<MakeRustlsConnect, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| StoreError::Internal(format!("TLS to Postgres: {error}")))?;
    let config = match check {
        Check::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
            .with_no_client_auth(),
        Check::Chain | Check::ChainAndHost => {
            let roots = Arc::new(trusted_roots(roots)?);
            let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|error| StoreError::Internal(format!("TLS to Postgres: {error}")))?;
            if check == Check::Chain {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyHost(verifier)))
                    .with_no_client_auth()
            } else {
                builder.with_webpki_verifier(verifier).with_no_client_auth()
            }
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The roots in the PEM file at `path`, else the Mozilla set.
fn trusted_roots(path: Option<&str>) -> Result<RootCertStore, StoreError> {
    let mut roots = RootCertStore::empty();
    let Some(path) = path else {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        return Ok(roots);
    };
    let unreadable = |why: String| {
        StoreError::Unavailable(format!(
            "cannot read the Postgres sslrootcert {path}: {why}"
        ))
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|error| unreadable(error.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| unreadable(error.to_string()))?;
    let (added, _ignored) = roots.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(unreadable("no certificate in it".to_owned()));
    }
    Ok(roots)
}

/// `verify-ca`: the chain is checked, the name in the certificate is not.
#[derive(Debug)]
struct AnyHost(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHost {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
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
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, signature)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, signature)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require`: any certificate, its handshake signatures still verified.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
