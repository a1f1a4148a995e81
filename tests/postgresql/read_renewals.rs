//! A read hold's renewal and its release meet on the same rows (the name's row and the
//! reader's): each must take them in the same order, or PostgreSQL ends one of them as a
//! deadlock, and a release fails with `Unavailable`.

#![cfg(feature = "postgres")]

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlock_test_support::postgres_server::PostgresServer;
use dlocks::LockClientBuilder;

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
    let until = Instant::now() + Duration::from_secs(4);
    thread::scope(|s| {
        for client in &clients {
            for _ in 0..2 {
                s.spawn(move || {
                    let rw = client.read_write_lock("renew-vs-release");
                    let mut rounds = 0u32;
                    while Instant::now() < until {
                        let guard = rw.read_lock().lock().expect("read");
                        thread::sleep(Duration::from_millis(5));
                        guard.unlock().expect("the release of a read hold");
                        rounds += 1;
                    }
                    assert!(rounds > 0);
                });
            }
        }
    });
}
