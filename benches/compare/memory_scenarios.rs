//! Scenario 7: the memory backend next to `parking_lot::ReentrantMutex`.

use std::time::Duration;

use dlocks::{LockClient, MemoryBackend};
use parking_lot::ReentrantMutex;

use crate::stats::{ops_per_second, time_each, Summary};

pub fn uncontended(iterations: usize) -> (Summary, Summary) {
    let client = LockClient::new(MemoryBackend::new());
    let lock = client.lock("bench:memory");
    let dlock = time_each(1000, iterations, || {
        drop(lock.lock().expect("lock"));
    });
    let mutex = ReentrantMutex::new(());
    let parking = time_each(1000, iterations, || {
        drop(mutex.lock());
    });
    (dlock, parking)
}

/// Eight threads on one lock: pairs per second, dlock memory then `ReentrantMutex`.
pub fn contended(threads: usize, run_for: Duration) -> (f64, f64) {
    let client = LockClient::new(MemoryBackend::new());
    let dlock = ops_per_second(threads, run_for, |_| {
        let lock = client.lock("bench:memory-contended");
        move || drop(lock.lock().expect("lock"))
    });
    let mutex = ReentrantMutex::new(());
    let parking = ops_per_second(threads, run_for, |_| || drop(mutex.lock()));
    (dlock, parking)
}
