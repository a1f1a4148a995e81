//! What a Redis backend leaves running once it is dropped: nothing.
//!
//! This file holds one test on purpose: it counts the threads of the whole test process, so no
//! other test may run beside it.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::time::{Duration, Instant};

use dlocks::LockClient;
use support::redis_server::RedisServer;

/// The threads of this process, as the kernel lists them.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task lists the process's threads")
        .count()
}

/// The names of this process's threads, counted by name, for failure messages.
fn thread_names() -> String {
    let mut names = std::collections::BTreeMap::<String, usize>::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        *names.entry(name.trim().to_owned()).or_default() += 1;
    }
    format!("{names:?}")
}

/// Polls the thread count (every 10 ms, at most `bound`) until it is at most `limit`; returns
/// the last count seen.
fn settle_to(limit: usize, bound: Duration) -> usize {
    let deadline = Instant::now() + bound;
    loop {
        let count = threads();
        if count <= limit || Instant::now() >= deadline {
            return count;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn dropped_clients_leave_no_thread_behind() {
    let server = RedisServer::start();
    // The holder lives through the whole test: its threads are part of the baseline.
    let holder = LockClient::new(server.backend());
    let busy = holder
        .lock("threads:busy")
        .lock()
        .expect("the holder takes its lock");
    let baseline = threads();

    for round in 0..30 {
        let client = LockClient::new(server.backend());
        // A lock taken and renewed (the watchdog's thread, the command pool's threads)...
        let guard = client
            .lock(format!("threads:{round}"))
            .lock()
            .expect("lock");
        // ...and a wait on a held one (the pub/sub connection's threads).
        let waited = client
            .lock("threads:busy")
            .try_lock_for(Duration::from_millis(20))
            .expect("a bounded wait");
        assert!(waited.is_none(), "the holder still holds it");
        guard.unlock().expect("unlock");
        drop(client);
    }

    // Dropping a client joins what it can at once; the pool's workers are told to stop and
    // end on their own: the count must come back to the baseline, within a bounded time.
    let settled = settle_to(baseline, Duration::from_secs(10));
    assert!(
        settled <= baseline,
        "{settled} threads after dropping 30 clients, {baseline} before: {}",
        thread_names()
    );
    drop(busy);
}
