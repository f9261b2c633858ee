//! The HTTP sink's TLS options (`tls`, docs/design.md section 6): a client
//! certificate for receivers that require mutual TLS, and a private CA the
//! receiver's certificate is checked against.
//!
//! ```yaml
//! tls:
//!   client_cert: /etc/ankusa/relay.crt   # PEM: the certificate, then any intermediates
//!   client_key: /etc/ankusa/relay.key    # PEM: PKCS#8, PKCS#1 (RSA) or SEC1 (EC), unencrypted
//!   ca: /etc/ankusa/internal-ca.pem      # PEM: one or more CA certificates
//! ```
//!
//! - `client_cert` and `client_key` come together: the sink presents that
//!   certificate when the receiver asks for one (a receiver that does not
//!   ask never sees it). The key must be the certificate's: RSA, ECDSA
//!   (P-256, P-384) or Ed25519, as ring signs.
//! - `ca` **replaces** the platform's roots for this sink's receiver: its
//!   certificate must chain to one of the file's CAs (as curl's `--cacert`
//!   and Go's `RootCAs` do). A receiver on a private PKI is then pinned to
//!   it: a certificate from a public CA for the same name is refused. Put
//!   several CAs in the file to trust several (a rotation of the CA). Without
//!   `ca`, the platform's roots verify the receiver, as before.
//! - Each file is read and parsed when the options are (`check-config` and
//!   `serve` both), so a missing file, a file that is not PEM or holds no
//!   certificate (or key), a key that does not match the certificate or that
//!   ring cannot use, and a CA that is not an X.509 trust anchor are load
//!   errors naming the option (`tls.client_key`), never a failure of the
//!   first delivery. The sink's client holds what was read: a reload that
//!   leaves the sink entry's options as they were keeps that client (and
//!   the old certificate), so roll a renewed certificate in under a new path
//!   and reload (or restart); a reload checks the new files first, and
//!   refuses them as a start would.
//! - A handshake that fails at delivery (the receiver refuses the
//!   certificate, or its own does not chain to `ca`) is a connection failure:
//!   [`Outcome::Retry`](crate::Outcome::Retry), as every TLS error is.
//!
//! The key never reaches a log or an error: [`TlsOptions`]'s `Debug` shows
//! the paths only, and messages name the file, never its contents.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rustls::pki_types::pem::{self, PemObject as _};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

use crate::{OptionProblems, SinkError};

/// The keys of `tls` (as [`SinkError::UnknownOption`] lists them).
const KEYS: &[&str] = &["tls.client_cert", "tls.client_key", "tls.ca"];

/// The most a PEM file of `tls` may hold, bytes: a chain or a CA bundle is a
/// few KB (the platform's whole bundle about 200 KB); anything larger is the
/// wrong file.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// A client certificate chain and its key, read and matched.
struct ClientIdentity {
    cert_path: PathBuf,
    key_path: PathBuf,
    /// The certificate first, then the intermediates, as in the file.
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for ClientIdentity {
    fn clone(&self) -> ClientIdentity {
        ClientIdentity {
            cert_path: self.cert_path.clone(),
            key_path: self.key_path.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl PartialEq for ClientIdentity {
    fn eq(&self, other: &ClientIdentity) -> bool {
        self.cert_path == other.cert_path
            && self.key_path == other.key_path
            && self.chain == other.chain
            && self.key == other.key
    }
}

/// The `tls` option of an http sink, its files read and checked (module
/// docs). Built by [`TlsOptions::load`] (or from the option), so a value
/// always holds a usable certificate and key, or CAs, or both.
#[derive(Clone, PartialEq)]
pub struct TlsOptions {
    client: Option<ClientIdentity>,
    /// `ca`'s path and its certificates.
    ca: Option<(PathBuf, Vec<CertificateDer<'static>>)>,
}

impl Eq for TlsOptions {}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("TlsOptions");
        if let Some(c) = &self.client {
            d.field("client_cert", &c.cert_path);
            d.field("client_key", &c.key_path);
        }
        if let Some((path, certs)) = &self.ca {
            d.field("ca", path);
            d.field("ca_certificates", &certs.len());
        }
        d.finish()
    }
}

impl TlsOptions {
    /// Reads and checks the files of `tls`: a client certificate and its key
    /// (both or neither), a CA bundle, or all three. Every problem names its
    /// option (`tls.client_cert`, `tls.client_key`, `tls.ca`), all of them
    /// reported ([`SinkError::Options`] when there are several).
    pub fn load(
        client_cert: Option<&Path>,
        client_key: Option<&Path>,
        ca: Option<&Path>,
    ) -> Result<TlsOptions, SinkError> {
        let mut p = OptionProblems::new();
        let tls = load(client_cert, client_key, ca, true, &mut p);
        match (p.finish(()), tls) {
            (Ok(()), Some(tls)) => Ok(tls),
            (Err(e), _) => Err(e),
            (Ok(()), None) => Err(SinkError::invalid("tls", "names no file")),
        }
    }

    /// The client certificate's and key's paths, when there is one.
    pub fn client_paths(&self) -> Option<(&Path, &Path)> {
        self.client
            .as_ref()
            .map(|c| (c.cert_path.as_path(), c.key_path.as_path()))
    }

    /// The CA file's path, when there is one.
    pub fn ca_path(&self) -> Option<&Path> {
        self.ca.as_ref().map(|(p, _)| p.as_path())
    }

    /// The CA certificates (empty without `ca`).
    pub(crate) fn ca_certificates(&self) -> &[CertificateDer<'static>] {
        self.ca.as_ref().map_or(&[], |(_, c)| c.as_slice())
    }

    /// `builder` presenting the client certificate and trusting only the
    /// CAs, for the receiver's connections (module docs).
    ///
    /// # Errors
    /// [`SinkError::Setup`] when reqwest refuses what [`TlsOptions::load`]
    /// accepted (it parses the same DER with the same rustls).
    pub(crate) fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, SinkError> {
        if let Some(c) = &self.client {
            let identity = reqwest::Identity::from_pem(&identity_pem(&c.chain, &c.key))
                .map_err(|e| SinkError::Setup(format!("tls.client_cert: {e}")))?;
            builder = builder.identity(identity);
        }
        if self.ca.is_some() {
            builder = builder.tls_certs_only(certificates(self.ca_certificates())?);
        }
        Ok(builder)
    }
}

/// The CA certificates as reqwest takes them.
pub(crate) fn certificates(
    certs: &[CertificateDer<'static>],
) -> Result<Vec<reqwest::Certificate>, SinkError> {
    certs
        .iter()
        .map(|c| {
            reqwest::Certificate::from_der(c.as_ref())
                .map_err(|e| SinkError::Setup(format!("tls.ca: {e}")))
        })
        .collect()
}

/// Reads `tls`, recording every problem in `p`; `None` when it has one.
pub(crate) fn parse(value: &Value, p: &mut OptionProblems) -> Option<TlsOptions> {
    let Some(map) = value.as_object() else {
        p.invalid(
            "tls",
            "must be a map: {client_cert: PATH, client_key: PATH, ca: PATH} (PEM files; ca alone, or the certificate and key, or all three)",
        );
        return None;
    };
    let before = p.len();
    let mut path = |key: &str| -> Option<PathBuf> {
        let option = format!("tls.{key}");
        match map.get(key)? {
            Value::String(s) if !s.is_empty() => Some(PathBuf::from(s)),
            Value::String(_) => {
                p.invalid(option, "is empty: name a PEM file");
                None
            }
            _ => {
                p.invalid(option, "must be a string (the path of a PEM file)");
                None
            }
        }
    };
    let (cert, key, ca) = (path("client_cert"), path("client_key"), path("ca"));
    for k in map.keys() {
        let option = format!("tls.{k}");
        if !KEYS.contains(&option.as_str()) {
            p.unknown(option, KEYS);
        }
    }
    if map.is_empty() {
        p.invalid(
            "tls",
            "names no file: give ca, or client_cert and client_key, or all three",
        );
    }
    // A file is still read when its own option is fine, so its problems
    // come in the same run; the certificate and key are paired only when
    // neither option is broken (a broken one is reported once).
    let pairing = p.ok("tls.client_cert") && p.ok("tls.client_key");
    let tls = load(cert.as_deref(), key.as_deref(), ca.as_deref(), pairing, p);
    (p.len() == before).then_some(tls).flatten()
}

/// Reads and checks the files, recording every problem in `p`; `None` when
/// there is one (or no file at all). `pairing`: whether a certificate
/// without a key (or a key without one) is a problem here.
fn load(
    cert: Option<&Path>,
    key: Option<&Path>,
    ca: Option<&Path>,
    pairing: bool,
    p: &mut OptionProblems,
) -> Option<TlsOptions> {
    let before = p.len();
    match (cert, key) {
        _ if !pairing => {}
        (Some(_), None) => p.invalid(
            "tls.client_key",
            "is required with tls.client_cert: the certificate's private key (a PEM file)",
        ),
        (None, Some(_)) => p.invalid(
            "tls.client_cert",
            "is required with tls.client_key: the certificate (a PEM file) the key belongs to",
        ),
        _ => {}
    }
    let chain = cert.and_then(|path| p.take(read_certificates("tls.client_cert", path)));
    let private = key.and_then(|path| p.take(read_key(path)));
    let client = match (chain, private, cert, key) {
        (Some(chain), Some(private), Some(cert_path), Some(key_path)) => p
            .take(matched(&chain, &private, cert_path, key_path))
            .map(|()| ClientIdentity {
                cert_path: cert_path.to_path_buf(),
                key_path: key_path.to_path_buf(),
                chain,
                key: private,
            }),
        _ => None,
    };
    let ca = ca.and_then(|path| {
        let certs = p.take(read_certificates("tls.ca", path))?;
        p.take(trust_anchors(&certs, path))
            .map(|()| (path.to_path_buf(), certs))
    });
    if p.len() != before || (client.is_none() && ca.is_none()) {
        return None;
    }
    Some(TlsOptions { client, ca })
}

/// The bytes of the file `path` of `option`, bounded.
fn read(option: &str, path: &Path) -> Result<Vec<u8>, SinkError> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| SinkError::invalid(option, format!("cannot read {shown}: {e}")))?;
    // A FIFO or a device (`/dev/zero`) has no length to bound and would
    // block or fill memory at load: only a regular file is a PEM file.
    if !meta.is_file() {
        return Err(SinkError::invalid(
            option,
            format!("{shown} is not a regular file (a PEM file of certificates or a key)"),
        ));
    }
    let len = meta.len();
    if len > MAX_FILE_BYTES {
        return Err(SinkError::invalid(
            option,
            format!(
                "{shown} is {len} bytes: more than a PEM file of certificates or a key ({MAX_FILE_BYTES} at most)"
            ),
        ));
    }
    // Read at most one byte past the bound, should the file grow meanwhile.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_FILE_BYTES + 1), &mut bytes)
        })
        .map_err(|e| SinkError::invalid(option, format!("cannot read {shown}: {e}")))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(SinkError::invalid(
            option,
            format!(
                "{shown} is more than {MAX_FILE_BYTES} bytes: more than a PEM file of certificates or a key"
            ),
        ));
    }
    Ok(bytes)
}

/// The certificates of a PEM file (other sections are skipped), at least one.
fn read_certificates(option: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, SinkError> {
    let bytes = read(option, path)?;
    let shown = path.display();
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            SinkError::invalid(
                option,
                format!("{shown} is not a valid PEM file: {}", pem_error(&e)),
            )
        })?;
    if certs.is_empty() {
        return Err(SinkError::invalid(
            option,
            format!("{shown} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"),
        ));
    }
    Ok(certs)
}

/// The private key of a PEM file: the first of its PKCS#8, PKCS#1 or SEC1
/// sections.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, SinkError> {
    const OPTION: &str = "tls.client_key";
    let bytes = read(OPTION, path)?;
    let shown = path.display();
    match PrivateKeyDer::from_pem_slice(&bytes) {
        Ok(key) => Ok(key),
        Err(pem::Error::NoItemsFound) => {
            // An encrypted key parses as no key at all: say which it is.
            let encrypted = bytes
                .windows(b"ENCRYPTED PRIVATE KEY".len())
                .any(|w| w == b"ENCRYPTED PRIVATE KEY");
            Err(SinkError::invalid(
                OPTION,
                if encrypted {
                    format!(
                        "{shown} holds an encrypted private key: give the key unencrypted (e.g. `openssl pkey -in KEY -out KEY.plain`), readable by the relay only"
                    )
                } else {
                    format!(
                        "{shown} holds no PEM private key (-----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)"
                    )
                },
            ))
        }
        Err(e) => Err(SinkError::invalid(
            OPTION,
            format!("{shown} is not a valid PEM file: {}", pem_error(&e)),
        )),
    }
}

/// Whether `key` is usable (by ring) and the private key of `chain`'s first
/// certificate. The error names `tls.client_key`, or `tls.client_cert` for a
/// certificate that is not X.509.
fn matched(
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
    cert_path: &Path,
    key_path: &Path,
) -> Result<(), SinkError> {
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| {
            SinkError::invalid(
                "tls.client_key",
                format!(
                    "{} is not a private key the relay can sign with (RSA, ECDSA P-256/P-384 or Ed25519): {e}",
                    key_path.display()
                ),
            )
        })?;
    let certified = rustls::sign::CertifiedKey::new(chain.to_vec(), signing);
    match certified.keys_match() {
        Ok(()) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(SinkError::invalid(
                "tls.client_key",
                format!(
                    "{} is not the private key of the certificate in tls.client_cert ({})",
                    key_path.display(),
                    cert_path.display()
                ),
            ))
        }
        // ring gives every key's public half: this is a key it cannot
        // compare, accepted as rustls accepts it.
        Err(rustls::Error::InconsistentKeys(_)) => Ok(()),
        Err(e) => Err(SinkError::invalid(
            "tls.client_cert",
            format!(
                "the first certificate of {} is not a valid X.509 certificate: {e}",
                cert_path.display()
            ),
        )),
    }
}

/// Whether every certificate of `certs` can be a root of trust.
fn trust_anchors(certs: &[CertificateDer<'static>], path: &Path) -> Result<(), SinkError> {
    let mut store = rustls::RootCertStore::empty();
    for (i, c) in certs.iter().enumerate() {
        store.add(c.clone()).map_err(|e| {
            SinkError::invalid(
                "tls.ca",
                format!(
                    "certificate {} of {} is not a valid X.509 CA certificate: {e}",
                    i + 1,
                    path.display()
                ),
            )
        })?;
    }
    Ok(())
}

fn pem_error(e: &pem::Error) -> String {
    match e {
        pem::Error::MissingSectionEnd { .. } => "a section has no -----END line".to_owned(),
        pem::Error::IllegalSectionStart { .. } => "a -----BEGIN line is malformed".to_owned(),
        pem::Error::Base64Decode(_) => "a section is not base64".to_owned(),
        other => other.to_string(),
    }
}

/// The chain and key as one PEM text, as [`reqwest::Identity::from_pem`]
/// reads it. Re-encoded from what was parsed, so a file's other sections
/// (`EC PARAMETERS` before an `openssl ecparam` key) do not reach reqwest,
/// which refuses them.
fn identity_pem(chain: &[CertificateDer<'static>], key: &PrivateKeyDer<'static>) -> Vec<u8> {
    let mut out = String::new();
    for c in chain {
        pem_section(&mut out, "CERTIFICATE", c.as_ref());
    }
    let label = match key {
        PrivateKeyDer::Pkcs1(_) => "RSA PRIVATE KEY",
        PrivateKeyDer::Sec1(_) => "EC PRIVATE KEY",
        _ => "PRIVATE KEY",
    };
    pem_section(&mut out, label, key.secret_der());
    out.into_bytes()
}

fn pem_section(out: &mut String, label: &str, der: &[u8]) {
    out.push_str(&format!("-----BEGIN {label}-----\n"));
    let b64 = BASE64.encode(der);
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
}
