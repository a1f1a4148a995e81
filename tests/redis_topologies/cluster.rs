//! Redis Cluster: real `redis-server` processes made into a cluster with `redis-cli --cluster
//! create`. Locks live on the master of their slot; the watchdog renews locks of every master;
//! a slot moves while its locks are held and waited on; a master fails over under load; Redisson
//! (on Redis 7: sharded pub/sub) and dlock share locks.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::time::{Duration, Instant};

use dlocks::{LockClient, LockError};
use support::cluster::ClusterSetup;
use support::failover_load::keep_locking_through;
use support::redisson::Redisson;

fn client(setup: &ClusterSetup, lease: Duration) -> LockClient {
    let backend = setup
        .backend_builder()
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(2))
        .replica_sync_timeout(Duration::from_millis(500))
        .build()
        .expect("connect to the cluster");
    LockClient::builder(backend)
        .watchdog_lease(lease)
        .build()
        .expect("client")
}

/// Whether `node` has `key` (asked with KEYS, which answers for the node itself).
fn node_has(setup: &ClusterSetup, node: usize, key: &str) -> bool {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(key.replace('{', "\\{").replace('}', "\\}"))
        .query(&mut setup.nodes[node].admin())
        .expect("KEYS");
    !keys.is_empty()
}

/// Waits (bounded) until `node` has a sharded subscriber on `channel`: a waiter is listening.
fn await_shard_subscriber(setup: &ClusterSetup, node: usize, channel: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query(&mut setup.nodes[node].admin())
            .expect("PUBSUB SHARDNUMSUB");
        if reply.1 > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nobody subscribed {channel} on node {node}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Names, one per master, of the form `{tag}:suffix`.
fn one_name_per_master(setup: &ClusterSetup, suffix: &str) -> Vec<(String, usize)> {
    let mut names: Vec<(String, usize)> = Vec::new();
    for n in 0..10_000 {
        let name = format!("{{spread{n}}}:{suffix}");
        let master = setup.master_of_slot(setup.slot_of(&name));
        if !names.iter().any(|(_, other)| *other == master) {
            names.push((name, master));
        }
        if names.len() == setup.masters().len() {
            break;
        }
    }
    assert_eq!(names.len(), setup.masters().len());
    names
}

#[test]
fn locks_live_on_their_slots_master_and_the_watchdog_renews_every_master() {
    let setup = ClusterSetup::start(3, 0);
    let client = client(&setup, Duration::from_millis(900));
    let names = one_name_per_master(&setup, "held");
    let guards: Vec<_> = names
        .iter()
        .map(|(name, _)| client.lock(name).lock().expect("lock"))
        .collect();
    for (name, master) in &names {
        assert!(node_has(&setup, *master, name), "{name} is on its master");
    }
    // Several leases long: kept only by renewals on all three masters.
    let renewed = client.watchdog_stats().renewed;
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.watchdog_stats().renewed < renewed + 3 * 4 {
        assert!(Instant::now() < deadline, "the watchdog stopped renewing");
        std::thread::sleep(Duration::from_millis(50));
    }
    for ((name, _), guard) in names.iter().zip(guards) {
        assert!(!guard.is_lost(), "{name} kept");
        assert!(client
            .lock(name)
            .is_held_by_current_thread()
            .expect("status"));
        guard.unlock().expect("unlock");
    }
    assert_eq!(client.watchdog_stats().lost, 0);
}

#[test]
fn a_cluster_url_names_some_nodes_and_the_backend_finds_the_rest() {
    let setup = ClusterSetup::start(3, 0);
    // One node named: the backend learns the others' slots from it.
    let first = setup.urls()[0].replacen("redis://", "", 1);
    let url = format!("redis-cluster://{first}");
    let backend = dlocks::redis::RedisBackend::builder(&url)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .expect("the cluster the URL names");
    let client = LockClient::new(backend);
    let names = one_name_per_master(&setup, "by-url");
    for (name, master) in &names {
        let guard = client.lock(name).lock().expect("lock");
        assert!(node_has(&setup, *master, name), "{name} is on its master");
        guard.unlock().expect("unlock");
    }
    for bad in [
        "redis-cluster://".to_owned(),
        format!("redis-cluster://{first}/2"),
    ] {
        let error = dlocks::redis::RedisBackend::builder(&bad)
            .build()
            .expect_err("a Cluster URL without nodes, or naming a database");
        assert!(matches!(error, LockError::Config { .. }), "{error:?}");
        assert!(
            error.to_string().contains("redis-cluster://"),
            "the error shows the URL's form: {error}"
        );
    }
}

#[test]
fn a_name_whose_braces_split_its_keys_is_refused_with_a_clear_error() {
    let setup = ClusterSetup::start(3, 0);
    let client = client(&setup, Duration::from_secs(5));
    // `a}b` hashes whole, `redisson_lock_queue:{a}b}` by its tag `a`: two slots.
    let error = client.lock("a}b").lock().expect_err("refused");
    assert!(
        matches!(
            error,
            LockError::InvalidArgument {
                argument: "name",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("hash tag"), "{error}");
    // Nothing was taken.
    assert!(!node_has(
        &setup,
        setup.master_of_slot(setup.slot_of("a}b")),
        "a}b"
    ));
}

#[test]
fn held_and_waited_locks_survive_their_slot_moving_to_another_master() {
    let setup = ClusterSetup::start(3, 0);
    let holder = client(&setup, Duration::from_millis(1500));
    let waiter = client(&setup, Duration::from_secs(5));
    // Three locks in one slot: renewed by the watchdog, waited on (a 60 s lease, so only a
    // release wakes its waiter within its 20 s wait), released mid-migration.
    let (renewed, waited, released) = (
        "{reshard}:renewed",
        "{reshard}:waited",
        "{reshard}:released",
    );
    let slot = setup.slot_of(renewed);
    let source = setup.master_of_slot(slot);
    let target = setup.other_master(source);
    let renewed_guard = holder.lock(renewed).lock().expect("lock");
    let waited_guard = holder
        .lock(waited)
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    let released_guard = holder.lock(released).lock().expect("lock");
    let (done, got) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let guard = waiter
            .lock(waited)
            .try_lock_for(Duration::from_secs(20))
            .expect("wait");
        let _ = done.send(guard.is_some());
        drop(guard);
    });
    await_shard_subscriber(&setup, source, "redisson_lock__channel:{reshard}:waited");

    // Mid-migration: the keys are on the target, the slot not yet handed over; the cluster
    // answers TRYAGAIN / ASK meanwhile, and the release goes through once the move is done.
    let migration = setup.migrate(slot, target);
    migration.move_keys(100);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            // The migration window this test holds open (the fault), then the slot's hand-over.
            std::thread::sleep(Duration::from_millis(300));
            migration.finish();
        });
        released_guard
            .unlock()
            .expect("a release during the migration succeeds once the slot has moved");
    });

    assert!(
        node_has(&setup, target, renewed),
        "the hold moved with its slot"
    );
    // The watchdog keeps renewing it where it lives now.
    let before = holder.watchdog_stats().renewed;
    let deadline = Instant::now() + Duration::from_secs(20);
    while holder.watchdog_stats().renewed < before + 2 {
        assert!(Instant::now() < deadline, "no renewal after the move");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!renewed_guard.is_lost(), "no hold lost to the move");
    // The waiter listens on the slot's new master and is woken by the release there.
    await_shard_subscriber(&setup, target, "redisson_lock__channel:{reshard}:waited");
    waited_guard.unlock().expect("unlock after the move");
    assert!(
        got.recv().expect("the waiter's answer"),
        "the waiter was woken"
    );
    thread.join().expect("waiter");
    renewed_guard.unlock().expect("unlock");
    assert_eq!(holder.watchdog_stats().lost, 0);
}

#[test]
fn eight_threads_keep_locking_through_a_master_failover() {
    let mut setup = ClusterSetup::start(3, 1);
    let client = client(&setup, Duration::from_secs(3));
    let name = "{failover}:load";
    let slot = setup.slot_of(name);
    let master = setup.master_of_slot(slot);
    let mut promoted = None;
    let load = keep_locking_through(&client, name, || {
        setup.kill(master);
        promoted = Some(setup.await_failover(master, slot));
    });
    println!(
        "master {master} killed; replica {} promoted after {:?}; locks granted again {:?} after \
         the kill; {} acquisitions; {} errors: {:?}",
        promoted.expect("failed over"),
        load.failed_over,
        load.recovered,
        load.acquisitions,
        load.errors.len(),
        load.errors.iter().take(5).collect::<Vec<_>>()
    );
    load.assert_errors_are_actionable();
}

#[test]
fn a_waiter_is_woken_by_a_release_on_the_promoted_replica() {
    let mut setup = ClusterSetup::start(3, 1);
    let holder = client(&setup, Duration::from_secs(3));
    let waiter = client(&setup, Duration::from_secs(3));
    let name = "{promoted}:wake";
    let slot = setup.slot_of(name);
    let master = setup.master_of_slot(slot);
    // Acknowledged by the replica before it is granted: the promoted replica has it.
    let guard = holder
        .lock(name)
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    let (done, got) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let guard = waiter
            .lock(name)
            .try_lock_for(Duration::from_secs(40))
            .expect("wait");
        let _ = done.send(guard.is_some());
        drop(guard);
    });
    await_shard_subscriber(&setup, master, "redisson_lock__channel:{promoted}:wake");
    setup.kill(master);
    let promoted = setup.await_failover(master, slot);
    assert!(node_has(&setup, promoted, name), "the replica had the lock");
    // The waiter's subscription moved to the promoted replica.
    await_shard_subscriber(&setup, promoted, "redisson_lock__channel:{promoted}:wake");
    // The release finds the promoted replica by itself, even through a pool of the dead
    // master.
    guard.unlock().expect("unlock on the promoted replica");
    assert!(
        got.recv().expect("the waiter's answer"),
        "the waiter was woken"
    );
    thread.join().expect("waiter");
}

#[test]
fn redisson_and_dlock_share_locks_and_wake_each_other_on_the_cluster() {
    let setup = ClusterSetup::start(3, 0);
    let client = client(&setup, Duration::from_secs(5));
    let name = "shared:cluster";
    let owner_node = setup.master_of_slot(setup.slot_of(name));
    let mut redisson = Redisson::on_cluster(&setup.urls());
    assert_eq!(redisson.try_lock(name, Duration::from_secs(60)), None);
    let lock = client.lock(name);
    assert!(
        lock.try_lock().expect("try_lock").is_none(),
        "Redisson holds it"
    );
    // A dlock waiter is woken by Redisson's release (SPUBLISH), well before the 60 s lease ends.
    let waiter = {
        let client = client.clone();
        std::thread::spawn(move || {
            client
                .lock(name)
                .try_lock_for(Duration::from_secs(20))
                .expect("wait")
                .map(|guard| guard.unlock())
        })
    };
    await_shard_subscriber(
        &setup,
        owner_node,
        "redisson_lock__channel:{shared:cluster}",
    );
    assert_eq!(redisson.unlock(name), Some(1));
    waiter
        .join()
        .expect("waiter")
        .expect("woken by Redisson's release")
        .expect("unlock");

    // dlock's release is announced the way Redisson listens on Redis 7: sharded.
    let guard = lock.lock().expect("lock");
    assert!(redisson.try_lock(name, Duration::from_secs(60)).is_some());
    let mut listener = setup.nodes[owner_node].admin();
    listener
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    listener
        .send_packed_command(
            &redis::cmd("SSUBSCRIBE")
                .arg("redisson_lock__channel:{shared:cluster}")
                .get_packed_command(),
        )
        .expect("SSUBSCRIBE");
    let confirmed = listener.recv_response().expect("confirmation");
    assert!(format!("{confirmed:?}").contains("ssubscribe"));
    guard.unlock().expect("unlock");
    let message = listener.recv_response().expect("the release message");
    assert!(format!("{message:?}").contains("smessage"), "{message:?}");
    assert_eq!(redisson.try_lock(name, Duration::from_secs(60)), None);
    assert_eq!(redisson.unlock(name), Some(1));
}

/// One master that stops answering (paused) costs only the holds kept on it: the watchdog goes
/// on renewing the holds of the other masters, and reports only the silent master's holds lost,
/// at their deadline. (With `cluster-require-full-coverage no`: by default Redis itself stops
/// serving every slot once a master without a replica fails.)
#[test]
fn one_silent_master_loses_only_the_holds_it_keeps() {
    let setup = ClusterSetup::start(3, 0);
    for node in &setup.nodes {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query(&mut node.admin())
            .expect("CONFIG SET");
    }
    let lease = Duration::from_millis(1500);
    let backend = setup
        .backend_builder()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
        .build()
        .expect("connect to the cluster");
    let client = LockClient::builder(backend)
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let events = client.lease_events();
    let names = one_name_per_master(&setup, "silent");
    let guards: Vec<_> = names
        .iter()
        .map(|(name, _)| client.lock(name).lock().expect("lock"))
        .collect();
    let (silent_name, silent_master) = names[0].clone();
    setup.nodes[silent_master].pause();
    // The silent master's hold is told lost once its lease has run out unrenewed.
    let lost = loop {
        let event = events
            .recv_timeout(Duration::from_secs(20))
            .expect("the silent master's hold is reported lost");
        if matches!(event.change, dlocks::LeaseChange::Lost { .. }) {
            break event;
        }
    };
    assert_eq!(&*lost.name, silent_name.as_str(), "{lost:?}");
    // Two leases more: only renewals keep the others, and they go on.
    std::thread::sleep(lease * 2);
    setup.nodes[silent_master].resume();
    for ((name, _), guard) in names.iter().zip(&guards).skip(1) {
        assert!(
            !guard.is_lost(),
            "{name}, on a master that answers, was lost: {:?}",
            events.try_iter().collect::<Vec<_>>()
        );
    }
    let others_lost: Vec<_> = events
        .try_iter()
        .filter(|event| matches!(event.change, dlocks::LeaseChange::Lost { .. }))
        .collect();
    assert!(others_lost.is_empty(), "{others_lost:?}");
    assert!(guards[0].is_lost());
}

/// A silent master whose response timeout (2 s) is most of the watchdog lease (3 s) still
/// costs only its own holds: each master's renewal answer is applied as it comes, and the
/// silent one is waited for a third of the lease at most, so the next tick renews the other
/// masters' holds on time.
#[test]
fn a_silent_masters_response_timeout_costs_no_other_masters_hold() {
    let setup = ClusterSetup::start(3, 0);
    for node in &setup.nodes {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query(&mut node.admin())
            .expect("CONFIG SET");
    }
    let lease = Duration::from_secs(3);
    let client = client(&setup, lease);
    let events = client.lease_events();
    let names = one_name_per_master(&setup, "slow-timeout");
    let guards: Vec<_> = names
        .iter()
        .map(|(name, _)| client.lock(name).lock().expect("lock"))
        .collect();
    let (silent_name, silent_master) = names[0].clone();
    setup.nodes[silent_master].pause();
    std::thread::sleep(lease * 3);
    setup.nodes[silent_master].resume();
    for ((name, _), guard) in names.iter().zip(&guards).skip(1) {
        assert!(
            !guard.is_lost(),
            "{name}, on a master that answers, was lost: {:?}",
            events.try_iter().collect::<Vec<_>>()
        );
    }
    let lost: Vec<String> = events
        .try_iter()
        .filter(|event| matches!(event.change, dlocks::LeaseChange::Lost { .. }))
        .map(|event| event.name.to_string())
        .collect();
    assert_eq!(
        lost,
        [silent_name],
        "only the silent master's hold was lost"
    );
    assert!(guards[0].is_lost());
}
