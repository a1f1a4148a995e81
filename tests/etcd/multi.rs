//! A multi-lock on etcd: a round's attempts go to etcd together, and so do their releases, as
//! Redis and PostgreSQL send each in one call.

use std::time::Duration;

use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlocks::{LockClientBuilder, MultiLock};

/// A round of five free members is one transaction (each member's attempt nested in it), not
/// five, and so is their release; and a round still takes all of them or none.
#[test]
fn a_multi_lock_round_and_its_release_are_one_transaction_each() {
    let cluster = EtcdCluster::single();
    // Transactions of the clients' own would be counted too: no record of the client (its
    // first hold publishes it, from a thread of its own), and fixed leases only (a session,
    // once made, is kept alive and its keys read every few seconds).
    let lease = Duration::from_secs(60);
    let quiet = || {
        LockClientBuilder::new(std::sync::Arc::new(cluster.backend()))
            .client_record(false)
            .build()
            .expect("client")
    };
    let (client, other) = (quiet(), quiet());
    let names: Vec<String> = (0..5).map(|i| unique(&format!("round-{i}"))).collect();
    let multi = MultiLock::new(names.iter().map(|name| client.lock(name.clone())));
    let held = |name: &String| other.lock(name.clone()).is_locked().expect("status");

    let before = crate::calls_answered(&cluster, "Txn");
    let guard = multi
        .try_lock_with_lease(Duration::ZERO, lease)
        .expect("try")
        .expect("every member free");
    let sent = crate::calls_answered(&cluster, "Txn") - before;
    assert_eq!(sent, 1, "transactions for a round of five free members");
    assert!(names.iter().all(held), "every member held");

    let before = crate::calls_answered(&cluster, "Txn");
    guard.unlock().expect("unlock");
    let sent = crate::calls_answered(&cluster, "Txn") - before;
    assert_eq!(sent, 1, "transactions for the release of five members");
    assert!(!names.iter().any(held), "every member released");

    // One member held by another client: the round keeps none.
    let taken = other
        .lock(names[3].clone())
        .lock_with_lease(lease)
        .expect("lock");
    let refused = multi
        .try_lock_with_lease(Duration::ZERO, lease)
        .expect("try");
    assert!(refused.is_none(), "a member is held");
    for (at, name) in names.iter().enumerate().filter(|(at, _)| *at != 3) {
        assert!(!held(name), "member {at} given back");
    }
    taken.unlock().expect("unlock");
    let guard = multi
        .try_lock_with_lease(Duration::ZERO, lease)
        .expect("try")
        .expect("free again");
    guard.unlock().expect("unlock");
}
