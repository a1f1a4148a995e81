//! Several OS processes on one server: a killed holder's lock is freed by its lease, and
//! 8 processes × 8 threads incrementing a counter under one lock lose no update.
//!
//! The other processes are this test binary run again with `DLOCK_HELPER` set: the `helper`
//! test below then plays the role it names instead of returning at once.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use dlocks::redis::RedisBackend;
use dlocks::LockClient;
use support::helper_process::{helper_role, Reaped};
use support::redis_server::RedisServer;

#[test]
fn helper() {
    let Some((role, url)) = helper_role() else {
        return; // Run as a normal test: nothing to do.
    };
    let client = LockClient::new(RedisBackend::connect(&url).expect("helper connects"));
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
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let client = client.clone();
                    let url = url.clone();
                    std::thread::spawn(move || {
                        let counter = redis::Client::open(url).expect("client");
                        let mut con = counter.get_connection().expect("connection");
                        let lock = client.lock("procs:counter-lock");
                        for _ in 0..INCREMENTS_PER_THREAD {
                            let guard = lock.lock().expect("lock");
                            let value: i64 = redis::cmd("GET")
                                .arg("procs:counter")
                                .query::<Option<i64>>(&mut con)
                                .expect("GET")
                                .unwrap_or(0);
                            let () = redis::cmd("SET")
                                .arg("procs:counter")
                                .arg(value + 1)
                                .query(&mut con)
                                .expect("SET");
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

const INCREMENTS_PER_THREAD: i64 = 25;

#[test]
fn a_lock_held_by_a_killed_process_is_taken_after_its_lease() {
    let server = RedisServer::start();
    let mut holder = Reaped::spawn(module_path!(), "hold", &server.url());
    let stdout = holder.0.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let holding = lines.any(|line| line.is_ok_and(|line| line.contains("HOLDING")));
    assert!(holding, "the helper took the lock");

    let client = LockClient::new(server.backend());
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
    assert!(started.elapsed() < Duration::from_secs(20));
    guard.unlock().expect("unlock");
}

#[test]
fn eight_processes_of_eight_threads_lose_no_update() {
    let server = RedisServer::start();
    let helpers: Vec<Reaped> = (0..8)
        .map(|_| Reaped::spawn(module_path!(), "count", &server.url()))
        .collect();
    for mut helper in helpers {
        let status = helper.0.wait().expect("helper exits");
        assert!(status.success(), "a counting process failed: {status}");
    }
    let mut admin = server.admin();
    let counter: i64 = redis::cmd("GET")
        .arg("procs:counter")
        .query(&mut admin)
        .expect("GET");
    assert_eq!(
        counter,
        8 * 8 * INCREMENTS_PER_THREAD,
        "every increment under the lock survived"
    );
}
