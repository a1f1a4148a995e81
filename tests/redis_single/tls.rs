//! TLS: a server with a certificate from a private CA accepts `rediss://` connections from a
//! backend that trusts that CA, and refuses one that does not.

#![cfg(all(feature = "redis", feature = "tls"))]

use dlock_test_support as support;

use dlocks::redis::RedisBackend;
use dlocks::{LockClient, LockError};
use support::redis_server::{RedisServer, ServerOptions};

#[test]
fn rediss_urls_lock_over_tls_with_a_trusted_ca() {
    let server = RedisServer::start_with(ServerOptions {
        tls: true,
        ..Default::default()
    });
    let tls = server.tls().expect("TLS files");
    let url = format!("rediss://127.0.0.1:{}/", tls.port);
    let backend = RedisBackend::builder(&url)
        .tls_root_certificate(tls.ca_pem.clone())
        .build()
        .expect("connect over TLS");
    let client = LockClient::new(backend.clone());
    let lock = client.lock("tls:orders");
    let guard = lock.lock().expect("lock over TLS");
    // Waiting uses the pub/sub connection, also over TLS.
    let waiter = std::thread::spawn(move || {
        let client = LockClient::new(backend);
        let guard = client
            .lock("tls:orders")
            .try_lock_for(std::time::Duration::from_secs(20))
            .expect("wait")
            .expect("acquired");
        guard.unlock().expect("unlock");
    });
    // The waiter subscribes only after finding the lock held: it is waiting now.
    server.await_subscriber("redisson_lock__channel:{tls:orders}");
    guard.unlock().expect("unlock over TLS");
    waiter.join().expect("waiter");

    // The plain port and the TLS port see the same data.
    let mut admin = server.admin();
    let exists: i64 = redis::cmd("EXISTS")
        .arg("tls:orders")
        .query(&mut admin)
        .expect("EXISTS");
    assert_eq!(exists, 0);
}

#[test]
fn an_untrusted_certificate_is_a_configuration_error() {
    let server = RedisServer::start_with(ServerOptions {
        tls: true,
        ..Default::default()
    });
    let url = format!("rediss://127.0.0.1:{}/", server.tls().expect("TLS").port);
    let error = RedisBackend::connect(&url).expect_err("the test CA is not a system root");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    assert!(error.to_string().contains("TLS"), "{error}");
}
