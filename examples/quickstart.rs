//! A tour of dlock: contending threads, reentrancy, a bounded wait, a lease running out, and the
//! watchdog keeping a long hold alive.
//!
//! ```text
//! cargo run --example quickstart                          # in-process memory backend
//! cargo run --example quickstart -- --backend redis://127.0.0.1:6379
//! cargo run --example quickstart --features postgres -- --backend postgres://postgres@127.0.0.1/postgres
//! cargo run --example quickstart --features etcd -- --backend etcd://127.0.0.1:2379
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example quickstart
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;
use dlocks::{LockClient, LockClientBuilder, LockError, MemoryBackend};

fn main() {
    if let Err(error) = run() {
        eprintln!("quickstart failed: {error}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), LockError> {
    let backend = choose_backend()?;
    // A short watchdog lease so the demo shows renewals within a few seconds.
    let watchdog_lease = Duration::from_millis(500);
    let client = LockClientBuilder::new(backend.clone())
        .watchdog_lease(watchdog_lease)
        .build()?;
    let run_id = uuid_suffix();
    let name = |what: &str| format!("quickstart:{what}:{run_id}");

    // 1. Threads contending for one lock.
    println!("\n1. Eight threads each add 1 to a shared counter 50 times, under one lock.");
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    thread::scope(|s| {
        for _ in 0..8 {
            let lock = client.lock(name("counter"));
            let counter = counter.clone();
            s.spawn(move || -> Result<(), LockError> {
                for _ in 0..50 {
                    let _guard = lock.lock()?;
                    // Read, then write: safe only because the lock is held.
                    let value = counter.load(Ordering::Relaxed);
                    counter.store(value + 1, Ordering::Relaxed);
                }
                Ok(())
            });
        }
    });
    println!(
        "   counter = {} (expected 400), in {:.1?}: no update was lost.",
        counter.load(Ordering::Relaxed),
        started.elapsed()
    );

    // 2. Reentrancy.
    println!("\n2. Reentrancy: the same thread takes the lock twice.");
    let orders = client.lock(name("orders"));
    let outer = orders.lock()?;
    let inner = orders.lock()?;
    println!("   hold count = {}", orders.hold_count()?);
    drop(inner);
    println!(
        "   after one release: still locked = {}",
        orders.is_locked()?
    );
    drop(outer);
    println!(
        "   after the last release: locked = {}",
        orders.is_locked()?
    );

    // 3. A bounded wait that times out.
    println!("\n3. Another client waits at most 200 ms for a lock held elsewhere.");
    let other = LockClient::new(backend.clone()); // a second client, as if in another process
    let held = client.lock(name("report")).lock()?;
    let waited = Instant::now();
    let attempt = other
        .lock(name("report"))
        .try_lock_for(Duration::from_millis(200))?;
    println!(
        "   try_lock_for(200 ms) -> {} after {:.0?}",
        if attempt.is_some() {
            "acquired"
        } else {
            "None (timed out)"
        },
        waited.elapsed()
    );
    drop(held);

    // 4. A fixed lease running out.
    println!("\n4. A lock taken with a 300 ms lease and never released.");
    let leased = client
        .lock(name("lease"))
        .lock_with_lease(Duration::from_millis(300))?;
    thread::sleep(Duration::from_millis(400));
    println!("   after 400 ms: guard.is_lost() = {}", leased.is_lost());
    let taken = other.lock(name("lease")).try_lock()?;
    println!("   another client takes it: {}", taken.is_some());
    match leased.unlock() {
        Ok(()) => println!("   the late unlock succeeded (unexpected)"),
        Err(error) => println!("   the late unlock reports: {error}"),
    }
    drop(taken);

    // 5. The watchdog keeping a long hold alive.
    println!(
        "\n5. A lock taken without a lease, held for four {:?} watchdog leases.",
        watchdog_lease
    );
    let job = client.lock(name("job"));
    let guard = job.lock()?;
    thread::sleep(watchdog_lease * 4);
    let stats = client.watchdog_stats();
    println!(
        "   still held: {}, lost: {}, renewals so far: {} in {} batches (one per tick)",
        job.is_held_by_current_thread()?,
        guard.is_lost(),
        stats.renewed,
        stats.batches
    );
    match guard.unlock() {
        Ok(()) => println!("   released; locked = {}", job.is_locked()?),
        // Only when the renewal thread was starved of CPU for most of a lease.
        Err(error) => println!("   the unlock reports: {error}"),
    }
    println!("\nDone.");
    Ok(())
}

/// The memory backend unless `--backend URL` (or `--redis URL`, `REDIS_URL`) names a store.
fn choose_backend() -> Result<Arc<dyn DistributedLock>, LockError> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|arg| arg == name)
            .map(|i| args.get(i + 1).cloned().unwrap_or_default())
    };
    let url = flag("--backend")
        .or_else(|| flag("--redis"))
        .or_else(|| std::env::var("REDIS_URL").ok());
    match url {
        None => {
            println!(
                "Backend: in-process memory (pass --backend URL: redis://, postgres:// or \
                 etcd://, or set REDIS_URL)"
            );
            Ok(Arc::new(MemoryBackend::new()))
        }
        Some(url) if url.starts_with("postgres") => postgres_backend(&url),
        Some(url) if url.starts_with("etcd") || url.starts_with("http") => etcd_backend(&url),
        Some(url) => redis_backend(&url),
    }
}

#[cfg(feature = "redis")]
fn redis_backend(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    println!(
        "Backend: Redis at {}",
        dlocks::backend::redact_url(url, &["password"])
    );
    Ok(Arc::new(dlocks::redis::RedisBackend::connect(url)?))
}

#[cfg(not(feature = "redis"))]
fn redis_backend(_url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    Err(LockError::config(
        "this build has no Redis support (feature `redis` is off)",
    ))
}

#[cfg(feature = "postgres")]
fn postgres_backend(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    println!(
        "Backend: PostgreSQL at {}",
        dlocks::backend::redact_url(url, &["password"])
    );
    Ok(Arc::new(dlocks::postgres::PostgresBackend::connect(url)?))
}

#[cfg(not(feature = "postgres"))]
fn postgres_backend(_url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    Err(LockError::config(
        "this build has no PostgreSQL support: run with --features postgres",
    ))
}

#[cfg(feature = "etcd")]
fn etcd_backend(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    println!(
        "Backend: etcd at {}",
        dlocks::backend::redact_url(url, &["password"])
    );
    Ok(Arc::new(dlocks::etcd::EtcdBackend::connect(url)?))
}

#[cfg(not(feature = "etcd"))]
fn etcd_backend(_url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    Err(LockError::config(
        "this build has no etcd support: run with --features etcd",
    ))
}

fn uuid_suffix() -> String {
    format!("{:x}", std::process::id())
}
