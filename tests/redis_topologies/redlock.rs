//! RedLock over real `redis-server` processes: every pattern of nodes up, killed and paused
//! (SIGSTOP) on 3 and on 5 nodes; a node restarted while a lock is held; bad node sets.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::redis::{RedLockBackend, RedisBackend};
use dlocks::{LockClient, LockClientBuilder, LockError};
use support::redis_server::RedisServer;

const NODE_TIMEOUT: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Node {
    Up,
    Down,
    Paused,
}

/// A client on a RedLock over `servers`, with short node and connection timeouts so steps
/// that meet dead or paused nodes end quickly.
fn client(servers: &[RedisServer]) -> LockClient {
    let nodes = servers
        .iter()
        .map(|server| {
            server
                .backend_builder()
                .response_timeout(Duration::from_millis(500))
                .connect_timeout(Duration::from_millis(500))
                .checkout_timeout(Duration::from_millis(500))
                .build()
                .expect("node")
        })
        .collect();
    let red_lock = RedLockBackend::builder(nodes)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .expect("RedLock");
    LockClient::new(red_lock)
}

/// Whether any node holds the lock `name` (its hash), once every node has caught up.
fn leftovers(servers: &[RedisServer], name: &str) -> Vec<usize> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let held: Vec<usize> = servers
            .iter()
            .enumerate()
            .filter(|(_, server)| {
                let mut admin = server.admin();
                redis::cmd("EXISTS")
                    .arg(name)
                    .query::<i64>(&mut admin)
                    .expect("EXISTS")
                    == 1
            })
            .map(|(index, _)| index)
            .collect();
        // A node that was paused runs what was queued for it (an acquire and its give-back)
        // as soon as it resumes: give it a moment.
        if held.is_empty() || Instant::now() >= deadline {
            return held;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every pattern of `n` nodes up, down (killed) and paused: a lock is granted exactly when a
/// majority is up, the grant excludes a second owner, a refusal is quick and clean, and no
/// node keeps any part of the lock afterwards.
fn quorum_matrix(n: usize) {
    let mut servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
    let quorum = n / 2 + 1;
    // Grouped by the set of killed nodes, so each node is restarted once per group.
    for down_mask in 0u32..(1 << n) {
        let down: Vec<usize> = (0..n).filter(|i| down_mask & (1 << i) != 0).collect();
        let up_or_paused: Vec<usize> = (0..n).filter(|i| !down.contains(i)).collect();
        // The clients are made while every node answers (a backend checks its server when
        // it is made); they meet the faults afterwards.
        let a = client(&servers);
        let b = client(&servers);
        for index in &down {
            servers[*index].kill();
        }
        for paused_mask in 0u32..(1 << up_or_paused.len()) {
            let paused: Vec<usize> = up_or_paused
                .iter()
                .enumerate()
                .filter(|(bit, _)| paused_mask & (1 << bit) != 0)
                .map(|(_, index)| *index)
                .collect();
            let pattern: Vec<Node> = (0..n)
                .map(|i| {
                    if down.contains(&i) {
                        Node::Down
                    } else if paused.contains(&i) {
                        Node::Paused
                    } else {
                        Node::Up
                    }
                })
                .collect();
            let up = pattern.iter().filter(|node| **node == Node::Up).count();
            let name = format!("matrix:{n}:{down_mask}:{paused_mask}");
            for index in &paused {
                servers[*index].pause();
            }
            let started = Instant::now();
            let got = a
                .lock(name.clone())
                .try_lock_with_lease(Duration::ZERO, Duration::from_secs(20));
            let took = started.elapsed();
            if up >= quorum {
                let guard = got
                    .unwrap_or_else(|e| panic!("{pattern:?}: a majority is up, got {e}"))
                    .unwrap_or_else(|| panic!("{pattern:?}: a majority is up, lock refused"));
                // Refused: told the lock is held, or (when an up node answers later than the
                // node timeout on a loaded machine) that no majority answered; never granted.
                let second = b.lock(name.clone()).try_lock();
                assert!(
                    match &second {
                        Ok(None) => true,
                        Err(error) => error.is_unavailable(),
                        Ok(Some(_)) => false,
                    },
                    "{pattern:?}: a second owner must be refused, got {second:?}"
                );
                guard
                    .unlock()
                    .unwrap_or_else(|e| panic!("{pattern:?}: unlock: {e}"));
            } else {
                match got {
                    Err(error) => assert!(error.is_unavailable(), "{pattern:?}: {error:?}"),
                    Ok(held) => panic!("{pattern:?}: no majority, yet {:?}", held.is_some()),
                }
                // Fails fast: within the node timeout (twice, for the lost round's give-back),
                // with room for a loaded machine.
                assert!(
                    took < NODE_TIMEOUT * 4 + Duration::from_millis(500),
                    "{pattern:?}: refused after {took:?}"
                );
            }
            for index in &paused {
                servers[*index].resume();
            }
            let alive: Vec<usize> = (0..n).filter(|i| !down.contains(i)).collect();
            let alive_servers: Vec<&RedisServer> = alive.iter().map(|i| &servers[*i]).collect();
            let left: Vec<usize> = alive_servers
                .iter()
                .zip(&alive)
                .filter(|(server, _)| !leftovers(std::slice::from_ref(server), &name).is_empty())
                .map(|(_, index)| *index)
                .collect();
            assert!(
                left.is_empty(),
                "{pattern:?}: nodes {left:?} kept a part of the lock"
            );
        }
        drop((a, b));
        for index in &down {
            servers[*index].restart();
        }
    }
}

#[test]
fn three_nodes_every_pattern_of_up_down_and_paused() {
    quorum_matrix(3);
}

#[test]
fn five_nodes_every_pattern_of_up_down_and_paused() {
    quorum_matrix(5);
}

#[test]
fn a_node_restarted_empty_while_a_lock_is_held_behaves_as_documented() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let lease = Duration::from_millis(1500);
    let holder = LockClientBuilder::new(Arc::new(
        RedLockBackend::builder(servers.iter().map(RedisServer::backend).collect())
            .node_timeout(Duration::from_millis(300))
            .build()
            .expect("RedLock"),
    ))
    .watchdog_lease(lease)
    .build()
    .expect("client");
    let events = holder.lease_events();
    let guard = holder.lock("restart").lock().expect("held on all three");
    let other = client(&servers);

    // One node restarted empty: the holder still has a majority; nobody else gets in.
    servers[0].restart();
    assert!(
        other.lock("restart").try_lock().expect("try").is_none(),
        "2 of 3 still hold it"
    );

    // A second node restarted empty at once (no delay): the holder is on one node only, and
    // another owner can take the lock on the two restarted ones before the holder's lease has
    // ended: the unsafety the docs describe (delay restarts by a lease, or use fencing).
    servers[1].restart();
    let intruder = other
        .lock("restart")
        .try_lock_with_lease(Duration::ZERO, Duration::from_secs(30))
        .expect("try")
        .expect("a majority of empty nodes grants it");
    assert!(!guard.is_lost(), "the holder cannot know yet");
    // The holder finds out at its next renewal: no majority renews it.
    let event = events
        .recv_timeout(lease * 3)
        .expect("a lease event at the next renewal");
    assert!(
        matches!(event.change, dlocks::LeaseChange::Lost { .. }),
        "{:?}",
        event.change
    );
    assert!(guard.is_lost());
    drop(intruder);
}

#[test]
fn a_red_lock_refuses_too_few_nodes_and_the_same_server_twice() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let backends = || servers.iter().map(RedisServer::backend).collect::<Vec<_>>();
    let config = |result: Result<RedLockBackend, LockError>| match result {
        Err(LockError::Config { message, .. }) => message,
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let message = config(RedLockBackend::new(backends()[..2].to_vec()));
    assert!(message.contains("at least 3"), "{message}");
    let message = config(RedLockBackend::new(vec![]));
    assert!(message.contains("got 0"), "{message}");

    let mut twice = backends();
    twice[2] = servers[0].backend();
    let message = config(RedLockBackend::new(twice));
    assert!(message.contains("same server"), "{message}");

    // The same server behind another address (`localhost`) is found by its run_id.
    let mut disguised = backends();
    disguised[2] = RedisBackend::connect(&format!("redis://localhost:{}/", servers[0].port()))
        .expect("the same server by name");
    let message = config(RedLockBackend::new(disguised));
    assert!(message.contains("same server"), "{message}");

    // An even count works (with a warning in the log).
    let fourth = RedisServer::start();
    let mut four = backends();
    four.push(fourth.backend());
    let red_lock = RedLockBackend::new(four).expect("4 nodes");
    assert_eq!(red_lock.quorum(), 3);
    let client = LockClient::new(red_lock);
    client
        .lock("four")
        .lock()
        .expect("lock")
        .unlock()
        .expect("unlock");

    let bad = RedLockBackend::builder(backends())
        .node_timeout(Duration::ZERO)
        .build();
    config(bad);
}

/// More threads than any node has connections: each thread's step is congestion on the pools,
/// never a reason to fail. (A step that kept one node's connection while waiting for another
/// node's pool would deadlock with a thread doing the opposite until a checkout timed out,
/// and report the node as not answering.)
#[test]
fn threads_outnumbering_every_pool_all_lock_and_unlock() {
    const THREADS: usize = 8;
    const PAIRS: usize = 100;
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let nodes = servers
        .iter()
        .map(|server| {
            server
                .backend_builder()
                .pool_size(1)
                .checkout_timeout(Duration::from_millis(500))
                .build()
                .expect("node")
        })
        .collect();
    let red_lock = RedLockBackend::builder(nodes)
        .node_timeout(Duration::from_secs(2))
        .build()
        .expect("RedLock");
    let client = LockClient::new(red_lock);
    let failures: Vec<String> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|thread| {
                let client = &client;
                s.spawn(move || {
                    let lock = client.lock(format!("crowded-{thread}"));
                    let mut failures = Vec::new();
                    for _ in 0..PAIRS {
                        match lock.lock().map(|guard| guard.unlock()) {
                            Ok(Ok(())) => {}
                            Ok(Err(error)) | Err(error) => failures.push(error.to_string()),
                        }
                    }
                    failures
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|thread| thread.join().expect("thread"))
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        failures.first()
    );
}
