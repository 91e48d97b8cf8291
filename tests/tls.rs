//! TLS to a real `redis-server` (built with TLS, as Debian's is), with a
//! private CA made by the `openssl` command. Needs the `tls-rustls`
//! feature: `cargo test --features tls-rustls --test tls`.
#![cfg(feature = "tls-rustls")]

use leasehold_testkit as support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use leasehold::fred::rustls::{self, pki_types::pem::PemObject, pki_types::CertificateDer};
use leasehold::fred::types::config::{Config, TlsConnector};
use leasehold::Client;
use support::fixture::within;
use support::RedisServer;

/// A CA and a server certificate for 127.0.0.1 / localhost, in `dir`.
fn make_certs(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl command (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
    ]
    .iter()
    .chain(&[
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=leasehold test CA",
    ])
    .copied()
    .collect::<Vec<_>>());
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        "server.crt",
        "-extfile",
        "ext.cnf",
    ]);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server with a plain port (for the harness) and a TLS port.
fn tls_server(dir: &Path) -> (RedisServer, u16) {
    make_certs(dir);
    let tls_port = free_port();
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &path("server.crt"),
        "--tls-key-file",
        &path("server.key"),
        "--tls-ca-cert-file",
        &path("ca.crt"),
        "--tls-auth-clients",
        "no",
    ]);
    (server, tls_port)
}

fn trusting(ca: &Path) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(ca).expect("CA pem"))
        .unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(config)
}

#[tokio::test]
async fn locks_work_over_tls() {
    let dir = std::env::temp_dir().join(format!("leasehold-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (server, tls_port) = tls_server(&dir);

    let mut config = Config::from_url(&format!("rediss://127.0.0.1:{tls_port}")).unwrap();
    config.tls = Some(trusting(&dir.join("ca.crt")).into());
    let client = Client::builder()
        .config(config)
        .build()
        .await
        .expect("TLS connect");
    let lock = client.lock("over-tls");
    let guard = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert_eq!(
        server.cmd(&["EXISTS", "over-tls"]),
        "1",
        "the plain port sees the same lock"
    );

    // A waiter over TLS is woken by the unlock message.
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.unlock().await.unwrap();
    within(Duration::from_secs(30), "TLS waiter", waiter)
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    client.shutdown().await.unwrap();

    // The system roots do not trust the private CA: a clear error, no hang.
    let untrusted = Client::builder()
        .url(&format!("rediss://127.0.0.1:{tls_port}"))
        .command_timeout(Duration::from_secs(2))
        .build()
        .await;
    assert!(
        untrusted.is_err(),
        "an untrusted certificate must not connect"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
