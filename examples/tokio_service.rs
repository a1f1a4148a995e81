//! dlock from an async (tokio) service: owned guards taken through `spawn_blocking`, held across
//! `.await`s, released from whichever worker thread the task ends on; waits that never block the
//! runtime's threads.
//!
//! ```text
//! cargo run --example tokio_service                       # in-process memory backend
//! cargo run --example tokio_service -- --redis redis://127.0.0.1:6379
//! ```
//!
//! What not to do: take a thread-bound guard (`lock.lock()`, a `LockGuard`) inside a task and
//! keep it across an `.await`. The task may resume on another worker thread, and the hold
//! belongs to the thread that took it (reentrancy and release are per thread), so `LockGuard`
//! is not `Send`: `tokio::spawn` refuses such a future at compile time. Calling the blocking
//! `lock()` directly in async code compiles, but parks a runtime worker for the whole wait.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;
use dlocks::{Lock, LockClient, MemoryBackend, OwnedLockGuard};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Takes `lock` as an owned hold without blocking the runtime: the wait runs on tokio's
/// blocking pool, and the guard, being `Send`, comes back to the task.
async fn lock_owned_within(lock: Lock, wait: Duration) -> Result<Option<OwnedLockGuard>, Error> {
    Ok(tokio::task::spawn_blocking(move || lock.try_lock_owned_for(wait)).await??)
}

/// Releases an owned hold off the runtime's threads (a release is one store round trip).
async fn unlock(guard: OwnedLockGuard) -> Result<(), Error> {
    Ok(tokio::task::spawn_blocking(move || guard.unlock()).await??)
}

/// One request: read-modify-write of an account's balance, with an `.await` in the middle
/// (a call to another service, say), under the account's lock.
async fn handle_request(
    client: LockClient,
    account: u64,
    balance: Arc<AtomicU64>,
) -> Result<bool, Error> {
    let lock = client.lock(format!("tokio-example:account:{account}"));
    let Some(guard) = lock_owned_within(lock, Duration::from_secs(5)).await? else {
        return Ok(false); // busy for 5 s: the caller can retry or give up
    };
    let read = balance.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2)).await; // other tasks run meanwhile
    if guard.is_lost() {
        // The lease ended while this task was away (the store was unreachable): another
        // holder may be writing. Do not write.
        return Err(format!("{}: lease lost while away, not writing", guard.name()).into());
    }
    balance.store(read + 1, Ordering::SeqCst);
    unlock(guard).await?;
    Ok(true)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let backend: Arc<dyn DistributedLock> = match redis_url() {
        #[cfg(feature = "redis")]
        Some(url) => Arc::new(dlocks::redis::RedisBackend::connect(&url)?),
        #[cfg(not(feature = "redis"))]
        Some(_) => return Err("built without the `redis` feature".into()),
        None => Arc::new(MemoryBackend::new()),
    };
    let client = LockClient::new(backend);

    // 200 requests over 4 accounts, all in flight at once on a 2-thread runtime: each
    // account's requests take turns, and no update is lost.
    const ACCOUNTS: u64 = 4;
    const REQUESTS: u64 = 200;
    let balances: Vec<Arc<AtomicU64>> = (0..ACCOUNTS).map(|_| Arc::default()).collect();
    let started = Instant::now();
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let account = i % ACCOUNTS;
            tokio::spawn(handle_request(
                client.clone(),
                account,
                balances[account as usize].clone(),
            ))
        })
        .collect();
    let mut served = 0;
    for task in tasks {
        if task.await?? {
            served += 1;
        }
    }
    let total: u64 = balances.iter().map(|b| b.load(Ordering::SeqCst)).sum();
    println!(
        "{served} of {REQUESTS} requests served in {:?}; balances {:?} (sum {total})",
        started.elapsed(),
        balances
            .iter()
            .map(|b| b.load(Ordering::SeqCst))
            .collect::<Vec<_>>()
    );
    if total != served {
        return Err(format!("lost updates: {served} served, {total} counted").into());
    }
    Ok(())
}

/// `--redis URL` or `REDIS_URL`, if given.
fn redis_url() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--redis" {
            return args.next();
        }
    }
    std::env::var("REDIS_URL").ok()
}
