//! The HTTP sink's `tls` option against a real rustls receiver on loopback
//! that requires a client certificate from a test CA: the certificate and
//! CA the sink was configured with are what the handshake uses, and every
//! file problem is refused when the options load.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa_sinks::http::{HttpSink, HttpSinkConfig, TlsOptions};
use ankusa_sinks::{Options, Outcome, Sink, SinkError};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;

use crate::server::{Reply, Server};
use crate::{SHOPIFY_BODY, ctx, hook};

/// A CA of the test's own, made for the test (nothing committed, nothing
/// that expires between runs).
fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA")
}

/// A certificate signed by `ca` and its key: for a server on 127.0.0.1, or
/// for a client.
struct Leaf {
    der: CertificateDer<'static>,
    pem: String,
    key: KeyPair,
}

fn leaf(ca: &CertifiedIssuer<'static, KeyPair>, name: &str, server: bool) -> Leaf {
    let sans = if server {
        vec!["127.0.0.1".to_owned()]
    } else {
        Vec::new()
    };
    let mut params = CertificateParams::new(sans).expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, ca).expect("signed");
    Leaf {
        der: cert.der().clone(),
        pem: cert.pem(),
        key,
    }
}

/// A receiver on 127.0.0.1 whose certificate is `server`'s and that
/// requires a client certificate signed by `client_ca`.
async fn receiver(server: &Leaf, client_ca: &CertifiedIssuer<'static, KeyPair>) -> Server {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(client_ca.der().clone()).expect("client CA");
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .expect("verifier");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server.key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![server.der.clone()], key)
        .expect("server config");
    Server::start_tls(Arc::new(config), |_| Reply::status(200)).await
}

/// Writes `text` to `name` in `dir`.
fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

fn options(v: serde_json::Value) -> Options {
    v.as_object().expect("object").clone()
}

/// The sink of these options (they load).
fn sink(v: serde_json::Value) -> HttpSink {
    HttpSink::new(&HttpSinkConfig::from_options(&options(v)).expect("valid")).expect("sink")
}

/// Each problem of these options as "option: message".
fn problems(v: serde_json::Value) -> Vec<String> {
    match HttpSinkConfig::from_options(&options(v)) {
        Ok(c) => vec![format!("unexpectedly valid: {c:?}")],
        Err(e) => e
            .problems()
            .iter()
            .map(|e| match e {
                SinkError::InvalidOption { option, reason } => format!("{option}: {reason}"),
                SinkError::UnknownOption { option, .. } => format!("{option}: unknown"),
                other => other.to_string(),
            })
            .collect(),
    }
}

/// Waits (60 s at most) until `f` holds.
async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The test's PKI: a CA, a receiver certificate and a client certificate it
/// signed, as PEM files in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: CertifiedIssuer<'static, KeyPair>,
    server: Leaf,
    client: Leaf,
    ca_pem: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ca("Ankusa test CA");
    let server = leaf(&ca, "receiver", true);
    let client = leaf(&ca, "relay", false);
    let ca_pem = file(dir.path(), "ca.pem", &ca.pem());
    let client_cert = file(dir.path(), "relay.crt", &client.pem);
    let client_key = file(dir.path(), "relay.key", &client.key.serialize_pem());
    Pki {
        dir,
        ca,
        server,
        client,
        ca_pem,
        client_cert,
        client_key,
    }
}

/// The receiver requires a client certificate from its CA: the sink presents
/// the configured one (the receiver records it), trusts the receiver through
/// `tls.ca` alone, and the hook arrives byte for byte.
#[tokio::test]
async fn mutual_tls_delivers_with_the_configured_certificate() {
    let pki = pki();
    let server = receiver(&pki.server, &pki.ca).await;
    let s = sink(json!({
        "url": server.https_url("/in"),
        "tls": {"client_cert": pki.client_cert, "client_key": pki.client_key, "ca": pki.ca_pem},
    }));
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    let r = server.requests();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].body, SHOPIFY_BODY);
    assert_eq!(r[0].path, "/in");
    assert_eq!(
        r[0].client_cert.as_deref(),
        Some(pki.client.der.as_ref()),
        "the receiver saw the configured client certificate"
    );
    // A second delivery reuses the pool's connection: still the same.
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    assert_eq!(server.requests().len(), 2);
    assert_eq!(server.handshakes_failed(), 0);
}

/// Without a client certificate (only `tls.ca`) the receiver refuses the
/// handshake: a `Retry` naming the failure, no request, no panic.
#[tokio::test]
async fn without_the_client_certificate_the_receiver_refuses_and_it_is_a_retry() {
    let pki = pki();
    let server = receiver(&pki.server, &pki.ca).await;
    let s = sink(json!({"url": server.https_url("/in"), "tls": {"ca": pki.ca_pem}}));
    let outcome = s.deliver(&hook(b"{}"), &ctx()).await;
    assert!(
        matches!(&outcome, Outcome::Retry { reason, after: None } if !reason.is_empty()),
        "{outcome:?}"
    );
    until("the receiver to refuse a handshake", || {
        server.handshakes_failed() >= 1
    })
    .await;
    assert!(server.requests().is_empty());
}

/// A client certificate from another CA is refused by the receiver too.
#[tokio::test]
async fn a_client_certificate_of_another_ca_is_refused_and_it_is_a_retry() {
    let pki = pki();
    let other = ca("Some other CA");
    let stranger = leaf(&other, "stranger", false);
    let cert = file(pki.dir.path(), "stranger.crt", &stranger.pem);
    let key = file(
        pki.dir.path(),
        "stranger.key",
        &stranger.key.serialize_pem(),
    );
    let server = receiver(&pki.server, &pki.ca).await;
    let s = sink(json!({
        "url": server.https_url("/in"),
        "tls": {"client_cert": cert, "client_key": key, "ca": pki.ca_pem},
    }));
    let outcome = s.deliver(&hook(b"{}"), &ctx()).await;
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
    until("the receiver to refuse a handshake", || {
        server.handshakes_failed() >= 1
    })
    .await;
    assert!(server.requests().is_empty());
}

/// `tls.ca` replaces the platform's roots: a receiver whose certificate does
/// not chain to it is refused by the sink (a `Retry` that says why), and so
/// is the test receiver without `tls.ca` (no platform root signed it).
#[tokio::test]
async fn the_receiver_must_chain_to_the_configured_ca() {
    let pki = pki();
    let server = receiver(&pki.server, &pki.ca).await;
    let other = ca("Not the receiver's CA");
    let other_pem = file(pki.dir.path(), "other-ca.pem", &other.pem());
    for tls in [
        json!({"client_cert": pki.client_cert, "client_key": pki.client_key, "ca": other_pem}),
        json!({"client_cert": pki.client_cert, "client_key": pki.client_key}),
    ] {
        let s = sink(json!({"url": server.https_url("/in"), "tls": tls}));
        match s.deliver(&hook(b"{}"), &ctx()).await {
            Outcome::Retry {
                reason,
                after: None,
            } => {
                assert!(reason.contains("certificate"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(server.requests().is_empty());
}

/// Every file problem is refused when the options load, naming the option,
/// all in one run; nothing waits for a delivery.
#[test]
fn file_problems_are_refused_at_load_naming_the_option() {
    let pki = pki();
    let dir = pki.dir.path();
    let missing = dir.join("missing.pem");
    let not_pem = file(dir, "notes.txt", "just some text\n");
    let broken = file(
        dir,
        "broken.pem",
        "-----BEGIN CERTIFICATE-----\n!!not base64!!\n-----END CERTIFICATE-----\n",
    );
    let unterminated = file(dir, "cut.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n");
    let other_key = file(
        dir,
        "other.key",
        &KeyPair::generate().expect("key").serialize_pem(),
    );
    let encrypted = file(
        dir,
        "enc.key",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
    );
    let m = missing.display();
    assert_eq!(
        problems(
            json!({"url": "https://h/", "tls": {"client_cert": missing, "client_key": pki.client_key}})
        ),
        [format!(
            "tls.client_cert: cannot read {m}: No such file or directory (os error 2)"
        )]
    );
    // A FIFO (it would block the load) and a directory are no PEM files.
    let fifo = dir.join("ca.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    for not_a_file in [fifo.clone(), dir.to_path_buf()] {
        assert_eq!(
            problems(json!({"url": "https://h/", "tls": {"ca": not_a_file}})),
            [format!(
                "tls.ca: {} is not a regular file (a PEM file of certificates or a key)",
                not_a_file.display()
            )]
        );
    }
    assert_eq!(
        problems(json!({"url": "https://h/", "tls": {"ca": not_pem}})),
        [format!(
            "tls.ca: {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            not_pem.display()
        )]
    );
    assert_eq!(
        problems(json!({"url": "https://h/", "tls": {"ca": broken}})),
        [format!(
            "tls.ca: {} is not a valid PEM file: a section is not base64",
            broken.display()
        )]
    );
    assert_eq!(
        problems(json!({"url": "https://h/", "tls": {"ca": unterminated}})),
        [format!(
            "tls.ca: {} is not a valid PEM file: a section has no -----END line",
            unterminated.display()
        )]
    );
    // A key that is not the certificate's.
    assert_eq!(
        problems(
            json!({"url": "https://h/", "tls": {"client_cert": pki.client_cert, "client_key": other_key}})
        ),
        [format!(
            "tls.client_key: {} is not the private key of the certificate in tls.client_cert ({})",
            other_key.display(),
            pki.client_cert.display()
        )]
    );
    // A certificate file given as the key, a key file given as the CA.
    assert_eq!(
        problems(
            json!({"url": "https://h/", "tls": {"client_cert": pki.client_cert, "client_key": pki.client_cert, "ca": pki.client_key}})
        ),
        // (In the order of the map's keys, as every option's problems.)
        [
            format!(
                "tls.ca: {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                pki.client_key.display()
            ),
            format!(
                "tls.client_key: {} holds no PEM private key (-----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)",
                pki.client_cert.display()
            ),
        ]
    );
    assert_eq!(
        problems(
            json!({"url": "https://h/", "tls": {"client_cert": pki.client_cert, "client_key": encrypted}})
        ),
        [format!(
            "tls.client_key: {} holds an encrypted private key: give the key unencrypted (e.g. `openssl pkey -in KEY -out KEY.plain`), readable by the relay only",
            encrypted.display()
        )]
    );
    // The certificate and the key come together.
    assert_eq!(
        problems(json!({"url": "https://h/", "tls": {"client_cert": pki.client_cert}})),
        [
            "tls.client_key: is required with tls.client_cert: the certificate's private key (a PEM file)"
        ]
    );
    assert_eq!(
        problems(
            json!({"url": "https://h/", "tls": {"client_key": pki.client_key, "ca": pki.ca_pem}})
        ),
        [
            "tls.client_cert: is required with tls.client_key: the certificate (a PEM file) the key belongs to"
        ]
    );
    // The option's own shape.
    assert_eq!(
        problems(json!({"url": "https://h/", "tls": {}})),
        ["tls: names no file: give ca, or client_cert and client_key, or all three"]
    );
    assert_eq!(
        problems(json!({"url": "https://h/", "tls": "/etc/ca.pem"})),
        [
            "tls: must be a map: {client_cert: PATH, client_key: PATH, ca: PATH} (PEM files; ca alone, or the certificate and key, or all three)"
        ]
    );
    assert_eq!(
        problems(
            json!({"url": "https://h/", "tls": {"ca": pki.ca_pem, "cert": "x", "client_key": 5}})
        ),
        [
            "tls.cert: unknown",
            "tls.client_key: must be a string (the path of a PEM file)"
        ]
    );
    assert_eq!(
        problems(json!({"url": "http://h/", "tls": {"ca": pki.ca_pem}})),
        [
            "tls: applies to an https:// receiver; url is http:// (no TLS, so no certificate is checked or presented)"
        ]
    );
    // Every problem at once, beside the sink's others.
    let e = HttpSinkConfig::from_options(&options(json!({
        "url": "https://h/",
        "timeout_ms": 0,
        "tls": {"client_cert": missing, "client_key": not_pem, "ca": broken},
    })))
    .expect_err("problems");
    let names: Vec<_> = e.problems().iter().filter_map(SinkError::option).collect();
    assert_eq!(
        names,
        ["timeout_ms", "tls.ca", "tls.client_cert", "tls.client_key"]
    );
}

/// What loads is what the sink uses: the paths are kept for messages, the
/// key never shows in `Debug`, and the library form refuses what the option
/// form refuses.
#[test]
fn loaded_options_keep_paths_and_hide_the_key() {
    let pki = pki();
    let c = HttpSinkConfig::from_options(&options(json!({
        "url": "https://h/",
        "tls": {"client_cert": pki.client_cert, "client_key": pki.client_key, "ca": pki.ca_pem},
    })))
    .expect("valid");
    let tls = c.tls.as_ref().expect("tls");
    assert_eq!(
        tls.client_paths(),
        Some((pki.client_cert.as_path(), pki.client_key.as_path()))
    );
    assert_eq!(tls.ca_path(), Some(pki.ca_pem.as_path()));
    let d = format!("{c:?}");
    assert!(d.contains("relay.key"), "{d}");
    let key_pem = pki.client.key.serialize_pem();
    let key_line = key_pem.lines().nth(1).expect("a base64 line");
    assert!(!d.contains(key_line), "{d}");
    let e = TlsOptions::load(Some(&pki.client_cert), None, None).expect_err("no key");
    assert_eq!(e.option(), Some("tls.client_key"));
    let e = TlsOptions::load(None, None, None).expect_err("nothing");
    assert_eq!(e.option(), Some("tls"));
    assert_eq!(
        TlsOptions::load(None, None, Some(&pki.ca_pem))
            .expect("ca")
            .client_paths(),
        None
    );
}

/// With `auth.oauth2` the token endpoint is reached with the platform's
/// roots and `tls.ca` beside them (an endpoint on the receiver's private
/// PKI is trusted) and without the client certificate (it asks for none
/// here; the client authenticates with its secret).
#[tokio::test]
async fn a_token_endpoint_on_the_private_pki_is_trusted_through_tls_ca() {
    let pki = pki();
    let receiver = receiver(&pki.server, &pki.ca).await;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let idp = leaf(&pki.ca, "idp", true);
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(idp.key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![idp.der.clone()], key)
        .expect("server config");
    let tokens = Server::start_tls(Arc::new(config), |_| {
        Reply::status(200)
            .body(r#"{"access_token":"tok-1","token_type":"Bearer","expires_in":3600}"#)
    })
    .await;
    let s = sink(json!({
        "url": receiver.https_url("/in"),
        "tls": {"client_cert": pki.client_cert, "client_key": pki.client_key, "ca": pki.ca_pem},
        "auth": {"oauth2": {"token_url": tokens.https_url("/token"), "client_id": "c", "client_secret": "s"}},
    }));
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    let t = tokens.requests();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].client_cert, None);
    let r = receiver.requests();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].header("authorization"), Some("Bearer tok-1"));
    assert_eq!(r[0].client_cert.as_deref(), Some(pki.client.der.as_ref()));
}
