//! A store that refuses stale writes, protected by a fenced lock.
//!
//! A lease lock alone cannot stop a holder that paused past its lease (a long GC, SIGSTOP, swap)
//! from writing after the next holder has: when it wakes, it still believes it holds the lock.
//! The fenced lock gives every hold a token, strictly increasing per name; the store remembers
//! the highest token it has accepted and refuses any write carrying a lower one. Here the first
//! holder stalls past its lease, a second holder takes the lock and writes, and the first
//! holder's late write is refused.
//!
//! ```text
//! cargo run --example fenced_store                          # in-process memory backend
//! cargo run --example fenced_store -- --redis redis://127.0.0.1:6379
//! ```

use std::fmt;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::{LockClient, LockError, MemoryBackend};

/// The resource the lock protects: a value, and the highest fencing token that wrote it.
///
/// In a real system this is the database or service being written; the rule it must keep is
/// the one in [`FencedStore::write_if_newer`], checked and applied atomically (one SQL
/// statement with `WHERE token < $new`, a compare-and-set, a Lua script).
#[derive(Default)]
struct FencedStore {
    state: Mutex<Stored>,
}

#[derive(Default, Clone, Debug)]
struct Stored {
    value: String,
    token: u64,
}

/// A write refused because a later holder of the lock has already written.
#[derive(Debug)]
struct StaleToken {
    offered: u64,
    seen: u64,
}

impl fmt::Display for StaleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "token {} is stale: the store has accepted token {}",
            self.offered, self.seen
        )
    }
}

impl FencedStore {
    /// Writes `value` when `token` is at least the highest token seen, in one atomic step.
    ///
    /// Equal tokens are accepted: one hold may write several times.
    fn write_if_newer(&self, token: u64, value: &str) -> Result<(), StaleToken> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if token < state.token {
            return Err(StaleToken {
                offered: token,
                seen: state.token,
            });
        }
        state.token = token;
        state.value = value.to_owned();
        Ok(())
    }

    fn read(&self) -> Stored {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn main() {
    if let Err(error) = run() {
        eprintln!("fenced_store failed: {error}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), LockError> {
    let backend = choose_backend()?;
    let name = format!("fenced_store:ledger:{}", std::process::id());
    let store = FencedStore::default();
    // Two clients, as if in two processes.
    let (slow, fast) = (
        LockClient::new(backend.clone()),
        LockClient::new(backend.clone()),
    );
    let lease = Duration::from_millis(300);

    println!("1. The slow worker takes the lock with a {lease:?} lease, then stalls.");
    let slow_guard = slow.fenced_lock(&name).lock_with_lease(lease)?;
    let slow_token = slow_guard.token();
    println!("   slow worker holds token {slow_token}");

    thread::scope(|s| -> Result<(), LockError> {
        let fast_worker = s.spawn(|| -> Result<u64, LockError> {
            // Waits until the slow worker's lease runs out.
            let guard = fast.fenced_lock(&name).lock()?;
            let token = guard.token();
            match store.write_if_newer(token, "written by the fast worker") {
                Ok(()) => println!("2. The fast worker got token {token} and wrote."),
                Err(refused) => println!("2. The fast worker's write was refused: {refused}"),
            }
            guard.unlock()?;
            Ok(token)
        });
        // The stall: longer than the lease, so the lock passes to the fast worker meanwhile.
        thread::sleep(lease * 3);
        let fast_token = fast_worker
            .join()
            .map_err(|_| LockError::config("the fast worker panicked"))??;
        println!(
            "3. The slow worker wakes; its guard reports lost = {}.",
            slow_guard.is_lost()
        );
        match store.write_if_newer(slow_token, "written by the slow worker, too late") {
            Ok(()) => println!("   its late write was ACCEPTED: the store is not fenced"),
            Err(refused) => println!("   its late write was refused: {refused}"),
        }
        assert!(fast_token > slow_token, "tokens increase with every hold");
        Ok(())
    })?;
    // Releasing a hold that already expired reports it; nothing is left held either way.
    match slow_guard.unlock() {
        Ok(()) => println!("   (the slow worker's hold was still there and is now released)"),
        Err(error) => println!("   unlocking the expired hold reports: {error}"),
    }

    let stored = store.read();
    println!(
        "\nThe store holds {:?} from token {}: the late write did not overwrite it.",
        stored.value, stored.token
    );
    Ok(())
}

fn choose_backend() -> Result<Arc<dyn DistributedLock>, LockError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = match args.as_slice() {
        [] => std::env::var("REDIS_URL").ok(),
        [flag, url] if flag == "--redis" => Some(url.clone()),
        _ => {
            return Err(LockError::invalid(
                "arguments",
                "expected nothing, or --redis <url> (e.g. --redis redis://127.0.0.1:6379)",
            ))
        }
    };
    match url {
        None => {
            println!("backend: in-process memory store\n");
            Ok(Arc::new(MemoryBackend::new()))
        }
        Some(url) => redis_backend(&url),
    }
}

#[cfg(feature = "redis")]
fn redis_backend(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    println!("backend: Redis at {url}\n");
    Ok(Arc::new(dlocks::redis::RedisBackend::connect(url)?))
}

#[cfg(not(feature = "redis"))]
fn redis_backend(_url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    Err(LockError::config(
        "this build has no Redis support (feature `redis` is off)",
    ))
}
