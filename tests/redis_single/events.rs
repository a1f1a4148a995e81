//! Lease events on Redis under real faults: the server restarted empty, paused past the lease,
//! paused briefly, and a force unlock from another process.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::crossbeam_channel::Receiver;
use dlocks::{LeaseChange, LeaseEvent, LockClient, LockClientBuilder};
use support::redis_server::RedisServer;

/// Events for `name` until one of them is a loss (or `within` has passed), as short labels.
fn events_until_loss(events: &Receiver<LeaseEvent>, name: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    while let Ok(event) = events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if &*event.name != name {
            continue;
        }
        let (label, done) = match event.change {
            LeaseChange::Lost { reason } => (format!("lost: {reason:?}"), true),
            LeaseChange::RenewalFailed { .. } => ("renewal failed".to_owned(), false),
            LeaseChange::RenewalRecovered { .. } => ("renewal recovered".to_owned(), false),
            other => (format!("{other:?}"), false),
        };
        seen.push(label);
        if done {
            break;
        }
    }
    seen
}

fn client(server: &RedisServer, lease: Duration) -> LockClient {
    let backend = server
        .backend_builder()
        .response_timeout(Duration::from_millis(200))
        .checkout_timeout(Duration::from_millis(400))
        .build()
        .expect("backend");
    LockClientBuilder::new(Arc::new(backend))
        .watchdog_lease(lease)
        .build()
        .expect("client")
}

#[test]
fn a_server_restarted_empty_is_reported_as_the_lock_gone() {
    let mut server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let client = client(&server, lease);
    let events = client.lease_events();
    let guard = client.lock("events:restart").lock().expect("lock");
    server.restart();
    let seen = events_until_loss(&events, "events:restart", lease * 3);
    assert_eq!(
        seen.last().map(String::as_str),
        Some("lost: Gone"),
        "{seen:?}"
    );
    assert!(guard.is_lost());
}

#[test]
fn a_server_paused_past_the_lease_is_reported_failing_then_unreachable() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(900);
    let client = client(&server, lease);
    let events = client.lease_events();
    let guard = client.lock("events:paused").lock().expect("lock");
    server.pause();
    let seen = events_until_loss(&events, "events:paused", lease * 4);
    server.resume();
    assert_eq!(
        seen,
        ["renewal failed", "lost: Unreachable"],
        "warned first, lost when the lease ran out"
    );
    assert!(guard.is_lost());
    assert!(guard.unlock().expect_err("lost").is_not_held());
}

#[test]
fn a_short_pause_is_reported_and_so_is_the_recovery() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1800);
    let client = client(&server, lease);
    let events = client.lease_events();
    let guard = client.lock("events:blip").lock().expect("lock");
    // Paused across a tick (every 600 ms) but well within the lease.
    server.pause();
    std::thread::sleep(Duration::from_millis(900));
    server.resume();
    let deadline = Instant::now() + lease * 2;
    let mut seen = Vec::new();
    while let Ok(event) = events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        match event.change {
            LeaseChange::RenewalFailed { .. } => seen.push("renewal failed"),
            LeaseChange::RenewalRecovered { .. } => {
                seen.push("renewal recovered");
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["renewal failed", "renewal recovered"]);
    assert!(!guard.is_lost());
    guard.unlock().expect("still held, released normally");
}

#[test]
fn a_force_unlock_from_another_process_is_reported() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let client = client(&server, lease);
    let events = client.lease_events();
    let guard = client.lock("events:forced").lock().expect("lock");
    let other = LockClient::new(server.backend());
    assert!(other.lock("events:forced").force_unlock().expect("force"));
    let seen = events_until_loss(&events, "events:forced", lease * 2);
    // Redis cannot tell a force unlock from an expiry: the key is just gone.
    assert_eq!(seen, ["lost: Gone"]);
    assert!(guard.is_lost());
}
