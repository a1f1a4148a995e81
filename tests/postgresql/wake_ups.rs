//! Who hears a lock's hand-off on PostgreSQL: a fair lock's release tells the head waiter (its
//! grant, or its turn), and a plain lock's the client of the waiter marked first, on the channel
//! of that client, so only that process's listener wakes, not every process listening to the
//! schema, nor the processes of the waiters whose turn it is not.

#![cfg(feature = "postgres")]

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::store_queue::await_queued;
use dlocks::postgres::DEFAULT_SCHEMA;
use dlocks::{LockClient, OwnedLockGuard};
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

/// How many waiters of `name`'s plain lock the store has marked (`lock_waiters`).
fn marked(admin: &mut postgres::Client, name: &str) -> i64 {
    admin
        .query_one(
            &format!("SELECT count(*) FROM \"{DEFAULT_SCHEMA}\".lock_waiters WHERE name = $1"),
            &[&name],
        )
        .expect("count the marks")
        .get(0)
}

/// Waits (30 s at most) until `count` waiters of `name`'s plain lock are marked.
fn await_marked(admin: &mut postgres::Client, name: &str, count: i64) {
    for _ in 0..3000 {
        if marked(admin, name) >= count {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("{count} waiters of {name} were not marked within 30 s");
}

/// A plain lock's waiter on its own client: its guard, once it holds, sent to the test.
fn plain_waiter(
    server: &PostgresServer,
    client_id: &str,
    name: &str,
) -> mpsc::Receiver<Option<OwnedLockGuard>> {
    let client = LockClient::builder(server.backend_builder().build().expect("backend"))
        .client_id(client_id)
        .build()
        .expect("client");
    let lock = client.lock(name);
    let (to_test, held) = mpsc::channel();
    thread::spawn(move || {
        let guard = lock
            .try_lock_owned_for(Duration::from_secs(30))
            .expect("wait");
        let _ = to_test.send(guard);
    });
    held
}

/// A plain lock's release tells the waiter marked first alone, on its client's channel: the
/// waiter behind it would be refused by its turn, and is told only when the first lets go.
#[test]
fn a_plain_release_tells_the_first_marked_waiter_on_its_clients_channel_only() {
    let server = PostgresServer::start();
    let name = "plain-wake:first";
    // The backend makes the schema.
    let holder = LockClient::new(server.backend_builder().build().expect("backend"));
    let mut admin = server.admin();
    let channel_of = |admin: &mut postgres::Client, client: &str| -> String {
        admin
            .query_one(
                &format!("SELECT \"{DEFAULT_SCHEMA}\"._client_channel($1)"),
                &[&format!("{client}:1")],
            )
            .expect("a client's channel")
            .get(0)
    };
    assert_eq!(channel_of(&mut admin, WAITER_CLIENT), WAITER_CHANNEL);
    let second_channel = channel_of(&mut admin, "plain-wake-c");
    let held = holder.lock(name).lock().expect("A holds");
    let first = plain_waiter(&server, WAITER_CLIENT, name);
    await_marked(&mut admin, name, 1);
    let second = plain_waiter(&server, "plain-wake-c", name);
    await_marked(&mut admin, name, 2);
    let listen = |channel: &str| {
        let mut listener = server.admin();
        listener
            .batch_execute(&format!("LISTEN \"{channel}\""))
            .expect("LISTEN");
        listener
    };
    let mut schema_listener = listen(DEFAULT_SCHEMA);
    let mut first_listener = listen(WAITER_CHANNEL);
    let mut second_listener = listen(&second_channel);

    held.unlock().expect("A lets go");
    let first_guard = first
        .recv_timeout(Duration::from_secs(30))
        .expect("the first waiter's answer")
        .expect("the first waiter holds");
    let told = heard(&mut first_listener, Duration::from_secs(2));
    assert!(
        told.iter()
            .any(|(channel, payload)| channel == WAITER_CHANNEL && payload == &format!("r{name}")),
        "the release went to the first waiter's client's channel: {told:?}"
    );
    let overheard = heard(&mut second_listener, Duration::from_millis(500));
    assert!(
        overheard.is_empty(),
        "the waiter behind was told: {overheard:?}"
    );
    let overheard = heard(&mut schema_listener, Duration::from_millis(500));
    assert!(
        overheard.iter().all(|(_, payload)| !payload.contains(name)),
        "the schema's channel carried the release: {overheard:?}"
    );

    first_guard.unlock().expect("the first waiter lets go");
    let second_guard = second
        .recv_timeout(Duration::from_secs(30))
        .expect("the second waiter's answer")
        .expect("the second waiter holds");
    let told = heard(&mut second_listener, Duration::from_secs(2));
    assert!(
        told.iter()
            .any(|(_, payload)| payload == &format!("r{name}")),
        "the next release went to the second waiter's client's channel: {told:?}"
    );
    second_guard.unlock().expect("the second waiter lets go");
}
