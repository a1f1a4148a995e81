//! Who hears a fair lock's hand-off on PostgreSQL: the release tells the head waiter (its grant,
//! or its turn) on the channel of the waiter's client, so only that process's listener wakes,
//! not every process listening to the schema for other locks.

#![cfg(feature = "postgres")]

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::store_queue::await_queued;
use dlocks::postgres::DEFAULT_SCHEMA;
use dlocks::LockClient;
use postgres::fallible_iterator::FallibleIterator;

/// The waiting client's id, and its channel in schema `dlock` (docs/postgres.md): `dlock:` and
/// the first 40 hex digits of SHA-256 of `dlock`, a zero byte and the client id.
const WAITER_CLIENT: &str = "fair-wake-b";
const WAITER_CHANNEL: &str = "dlock:acc15e5bfceed32a1877d0c5a081cd0cab1f17e5";

/// Everything `listener` heard within `patience` of the first notification: (channel,
/// payload).
fn heard(listener: &mut postgres::Client, patience: Duration) -> Vec<(String, String)> {
    listener
        .notifications()
        .timeout_iter(patience)
        .map(|n| Ok((n.channel().to_owned(), n.payload().to_owned())))
        .collect()
        .expect("notifications")
}

#[test]
fn a_fair_release_tells_the_waiter_on_its_clients_channel_only() {
    let server = PostgresServer::start();
    let name = "fair-wake:head";
    let holder = LockClient::new(server.backend_builder().build().expect("backend"));
    let waiter = LockClient::builder(server.backend_builder().build().expect("backend"))
        .client_id(WAITER_CLIENT)
        .build()
        .expect("client");
    let held = holder.fair_lock(name).lock().expect("A holds");
    let (to_test, handed) = mpsc::channel();
    let waiting = {
        let fair = waiter.fair_lock(name);
        thread::spawn(move || {
            let guard = fair.try_lock_for(Duration::from_secs(30)).expect("wait");
            let _ = to_test.send(guard.is_some());
        })
    };
    let inspecting = server.backend_builder().build().expect("backend");
    assert!(await_queued(&inspecting, name, 1), "the backend inspects");
    // Two other processes: one listening to the schema's channel (as every dlock process
    // waiting on a plain lock does), one to the waiting client's.
    let (mut schema_listener, mut client_listener) = (server.admin(), server.admin());
    schema_listener
        .batch_execute(&format!("LISTEN \"{DEFAULT_SCHEMA}\""))
        .expect("LISTEN");
    client_listener
        .batch_execute(&format!("LISTEN \"{WAITER_CHANNEL}\""))
        .expect("LISTEN");

    held.unlock().expect("A lets go");
    assert!(
        handed
            .recv_timeout(Duration::from_secs(30))
            .expect("B's answer"),
        "B was handed the lock"
    );
    waiting.join().expect("waiter");

    let told = heard(&mut client_listener, Duration::from_secs(2));
    assert!(
        told.iter()
            .any(|(channel, payload)| channel == WAITER_CHANNEL && payload.starts_with('g')),
        "the grant went to the waiter's client's channel: {told:?}"
    );
    let overheard = heard(&mut schema_listener, Duration::from_millis(500));
    assert!(
        overheard
            .iter()
            .all(|(_, payload)| !payload.starts_with('g') && !payload.starts_with('w')),
        "the schema's channel carried a fair waiter's message: {overheard:?}"
    );
}
