//! Several OS processes on one server: a killed holder's lock is freed by its lease, and
//! processes of several threads incrementing a counter under one lock lose no update.
//!
//! The other processes are the test binary run again with `DLOCK_HELPER` set: the `helper`
//! test of the module that started them calls [`helper`], which then plays the role it names
//! instead of returning at once.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use super::ServerEnv;
use crate::helper_process::{helper_role, Reaped};

/// The body of a module's `helper` test: nothing in a normal run; in a helper process, the
/// role it was started for (`hold`: take the lock and wait to be killed; `count`: the threads
/// of [`ServerEnv::LOAD`] each incrementing the counter its number of times under one lock).
pub fn helper<E: ServerEnv>() {
    let (threads, increments) = (E::LOAD.threads, E::LOAD.increments);
    let Some((role, url)) = helper_role() else {
        return; // Run as a normal test: nothing to do.
    };
    let client = E::connect(&url);
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
            let threads: Vec<_> = (0..threads)
                .map(|_| {
                    let client = client.clone();
                    let url = url.clone();
                    std::thread::spawn(move || {
                        let mut counter = E::counter(&url);
                        let lock = client.lock("procs:counter-lock");
                        for _ in 0..increments {
                            let guard = lock.lock().expect("lock");
                            // A read and a separate write: only the lock keeps them together.
                            let value = counter.read();
                            counter.write(value + 1);
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

/// A process holding a lock on a 2 s lease is killed (`kill -9`): the lock is free once the
/// lease has run out, well before a waiter's 20 s bound. `module` is the calling module's
/// `module_path!()` (whose `helper` test calls [`helper`]).
pub fn a_lock_held_by_a_killed_process_is_taken_after_its_lease<E: ServerEnv>(module: &str) {
    let server = E::start();
    let client = server.client();
    let mut holder = Reaped::spawn(module, "hold", &server.url());
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
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "freed by the 2 s lease, took {:?}",
        started.elapsed()
    );
    guard.unlock().expect("unlock");
}

/// The processes of [`ServerEnv::LOAD`], of its threads each, increment a counter on the server
/// its number of times under one lock, with a read and a separate write: no update is lost.
/// `module` is the calling module's `module_path!()`, whose `helper` test calls [`helper`].
pub fn processes_of_threads_lose_no_update<E: ServerEnv>(module: &str) {
    let load = E::LOAD;
    let server = E::start();
    server.prepare_counter();
    let helpers: Vec<Reaped> = (0..load.processes)
        .map(|_| Reaped::spawn(module, "count", &server.url()))
        .collect();
    for mut helper in helpers {
        let status = helper.0.wait().expect("helper exits");
        assert!(status.success(), "a counting process failed: {status}");
    }
    let counter = E::counter(&server.url()).read();
    let expected =
        i64::try_from(load.processes * load.threads).expect("a small count") * load.increments;
    assert_eq!(counter, expected, "every increment under the lock survived");
}
