//! A write to etcd fenced by a dlock hold, as a writer without dlock makes it: `etcdctl txn`
//! comparing the hold's key and create revision (etcd's `IsOwner`), made while the hold lasts
//! and refused once it is over, whoever holds the lock then.

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlocks::etcd::fence::OwnerCompare;
use dlocks::LockClient;

/// Runs `etcdctl txn` putting `value` at `key` if `owner` compares: whether it succeeded.
fn put_if_owner(cluster: &EtcdCluster, owner: &OwnerCompare, key: &str, value: &str) -> bool {
    let mut child = cluster
        .etcdctl()
        .arg("txn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run etcdctl (Debian's etcd-client)");
    // The compares, a blank line, the success requests, a blank line, the failure requests
    // (none), a blank line.
    let script = format!("{}\n\nput {key} \"{value}\"\n\n\n", owner.etcdctl());
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("write the txn");
    let output = child.wait_with_output().expect("etcdctl ends");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "etcdctl txn failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    match printed.lines().next() {
        Some("SUCCESS") => true,
        Some("FAILURE") => false,
        _ => panic!("etcdctl txn printed {printed:?}"),
    }
}

/// What `key` holds, read with etcdctl.
fn get(cluster: &EtcdCluster, key: &str) -> String {
    let output = cluster
        .etcdctl()
        .args(["get", "--print-value-only", key])
        .output()
        .expect("etcdctl get");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn a_write_compared_with_the_holds_key_is_made_only_while_the_hold_lasts() {
    let cluster = EtcdCluster::single();
    let (backend, second_backend) = (cluster.backend(), cluster.backend());
    let first = LockClient::new(backend.clone());
    let second = LockClient::new(second_backend.clone());
    let name = unique("fence-etcd");
    let data = format!("data/{name}");

    let guard = first
        .fenced_lock(name.clone())
        .lock_with_lease(Duration::from_secs(2))
        .expect("lock");
    let owner = backend.owner_compare(&guard);
    assert_eq!(owner.create_revision(), guard.token());
    assert!(
        put_if_owner(&cluster, &owner, &data, "first"),
        "the holder writes"
    );
    assert!(
        put_if_owner(&cluster, &owner, &data, "first again"),
        "and again"
    );

    // The hold's lease runs out; the next holder takes the lock and writes.
    let next = second
        .fenced_lock(name.clone())
        .try_lock_for(Duration::from_secs(20))
        .expect("wait")
        .expect("the lock once the first lease ran out");
    assert!(next.token() > guard.token());
    let next_owner = second_backend.owner_compare(&next);
    assert!(put_if_owner(&cluster, &next_owner, &data, "second"));

    // The first holder's late write is refused by etcd itself.
    assert!(!put_if_owner(&cluster, &owner, &data, "first, late"));
    assert_eq!(get(&cluster, &data), "second");
    next.unlock().expect("unlock");
    assert!(
        !put_if_owner(&cluster, &next_owner, &data, "after the release"),
        "a released hold writes no more"
    );
}
