//! A read hold's renewal and its release meet on the same rows (the name's row and the
//! reader's): each must take them in the same order, or PostgreSQL ends one of them as a
//! deadlock (and logs it): a release fails with `Unavailable`, or a renewal fails and its
//! lease runs out.

#![cfg(feature = "postgres")]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlock_test_support::postgres_server::PostgresServer;
use dlocks::{LockClientBuilder, LockError};

#[test]
fn read_releases_and_the_watchdogs_renewals_of_the_same_readers_never_deadlock() {
    let server = PostgresServer::start();
    // A short watchdog lease: the renewals (every third of it) run while the holds are taken
    // and released, on the same name and readers.
    let clients: Vec<_> = (0..3)
        .map(|_| {
            LockClientBuilder::new(Arc::new(server.backend()))
                .watchdog_lease(Duration::from_millis(300))
                .build()
                .expect("client")
        })
        .collect();
    let released = AtomicU32::new(0);
    let until = Instant::now() + Duration::from_secs(4);
    thread::scope(|s| {
        for client in &clients {
            for _ in 0..2 {
                let released = &released;
                s.spawn(move || {
                    let rw = client.read_write_lock("renew-vs-release");
                    while Instant::now() < until {
                        let guard = rw.read_lock().lock().expect("read");
                        thread::sleep(Duration::from_millis(5));
                        match guard.unlock() {
                            Ok(()) => {
                                released.fetch_add(1, Ordering::Relaxed);
                            }
                            // A client kept off the CPU for longer than the lease loses it:
                            // the machine's doing (a deadlock would be in the log below).
                            Err(LockError::LeaseLost { .. }) => {}
                            Err(error) => panic!("the release of a read hold: {error}"),
                        }
                    }
                });
            }
        }
    });
    assert!(released.load(Ordering::Relaxed) > 0);
    let log = server.log();
    assert!(
        !log.contains("deadlock detected"),
        "the server ended steps as deadlocked:\n{log}"
    );
}
