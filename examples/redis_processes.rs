//! Several OS processes contending for one lock on Redis.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example redis_processes [-- PROCESSES ROUNDS]
//! ```
//!
//! The program starts PROCESSES copies of itself (default 4); each takes the lock
//! `demo:processes` ROUNDS times (default 3), holds it for a moment, and prints when it got it
//! and when it let go. The lines never overlap: while one process is between "got" and
//! "released", every other one waits (woken by Redis pub/sub when the lock is released).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dlocks::redis::RedisBackend;
use dlocks::LockClient;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--worker") {
        let id = args.get(2).cloned().unwrap_or_default();
        let rounds = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(3);
        return worker(&url, &id, rounds);
    }
    let processes: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(4);
    let rounds: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(3);
    // Fail early, with a clear message, if Redis is not there.
    RedisBackend::connect(&url)?;
    println!("{processes} processes × {rounds} rounds on lock \"demo:processes\" at {url}");

    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for id in 0..processes {
        children.push(
            Command::new(&exe)
                .args(["--worker", &format!("p{id}"), &rounds.to_string()])
                .stdin(Stdio::null())
                .spawn()?,
        );
    }
    let mut failed = 0;
    for mut child in children {
        if !child.wait()?.success() {
            failed += 1;
        }
    }
    if failed > 0 {
        return Err(format!("{failed} worker processes failed").into());
    }
    println!("all processes done");
    Ok(())
}

fn worker(url: &str, id: &str, rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    let client = LockClient::new(RedisBackend::connect(url)?);
    let lock = client.lock("demo:processes");
    let pid = std::process::id();
    for round in 1..=rounds {
        let asked = Instant::now();
        let guard = lock.lock()?;
        println!(
            "{} {id} (pid {pid}) got the lock, round {round}, after waiting {:?}",
            clock(),
            asked.elapsed()
        );
        std::thread::sleep(Duration::from_millis(150));
        println!("{} {id} (pid {pid}) released it", clock());
        guard.unlock()?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Wall-clock seconds with milliseconds, to compare lines printed by different processes.
fn clock() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:03}", now.as_secs() % 1000, now.subsec_millis())
}
