//! TLS on PostgreSQL: a URL with `sslmode=require` locks, waits and is woken over TLS with a
//! server whose certificate a private CA signed; an untrusted certificate, certificates on a URL
//! that does not ask for TLS, and a PEM that is not one are clear configuration errors.

#![cfg(all(feature = "postgres", feature = "tls"))]

use dlock_test_support as support;

use std::time::Duration;

use dlocks::postgres::PostgresBackend;
use dlocks::{LockClient, LockError};
use support::postgres_server::PostgresServer;
use support::test_certificates::TestCertificates;

fn tls_url(server: &PostgresServer) -> String {
    format!("{}?sslmode=require", server.url())
}

/// Sessions of dlock's backends (pooled and listening) on `server`, by whether they use TLS:
/// (with TLS, without).
fn dlock_sessions(server: &PostgresServer) -> (i64, i64) {
    let row = server
        .admin()
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name LIKE 'dlock%' AND a.application_name <> 'dlock-test-admin'",
            &[],
        )
        .expect("pg_stat_ssl");
    (row.get(0), row.get(1))
}

#[test]
fn sslmode_require_locks_waits_and_wakes_over_tls_with_a_private_ca() {
    let certificates = TestCertificates::generate();
    let server = PostgresServer::start_with_tls(&certificates);
    let connect = || {
        PostgresBackend::builder(&tls_url(&server))
            .tls_root_certificate(certificates.ca_pem.clone())
            .connect_timeout(Duration::from_secs(5))
            .build()
            .expect("connect over TLS")
    };
    let holder = LockClient::new(connect());
    let waiter = LockClient::new(connect());
    let guard = holder
        .lock("tls:orders")
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock over TLS");
    let waiting = std::thread::spawn(move || {
        // A 60 s lease on the holder: only the release's notification ends this wait early.
        waiter
            .lock("tls:orders")
            .try_lock_for(Duration::from_secs(30))
            .expect("wait over TLS")
            .map(|guard| guard.unlock().expect("unlock"))
            .is_some()
    });
    server.await_listeners(1);
    let (with_tls, without) = dlock_sessions(&server);
    assert!(
        with_tls >= 2,
        "pooled and listening sessions use TLS: {with_tls}"
    );
    assert_eq!(without, 0, "no dlock session without TLS");
    guard.unlock().expect("unlock over TLS");
    assert!(waiting.join().expect("waiter"), "the waiter got the lock");
}

#[test]
fn a_server_certificate_no_trusted_authority_signed_is_a_configuration_error() {
    let certificates = TestCertificates::generate();
    let server = PostgresServer::start_with_tls(&certificates);
    let other_ca = TestCertificates::generate().ca_pem;
    for builder in [
        PostgresBackend::builder(&tls_url(&server)),
        PostgresBackend::builder(&tls_url(&server)).tls_root_certificate(other_ca),
    ] {
        let error = builder
            .connect_timeout(Duration::from_secs(5))
            .build()
            .expect_err("an untrusted certificate");
        assert!(matches!(error, LockError::Config { .. }), "{error:?}");
        assert!(error.to_string().contains("TLS"), "{error}");
    }
}

#[test]
fn certificates_on_a_url_that_does_not_ask_for_tls_are_refused() {
    let certificates = TestCertificates::generate();
    let server = PostgresServer::start_with_tls(&certificates);
    let error = PostgresBackend::builder(&server.url())
        .tls_root_certificate(certificates.ca_pem.clone())
        .build()
        .expect_err("certificates without sslmode=require");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    assert!(error.to_string().contains("sslmode=require"), "{error}");
    // Without certificates, the same URL connects in plain text, as libpq's default does.
    let client = LockClient::new(server.backend());
    assert!(client
        .lock("tls:plain")
        .try_lock()
        .expect("plain")
        .is_some());
}

#[test]
fn a_root_certificate_that_is_not_pem_is_a_configuration_error() {
    let certificates = TestCertificates::generate();
    let server = PostgresServer::start_with_tls(&certificates);
    let error = PostgresBackend::builder(&tls_url(&server))
        .tls_root_certificate("not a certificate")
        .build()
        .expect_err("garbage PEM");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    assert!(error.to_string().contains("root certificate"), "{error}");
}
