//! The server's TLS identity: the operator's certificate and key, or a CA kept in the
//! state directory and a server certificate it signs at every start for the addresses
//! being served. Clients trust the CA once; the server certificate may change.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::ServeError;
use super::files::{read, write_private, write_public};

pub struct Identity {
    pub config: Arc<ServerConfig>,
    /// The generated CA's certificate, which clients are pointed at; `None` with the
    /// operator's own certificate.
    pub ca: Option<PathBuf>,
}

const CA_CERT: &str = "serve-ca.pem";
const CA_KEY: &str = "serve-ca.key";
const SERVER_CERT: &str = "serve-server.pem";

/// The CA's parameters; also what its signature is checked against, so they are the same
/// at every start.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "fleet-updater serve CA");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn generation(e: rcgen::Error) -> ServeError {
    ServeError::Tls(format!("cannot generate a certificate: {e}"))
}

/// The names a client may use: loopback always, and every listen address that is not a
/// wildcard.
fn server_names(listen: &[SocketAddr]) -> Vec<String> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    for addr in listen {
        let ip: IpAddr = addr.ip();
        if !ip.is_unspecified() && !names.contains(&ip.to_string()) {
            names.push(ip.to_string());
        }
    }
    names
}

/// Loads the CA from `state_dir`, creating it on first use.
fn ca(state_dir: &Path) -> Result<(KeyPair, PathBuf), ServeError> {
    let (cert_path, key_path) = (state_dir.join(CA_CERT), state_dir.join(CA_KEY));
    if cert_path.exists() && key_path.exists() {
        let key = KeyPair::from_pem(&read(&key_path)?).map_err(|e| {
            ServeError::Tls(format!("{} is not a private key: {e}", key_path.display()))
        })?;
        return Ok((key, cert_path));
    }
    let key = KeyPair::generate().map_err(generation)?;
    let cert = ca_params().self_signed(&key).map_err(generation)?;
    write_private(&key_path, &key.serialize_pem())?;
    write_public(&cert_path, &cert.pem())?;
    Ok((key, cert_path))
}

fn generated(state_dir: &Path, listen: &[SocketAddr]) -> Result<Identity, ServeError> {
    let (ca_key, ca_path) = ca(state_dir)?;
    let issuer = Issuer::new(ca_params(), ca_key);
    let key = KeyPair::generate().map_err(generation)?;
    let mut params = CertificateParams::new(server_names(listen)).map_err(generation)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "fleet-updater serve");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer).map_err(generation)?;
    // Written for inspection (`openssl x509 -in ...`); the key stays in memory only.
    write_public(&state_dir.join(SERVER_CERT), &cert.pem())?;
    let chain = vec![cert.der().clone()];
    let key = PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| ServeError::Tls(format!("cannot use the generated key: {e}")))?;
    Ok(Identity {
        config: server_config(chain, key)?,
        ca: Some(ca_path),
    })
}

fn provided(certificate: &Path, private_key: &Path) -> Result<Identity, ServeError> {
    let chain = CertificateDer::pem_slice_iter(read(certificate)?.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ServeError::Tls(format!("{} is not PEM: {e}", certificate.display())))?;
    if chain.is_empty() {
        return Err(ServeError::Tls(format!(
            "{} holds no certificate",
            certificate.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_slice(read(private_key)?.as_bytes()).map_err(|e| {
        ServeError::Tls(format!(
            "{} is not a PEM private key: {e}",
            private_key.display()
        ))
    })?;
    Ok(Identity {
        config: server_config(chain, key)?,
        ca: None,
    })
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, ServeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ServeError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| ServeError::Tls(format!("the certificate does not fit its key: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The operator's certificate when configured, else the generated one.
///
/// # Errors
/// When the files cannot be read or parsed, or the state directory cannot be written.
pub fn identity(
    state_dir: &Path,
    certificate: Option<&Path>,
    private_key: Option<&Path>,
    listen: &[SocketAddr],
) -> Result<Identity, ServeError> {
    match (certificate, private_key) {
        (Some(cert), Some(key)) => provided(cert, key),
        _ => generated(state_dir, listen),
    }
}
