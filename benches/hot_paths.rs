//! criterion benches of the hot paths, so a regression shows up as a change in these numbers:
//! `cargo bench -p dlock-bench --bench hot_paths`. The Redis ones run against a `redis-server` this bench
//! starts on a free loopback port.

#![allow(missing_docs)] // criterion_group! generates an undocumented public function

use dlock_test_support as support;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use dlocks::{LockClient, MemoryBackend};

use support::redis_server::RedisServer;

fn memory(c: &mut Criterion) {
    let client = LockClient::new(MemoryBackend::new());
    let lock = client.lock("bench:hot");
    c.bench_function("memory: lock + unlock", |b| {
        b.iter(|| drop(lock.lock().expect("lock")))
    });
    c.bench_function("memory: lock_with_lease + unlock", |b| {
        b.iter(|| drop(lock.lock_with_lease(Duration::from_secs(10)).expect("lock")))
    });
    let outer = lock.lock().expect("outer");
    c.bench_function("memory: reentrant lock + unlock", |b| {
        b.iter(|| drop(lock.lock().expect("reentrant")))
    });
    drop(outer);
    let other = LockClient::new(MemoryBackend::new());
    let held = other.lock("bench:held");
    let _guard = held.lock().expect("held");
    let contender = other.lock("bench:held");
    let failed_try = std::thread::scope(|s| {
        s.spawn(|| {
            let mut group = Vec::new();
            for _ in 0..1000 {
                let start = std::time::Instant::now();
                assert!(contender.try_lock().expect("try").is_none());
                group.push(start.elapsed());
            }
            group
        })
        .join()
        .unwrap_or_default()
    });
    let mean = failed_try.iter().sum::<Duration>() / failed_try.len().max(1) as u32;
    println!("memory: failed try_lock on a held lock, mean of 1000: {mean:?}");
}

fn redis(c: &mut Criterion) {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let lock = client.lock("bench:hot:redis");
    let mut group = c.benchmark_group("redis");
    group.sample_size(50);
    group.bench_function("lock + unlock", |b| {
        b.iter(|| lock.lock().expect("lock").unlock().expect("unlock"))
    });
    group.bench_function("lock_with_lease + unlock", |b| {
        b.iter(|| {
            lock.lock_with_lease(Duration::from_secs(10))
                .expect("lock")
                .unlock()
                .expect("unlock")
        })
    });
    let outer = lock.lock().expect("outer");
    group.bench_function("reentrant lock + unlock", |b| {
        b.iter(|| drop(lock.lock().expect("reentrant")))
    });
    drop(outer);
    group.finish();
}

criterion_group!(benches, memory, redis);
criterion_main!(benches);
