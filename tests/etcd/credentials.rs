//! etcd with authentication on: the credentials given in an `etcd://user:password@host` URL, as
//! the `dlock` command takes it, or with the builder's `user`; none given is a configuration
//! error that says what to set.

use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlocks::etcd::EtcdBackend;
use dlocks::{LockClient, LockError};

/// One member with a root user and authentication on.
fn with_authentication() -> EtcdCluster {
    let cluster = EtcdCluster::single();
    for args in [
        &["user", "add", "root:root-secret"][..],
        &["auth", "enable"][..],
    ] {
        let status = cluster
            .etcdctl()
            .args(args)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("etcdctl runs");
        assert!(status.success(), "etcdctl {args:?}");
    }
    cluster
}

#[test]
fn missing_credentials_are_a_configuration_error_naming_what_to_set() {
    let cluster = with_authentication();
    let error = EtcdBackend::connect(&cluster.members()[0].url())
        .and_then(|backend| {
            LockClient::new(backend)
                .lock(unique("auth"))
                .try_lock()
                .map(drop)
        })
        .expect_err("etcd asks for credentials");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("user(") && message.contains("etcd://"),
        "{message}"
    );
}

#[test]
fn credentials_in_an_etcd_url_are_used() {
    let cluster = with_authentication();
    let url = cluster.members()[0]
        .url()
        .replacen("http://", "etcd://root:root-secret@", 1);
    let client = LockClient::new(EtcdBackend::connect(&url).expect("connects with them"));
    let guard = client
        .lock(unique("auth"))
        .try_lock()
        .expect("try")
        .expect("free");
    guard.unlock().expect("unlock");
    let twice = EtcdBackend::builder(&url)
        .user("root", "root-secret")
        .build();
    assert!(
        matches!(twice, Err(LockError::Config { .. })),
        "credentials given twice: {twice:?}"
    );
}
