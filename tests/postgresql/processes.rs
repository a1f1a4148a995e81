//! Several OS processes on one PostgreSQL server: a killed holder's lock is freed by its lease,
//! and four processes of four threads incrementing a counter under one lock lose no update.
//!
//! The other processes are this test binary run again with `DLOCK_HELPER` set: the `helper`
//! test below then plays the role it names instead of returning at once.

#![cfg(feature = "postgres")]

use dlock_test_support as support;

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use dlocks::postgres::PostgresBackend;
use dlocks::LockClient;
use support::helper_process::{helper_role, Reaped};
use support::postgres_server::PostgresServer;

const THREADS: usize = 4;
const INCREMENTS_PER_THREAD: i64 = 20;

#[test]
fn helper() {
    let Some((role, url)) = helper_role() else {
        return; // Run as a normal test: nothing to do.
    };
    let client = LockClient::new(PostgresBackend::connect(&url).expect("helper connects"));
    match role.as_str() {
        "hold" => {
            // Take the lock with a fixed lease, say so, and wait to be killed.
            let guard = client
                .lock("procs:held")
                .lock_with_lease(Duration::from_secs(2))
                .expect("lock");
            println!("HOLDING");
            std::thread::sleep(Duration::from_secs(60));
            drop(guard);
        }
        "count" => {
            let threads: Vec<_> = (0..THREADS)
                .map(|_| {
                    let client = client.clone();
                    let url = url.clone();
                    std::thread::spawn(move || {
                        let mut counter =
                            postgres::Client::connect(&url, postgres::NoTls).expect("connect");
                        let lock = client.lock("procs:counter-lock");
                        for _ in 0..INCREMENTS_PER_THREAD {
                            let guard = lock.lock().expect("lock");
                            // A read and a separate write: only the lock keeps them together.
                            let value: i64 = counter
                                .query_one("SELECT value FROM counter", &[])
                                .expect("read")
                                .get(0);
                            counter
                                .execute("UPDATE counter SET value = $1", &[&(value + 1)])
                                .expect("write");
                            guard.unlock().expect("unlock");
                        }
                    })
                })
                .collect();
            for thread in threads {
                thread.join().expect("counting thread");
            }
            println!("DONE");
        }
        other => panic!("unknown helper role {other}"),
    }
}

#[test]
fn a_lock_held_by_a_killed_process_is_taken_after_its_lease() {
    let server = PostgresServer::start();
    let client = LockClient::new(server.backend());
    let mut holder = Reaped::spawn(module_path!(), "hold", &server.url());
    let stdout = holder.0.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let holding = lines.any(|line| line.is_ok_and(|line| line.contains("HOLDING")));
    assert!(holding, "the helper took the lock");

    let lock = client.lock("procs:held");
    assert!(
        lock.try_lock().expect("try").is_none(),
        "the other process holds it"
    );
    holder.0.kill().expect("kill -9 the holder");
    holder.0.wait().expect("reap");
    let started = Instant::now();
    let guard = lock
        .try_lock_for(Duration::from_secs(20))
        .expect("wait")
        .expect("taken after the lease");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "freed by the 2 s lease, took {:?}",
        started.elapsed()
    );
    guard.unlock().expect("unlock");
}

#[test]
fn four_processes_of_four_threads_lose_no_update() {
    let server = PostgresServer::start();
    server.backend(); // the schema, before the helpers race to it
    server.execute("CREATE TABLE counter (value bigint NOT NULL); INSERT INTO counter VALUES (0)");
    let helpers: Vec<Reaped> = (0..4)
        .map(|_| Reaped::spawn(module_path!(), "count", &server.url()))
        .collect();
    for mut helper in helpers {
        let status = helper.0.wait().expect("helper exits");
        assert!(status.success(), "a counting process failed: {status}");
    }
    let counter: i64 = server
        .admin()
        .query_one("SELECT value FROM counter", &[])
        .expect("read")
        .get(0);
    assert_eq!(
        counter,
        4 * THREADS as i64 * INCREMENTS_PER_THREAD,
        "every increment under the lock survived"
    );
}
