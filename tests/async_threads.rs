//! Futures waiting for locks hold no thread: what the async surface starts, counted, on the
//! in-process backend (whose steps run in the futures' own polls).
//!
//! This file holds one test on purpose: it counts the threads of the whole test process, so no
//! other test may run beside it.

#![cfg(feature = "async")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dlock_test_support::threads::{threads, PeakThreads};
use dlocks::{LockClient, ManualClock, MemoryBackend};

/// The most threads the runs below may add to a process that has its runtime and client.
const EXTRA_THREADS: usize = 16;

/// The most threads ten thousand waiting futures may add: "a handful".
const WAITING_THREADS: usize = 4;

#[test]
fn thousands_of_tasks_and_waiting_futures_need_a_handful_of_threads() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // Time stands still: only releases move the waiters on, and the clock counts them asleep.
    let clock = ManualClock::new();
    let client = LockClient::new(MemoryBackend::with_clock(clock.clone()));
    let peak = PeakThreads::start();
    let baseline = threads();

    // 2,000 tasks on 4 workers, taking 4 locks: each a read, an `.await`, and a write under
    // the lock. Every update is kept.
    const TASKS: u64 = 2_000;
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
    eprintln!("2,000 tasks: {most} threads at the peak, {baseline} before");
    assert!(
        most <= baseline + EXTRA_THREADS,
        "{most} threads at the peak of 2,000 tasks, {baseline} before: {names}"
    );

    // 10,000 futures waiting on 100 names, held by owned guards.
    const NAMES: usize = 100;
    const WAITERS: usize = 10_000;
    let held: Vec<_> = (0..NAMES)
        .map(|name| {
            client
                .lock(format!("async-waiting:{name}"))
                .lock_owned()
                .expect("held")
        })
        .collect();
    peak.reset();
    let before = threads();
    let taken = Arc::new(AtomicU64::new(0));
    let waiters: Vec<_> = (0..WAITERS)
        .map(|waiter| {
            let lock = client.lock(format!("async-waiting:{}", waiter % NAMES));
            let taken = taken.clone();
            runtime.spawn(async move {
                let guard = lock.lock_async().await?;
                taken.fetch_add(1, Ordering::SeqCst);
                guard.unlock_async().await
            })
        })
        .collect();
    assert!(
        clock.wait_for_sleepers(WAITERS),
        "{} of {WAITERS} futures waiting",
        clock.sleepers()
    );
    let (most, names) = peak.peak();
    eprintln!("{WAITERS} waiting futures: {most} threads at the peak, {before} before");
    assert!(
        most <= before + WAITING_THREADS,
        "{most} threads with {WAITERS} futures waiting, {before} before: {names}"
    );
    assert_eq!(taken.load(Ordering::SeqCst), 0, "all held");
    drop(held);
    runtime.block_on(async {
        for waiter in waiters {
            waiter.await.expect("a waiter").expect("lock and unlock");
        }
    });
    assert_eq!(taken.load(Ordering::SeqCst), WAITERS as u64);
}
