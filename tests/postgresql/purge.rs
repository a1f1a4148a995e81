//! `purge()`, a DBA's clean-up, deletes what ran out (dead readers, waiters, marks) and the
//! names' rows left with nothing: it meets the releases of the same holds on the same rows,
//! and must take them in the order the releases do, or PostgreSQL ends one of them as a
//! deadlock (a release failing with `Unavailable`, or the DBA's purge failing).

#![cfg(feature = "postgres")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use dlock_test_support::postgres_server::PostgresServer;
use dlocks::{LockClient, LockError};

#[test]
fn purge_never_deadlocks_with_the_releases_of_holds_that_ran_out() {
    let server = PostgresServer::start();
    let client = LockClient::new(server.backend());
    let until = Instant::now() + Duration::from_secs(4);
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        // Each reader its own name: a reader whose lease ran out is the name's only one, and
        // purge deletes its row and then the name's row, while the release takes them the
        // other way round.
        let readers: Vec<_> = (0..4)
            .map(|n| {
                let client = &client;
                s.spawn(move || {
                    let rw = client.read_write_lock(format!("purged-{n}"));
                    let mut releases = 0u32;
                    while Instant::now() < until {
                        let guard = rw
                            .read_lock()
                            .lock_with_lease(Duration::from_millis(1))
                            .expect("read");
                        thread::sleep(Duration::from_millis(2));
                        match guard.unlock() {
                            // Its lease ran out: the release says so, whether or not purge
                            // deleted the reader first.
                            Ok(()) | Err(LockError::LeaseLost { .. }) => releases += 1,
                            Err(error) => panic!("the release of a read hold failed: {error}"),
                        }
                    }
                    releases
                })
            })
            .collect();
        let purging = s.spawn(|| {
            let mut dba = server.admin();
            let mut purges = 0u32;
            while !done.load(Ordering::Relaxed) {
                dba.query_one("SELECT dlock.purge()", &[])
                    .unwrap_or_else(|error| panic!("purge failed: {error:?}"));
                purges += 1;
            }
            purges
        });
        let results: Vec<_> = readers.into_iter().map(|reader| reader.join()).collect();
        done.store(true, Ordering::Relaxed);
        let purges = purging.join();
        for result in results {
            assert!(result.expect("reader") > 0);
        }
        assert!(purges.expect("purge") > 0);
    });
}
