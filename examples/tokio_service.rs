//! dlock in an async (tokio) service, through the async surface (`--features async`): 2,000
//! requests in flight at once over four accounts on a 2-thread runtime. Each handler takes its
//! account's lock with `try_lock_for_async` (a waiting request holds no thread), keeps the
//! guard across `.await`s, and lets it go however the handler ends: at the end of the
//! handler, by an early `?` return, or because the request was cancelled (its client went
//! away, and the server dropped the handler's future). No update is lost, nothing stays
//! locked, and the runtime's threads never block on the store.
//!
//! ```text
//! cargo run --example tokio_service --features async                  # in-process memory backend
//! cargo run --example tokio_service --features async -- --redis redis://127.0.0.1:6379
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;
use dlocks::{LockClient, MemoryBackend};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// An account: its balance, and how many deposits were written (each one a read, an `.await`
/// and a write under the account's lock: a lost update would leave the balance short).
#[derive(Default)]
struct Account {
    balance: AtomicU64,
    deposits: AtomicU64,
}

/// What a request got.
enum Response {
    Deposited,
    Busy,
}

/// The handler of `POST /accounts/{id}/deposit`, as an axum or hyper handler would be written.
async fn deposit(
    client: LockClient,
    id: u64,
    request: u64,
    account: Arc<Account>,
) -> Result<Response, Error> {
    let lock = client.lock(format!("tokio-example:account:{id}"));
    let Some(guard) = lock.try_lock_for_async(Duration::from_secs(5)).await? else {
        return Ok(Response::Busy); // busy for 5 s: the client can retry
    };
    let read = account.balance.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1)).await; // a call to another service, say
    if request % 50 == 3 {
        // A check that fails after the lock was taken: the early return drops the guard,
        // which hands its release to the client's own threads (never blocking this one).
        return Err(format!("request {request}: refused at balance {read}").into());
    }
    if guard.is_lost() {
        // The lease ended while this task was away (the store was unreachable for a whole
        // lease): another holder may be writing. Do not write.
        return Err(format!("{}: lease lost while away, not writing", guard.name()).into());
    }
    account.balance.store(read + 1, Ordering::SeqCst);
    account.deposits.fetch_add(1, Ordering::SeqCst);
    guard.unlock_async().await?;
    Ok(Response::Deposited)
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

    const ACCOUNTS: u64 = 4;
    const REQUESTS: u64 = 2_000;
    let accounts: Vec<Arc<Account>> = (0..ACCOUNTS).map(|_| Arc::default()).collect();
    let started = Instant::now();
    let requests: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let id = i % ACCOUNTS;
            let handler = deposit(client.clone(), id, i, accounts[id as usize].clone());
            tokio::spawn(async move {
                if (i / ACCOUNTS) % 10 == 7 {
                    // One request in ten: its client goes away after a moment, and the server
                    // drops the handler's future wherever it is (waiting, or holding the lock).
                    let gone_after = Duration::from_micros(i * 37 % 3_000);
                    tokio::time::timeout(gone_after, handler).await.ok()
                } else {
                    Some(handler.await)
                }
            })
        })
        .collect();
    let (mut deposited, mut busy, mut refused, mut cancelled) = (0, 0, 0, 0);
    for request in requests {
        match request.await? {
            Some(Ok(Response::Deposited)) => deposited += 1,
            Some(Ok(Response::Busy)) => busy += 1,
            Some(Err(_)) => refused += 1,
            None => cancelled += 1,
        }
    }
    let elapsed = started.elapsed();
    let balances: Vec<u64> = accounts
        .iter()
        .map(|a| a.balance.load(Ordering::SeqCst))
        .collect();
    let written: u64 = accounts
        .iter()
        .map(|a| a.deposits.load(Ordering::SeqCst))
        .sum();
    println!(
        "{REQUESTS} requests in {elapsed:?}: {deposited} deposited, {refused} refused (early \
         return), {cancelled} cancelled, {busy} busy; balances {balances:?}"
    );
    let total: u64 = balances.iter().sum();
    if total != written {
        return Err(format!("lost updates: {written} written, {total} counted").into());
    }
    // Nothing stays locked: every account is free for the next request at once.
    for id in 0..ACCOUNTS {
        let lock = client.lock(format!("tokio-example:account:{id}"));
        match lock.try_lock_for_async(Duration::from_secs(1)).await? {
            Some(guard) => guard.unlock_async().await?,
            None => return Err(format!("account {id} still locked").into()),
        }
    }
    println!("every account free again; no update lost");
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
