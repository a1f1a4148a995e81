//! Clients of one server looping on one plain lock take turns: a client whose release other
//! clients were waiting for lets one of them have the lock before it takes it again. And what
//! a RedLock's release says of who was waiting, which the turns go by.
//!
//! Each client here has its own backend (its own connections and pub/sub), as a process would.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::sync::Mutex;

use std::time::Duration;

use dlocks::backend::{AcquireRequest, DistributedLock, LockRef, OwnerId, Release};
use dlocks::LockClient;
use support::redis_server::{RedLockEnv, RedisServer};

use crate::evalsha_calls;

/// Acquisitions in all, by every thread of every client.
const ACQUISITIONS: usize = 600;

/// The first acquisitions, left out of the counts: a client's first wait opens its pub/sub
/// connection, and until then the others cannot know it waits.
const WARM_UP: usize = 100;

/// Clients, each with `threads[i]` threads, lock and unlock one lock with nothing done in
/// between until `ACQUISITIONS` are taken; the client of each acquisition after the warm-up,
/// in order.
fn contend(threads: &[usize]) -> Vec<usize> {
    let server = RedisServer::start();
    let clients: Vec<LockClient> = threads
        .iter()
        .map(|_| LockClient::new(server.backend()))
        .collect();
    let order = Mutex::new(Vec::with_capacity(ACQUISITIONS));
    std::thread::scope(|s| {
        for (index, (client, &count)) in clients.iter().zip(threads).enumerate() {
            for _ in 0..count {
                let order = &order;
                s.spawn(move || {
                    let lock = client.lock("turns");
                    loop {
                        let guard = lock.lock().expect("lock");
                        let done = {
                            let mut order = order.lock().expect("order");
                            order.push(index);
                            order.len() >= ACQUISITIONS
                        };
                        guard.unlock().expect("unlock");
                        if done {
                            return;
                        }
                    }
                });
            }
        }
    });
    let mut order = order.into_inner().expect("order");
    order.truncate(ACQUISITIONS);
    order.split_off(WARM_UP)
}

/// The longest run of acquisitions by one client.
fn longest_run(order: &[usize]) -> usize {
    order
        .chunk_by(|a, b| a == b)
        .map(<[usize]>::len)
        .max()
        .unwrap_or(0)
}

/// The share of acquisitions by the client that had the lock just before.
fn retakes(order: &[usize]) -> f64 {
    let retakes = order.windows(2).filter(|pair| pair[0] == pair[1]).count();
    retakes as f64 / (order.len() - 1) as f64
}

fn share(order: &[usize], client: usize) -> f64 {
    order.iter().filter(|&&c| c == client).count() as f64 / order.len() as f64
}

/// Turns, not runs: without them the client that just released re-takes the lock most of the
/// time (its next acquire reaches the server before the other client has heard of the
/// release), dozens of times in a row.
fn assert_turns(order: &[usize]) {
    let run = longest_run(order);
    assert!(run <= 15, "one client took the lock {run} times in a row");
    let retakes = retakes(order);
    assert!(
        retakes <= 0.45,
        "{:.0} % of the acquisitions were re-takes",
        retakes * 100.0
    );
}

#[test]
fn two_clients_looping_on_a_lock_take_turns() {
    let order = contend(&[1, 1]);
    assert_turns(&order);
    for client in 0..2 {
        let share = share(&order, client);
        assert!(share >= 0.3, "client {client} had {share:.2} of the lock");
    }
}

/// A client with several threads does not pass the lock among them while another client
/// waits: its releases go through the server, where the other client hears them.
#[test]
fn a_client_with_several_threads_gives_other_clients_their_turn() {
    let order = contend(&[3, 1]);
    assert_turns(&order);
    let share = share(&order, 1);
    assert!(
        share >= 0.3,
        "the one-thread client had {share:.2} of the lock"
    );
}

/// A RedLock's release says other clients waited when another client listens on the lock's
/// channel on some node, and not when the only listener is the releasing client itself.
#[test]
fn a_red_lock_release_tells_whether_other_clients_waited() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let red_lock = RedLockEnv::red_lock(&servers);
    let owner = OwnerId::from_raw("turns:1");
    let lock = LockRef::reentrant("turns:red-lock");
    let release_after_acquire = || {
        let request = AcquireRequest::new(lock, &owner, Duration::from_secs(30));
        let acquired = red_lock.try_acquire(&request).expect("acquire");
        assert!(acquired.is_acquired());
        red_lock.release(lock, &owner).expect("release")
    };
    assert_eq!(release_after_acquire(), Release::Released, "nobody listens");

    // The releasing client's own waiters' subscription (on every node) is not another client.
    let own = red_lock.subscribe(lock, &owner).expect("subscribe");
    assert_eq!(release_after_acquire(), Release::Released, "only its own");

    // Another process waiting through one of the nodes.
    let mut other = servers[1].admin();
    let mut other = other.as_pubsub();
    other
        .subscribe("redisson_lock__channel:{turns:red-lock}")
        .expect("SUBSCRIBE");
    assert_eq!(release_after_acquire(), Release::ReleasedToOthers);
    drop(own);
}

/// Six clients, each with its own backend (as six processes), take one plain lock in turn, 30
/// times each, with 2 ms holds. A waiter asks the server again only once as many releases have
/// been announced as there were waiters marked before it: an acquisition costs its take, its
/// release, the refused first try of a client that asks again at once (behind the others'
/// marks), and one try a release early (the holder's release counts too). About four scripts
/// here; with every waiting client trying at each release, seven (2026-12-02).
#[test]
fn a_release_is_tried_by_the_first_marked_waiter_alone() {
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 30;
    let server = RedisServer::start();
    let name = support::conformance::unique("turns-tries");
    let clients: Vec<LockClient> = (0..CLIENTS)
        .map(|_| LockClient::new(server.backend()))
        .collect();
    let mut admin = server.admin();
    let before = evalsha_calls(&mut admin);
    std::thread::scope(|s| {
        for client in &clients {
            let lock = client.lock(name.clone());
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = lock.lock().expect("lock");
                    std::thread::sleep(Duration::from_millis(2));
                    guard.unlock().expect("unlock");
                }
            });
        }
    });
    let scripts = evalsha_calls(&mut admin) - before;
    let acquisitions = i64::try_from(CLIENTS * ROUNDS).expect("a small count");
    assert!(
        scripts <= acquisitions * 5,
        "{scripts} scripts run for {acquisitions} acquisitions"
    );
}
