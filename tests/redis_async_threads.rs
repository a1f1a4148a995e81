//! Futures on Redis: their steps run on the client's few threads, and waiting ones hold none.
//!
//! This file holds one test on purpose: it counts the threads of the whole test process, so no
//! other test may run beside it.

#![cfg(all(feature = "redis", feature = "async"))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::threads::{threads, PeakThreads};
use dlocks::LockClient;

/// The most threads the tasks may add to a process that has its runtime, backend and client.
const EXTRA_THREADS: usize = 16;

#[test]
fn six_hundred_tasks_on_redis_need_a_few_threads() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let client = LockClient::new(server.backend());
    let peak = PeakThreads::start();
    let baseline = threads();

    // 600 tasks on 4 workers, taking 4 locks: each a read, an `.await`, and a write under the
    // lock. Every update is kept.
    const TASKS: u64 = 600;
    let counters: Vec<Arc<AtomicU64>> = (0..4).map(|_| Arc::default()).collect();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let lock = client.lock(format!("async-threads:{}", task % 4));
                let counter = counters[(task % 4) as usize].clone();
                tokio::spawn(async move {
                    let guard = lock.lock_async().await?;
                    let read = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(read + 1, Ordering::SeqCst);
                    guard.unlock_async().await
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("a task").expect("lock and unlock");
        }
    });
    for counter in &counters {
        assert_eq!(counter.load(Ordering::SeqCst), TASKS / 4, "no update lost");
    }
    let (most, names) = peak.peak();
    eprintln!("600 tasks on Redis: {most} threads at the peak, {baseline} before: {names}");
    assert!(
        most <= baseline + EXTRA_THREADS,
        "{most} threads at the peak of 600 tasks, {baseline} before: {names}"
    );
}
