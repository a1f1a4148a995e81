//! A 3-member etcd cluster split by real partitions (each member in a network namespace of its
//! own, packets dropped silently between them): a holder on the cut-off side is told its hold
//! is lost before anyone on the majority side can take the lock, and a client that reaches
//! every member rides out a member cut off from the others.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlocks::etcd::EtcdBackend;
use dlocks::LockClient;

/// The watchdog lease of these tests: renewals every 2 s, a hold lost 6 s after the last.
const WATCHDOG: Duration = Duration::from_secs(6);

/// How long the cluster may take to settle after a fault (a new leader, a member back).
const SETTLE: Duration = Duration::from_secs(30);

/// A client that reaches the members `at` only.
fn client_of(cluster: &EtcdCluster, at: &[usize]) -> LockClient {
    let endpoints: Vec<String> = at.iter().map(|&i| cluster.members()[i].url()).collect();
    let backend = EtcdBackend::builder(&endpoints.join(","))
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(Duration::from_secs(2))
        .build()
        .expect("backend");
    LockClient::builder(backend)
        .watchdog_lease(WATCHDOG)
        .build()
        .expect("client")
}

/// The leader is cut off from the other two members, its clients still reaching it: its
/// holder's renewals fail, the majority elects a leader of its own, and a client there gets
/// the lock only once the cut-off holder's lease is over as that holder counts it. Healed, the
/// cluster is whole again and the name is free after the new holder's release.
#[test]
fn a_holder_on_a_cut_off_leader_is_told_its_hold_is_lost_before_the_majority_grants_it() {
    let cluster = EtcdCluster::start_partitionable(3);
    let network = cluster.network().expect("its own network");
    let leader = cluster.await_leader(SETTLE).expect("a leader");
    let majority: Vec<usize> = (0..3).filter(|&at| at != leader).collect();
    let name = unique("partition-leader");

    let cut_off = client_of(&cluster, &[leader]);
    let holding = cut_off
        .lock(name.clone())
        .lock()
        .expect("lock on the leader");
    network.isolate(&[leader]).expect("cut the leader off");

    let other = client_of(&cluster, &majority);
    let taken = other
        .lock(name.clone())
        .try_lock_for(SETTLE)
        .expect("wait on the majority")
        .expect("the lock once the cut-off hold's lease ran out");
    let granted_at = Instant::now();
    assert!(
        holding.lease_deadline() <= granted_at,
        "the majority granted the lock {:?} before the cut-off holder's lease ended",
        holding.lease_deadline() - granted_at
    );
    assert!(holding.is_lost(), "the cut-off holder knows");

    network.heal().expect("heal");
    assert!(
        holding.unlock().is_err(),
        "a lost hold's release says it was lost"
    );
    taken.unlock().expect("release on the majority");
    let everyone = client_of(&cluster, &[0, 1, 2]);
    let again = everyone
        .lock(name)
        .try_lock_for(SETTLE)
        .expect("wait once healed")
        .expect("the name is free");
    again.unlock().expect("unlock");
}

/// A follower cut off from the other members (its clients still reaching it): a client that
/// knows every member goes on locking and unlocking. A call that meets the cut-off member may
/// fail, as unavailable and within its bounds (its request timeout ran out there); the lock
/// keeps changing hands, and no two of the client's threads ever hold it at once.
#[test]
fn a_client_of_every_member_rides_out_a_follower_cut_off() {
    let cluster = EtcdCluster::start_partitionable(3);
    let network = cluster.network().expect("its own network");
    let leader = cluster.await_leader(SETTLE).expect("a leader");
    let follower = (0..3).find(|&at| at != leader).expect("a follower");
    let client = client_of(&cluster, &[0, 1, 2]);
    let name = unique("partition-follower");
    let inside = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let until = Instant::now() + Duration::from_secs(8);
    // A call's bound: its wait, and its requests' timeouts on a loaded machine.
    let bounded = |started: Instant, what: &str| {
        assert!(
            started.elapsed() < SETTLE + Duration::from_secs(10),
            "{what} took {:?}",
            started.elapsed()
        );
    };
    thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let lock = client.lock(name.clone());
                while Instant::now() < until {
                    let started = Instant::now();
                    let guard = match lock.try_lock_for(SETTLE) {
                        Ok(Some(guard)) => guard,
                        Ok(None) => panic!("no lock within {SETTLE:?}"),
                        Err(error) => {
                            assert!(error.is_unavailable(), "{error}");
                            bounded(started, "a failed lock");
                            continue;
                        }
                    };
                    bounded(started, "a lock");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    let started = Instant::now();
                    if let Err(error) = guard.unlock() {
                        // Its hold ends with its lease; nobody else gets in before.
                        assert!(error.is_unavailable(), "{error}");
                    }
                    bounded(started, "an unlock");
                    done.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        thread::sleep(Duration::from_secs(1));
        network.isolate(&[follower]).expect("cut the follower off");
        thread::sleep(Duration::from_secs(4));
        network.heal().expect("heal");
    });
    assert!(done.into_inner() > 10, "the lock kept changing hands");
}
