//! Eight threads locking and unlocking one lock while a test fails the server under them:
//! when locks are granted again, and which errors callers saw meanwhile.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::{LockClient, LockError};
use parking_lot::Mutex;

/// What the load saw around the fault.
pub struct LoadReport {
    /// From the fault until locks were granted again (the first of 20 acquisitions after
    /// `fail` returned).
    pub recovered: Duration,
    /// How long `fail` took (killing the server and waiting for the failover).
    pub failed_over: Duration,
    pub acquisitions: usize,
    /// Each error a caller saw, described by [`describe`].
    pub errors: Vec<String>,
}

/// Runs the load on `name`, calls `fail` once it is going, and stops once locks have been
/// granted again for a while (bounded: 30 s after `fail` returned).
pub fn keep_locking_through(client: &LockClient, name: &str, fail: impl FnOnce()) -> LoadReport {
    let stop = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let acquired_at: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (client, stop, counter) = (client.clone(), stop.clone(), counter.clone());
            let (acquired_at, errors) = (acquired_at.clone(), errors.clone());
            let name = name.to_owned();
            std::thread::spawn(move || {
                let lock = client.lock(name);
                while !stop.load(Ordering::SeqCst) {
                    match lock.try_lock_for(Duration::from_secs(2)) {
                        Ok(Some(guard)) => {
                            acquired_at.lock().push(Instant::now());
                            // A separate load and store: a second holder would lose updates.
                            let seen = counter.load(Ordering::SeqCst);
                            std::thread::yield_now();
                            counter.store(seen + 1, Ordering::SeqCst);
                            if let Err(error) = guard.unlock() {
                                errors.lock().push(describe(&error));
                            }
                        }
                        Ok(None) => {}
                        Err(error) => {
                            errors.lock().push(describe(&error));
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while acquired_at.lock().len() < 50 {
        assert!(Instant::now() < deadline, "no load before the fault");
        std::thread::sleep(Duration::from_millis(20));
    }
    let failed_at = Instant::now();
    fail();
    let failed_over = failed_at.elapsed();
    let deadline = Instant::now() + Duration::from_secs(30);
    let recovered = loop {
        let after: Vec<Instant> = acquired_at
            .lock()
            .iter()
            .copied()
            .filter(|at| *at > failed_at + failed_over)
            .collect();
        if after.len() >= 20 {
            break after[0].duration_since(failed_at);
        }
        assert!(
            Instant::now() < deadline,
            "no locks granted after the failover"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.join().expect("no worker panicked");
    }
    let acquisitions = acquired_at.lock().len();
    let errors = std::mem::take(&mut *errors.lock());
    LoadReport {
        recovered,
        failed_over,
        acquisitions,
        errors,
    }
}

impl LoadReport {
    /// Every error is one a caller can act on: the backend is unavailable (or a lease was
    /// lost with the old master), never a protocol error or a panic.
    pub fn assert_errors_are_actionable(&self) {
        assert!(
            self.errors
                .iter()
                .all(|error| error.starts_with("unavailable") || error.starts_with("lost")),
            "{:?}",
            self.errors
        );
    }
}

/// An error, prefixed with what a caller would do about it.
pub fn describe(error: &LockError) -> String {
    if error.is_unavailable() {
        format!("unavailable: {error}")
    } else if error.is_not_held() {
        format!("lost: {error}")
    } else {
        format!("other: {error}")
    }
}
