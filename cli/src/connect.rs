//! The Redis backend and lock client a command uses.

use std::time::Duration;

use dlock::redis::RedisBackend;
use dlock::LockClient;

use crate::exit_code::Failure;

/// Connects to the server at `url`; an unreachable server exits with 69, a malformed URL with 2.
pub fn backend(url: &str) -> Result<RedisBackend, Failure> {
    RedisBackend::builder(url).build().map_err(|error| {
        let failure = Failure::from(error);
        Failure::new(
            failure.code,
            format!("cannot use the Redis server: {}", failure.message),
        )
    })
}

/// A lock client whose owner ids say where they come from (`dlock-<host>-<pid>-<random>:<thread>`),
/// so `dlock status` on another machine shows who holds a lock.
pub fn client(backend: RedisBackend, lease: Duration) -> Result<LockClient, Failure> {
    Ok(LockClient::builder(backend)
        .watchdog_lease(lease)
        .client_id(client_id())
        .build()?)
}

/// `dlock-<host>-<pid>-<12 random hex digits>`: unique, and readable in `status`.
fn client_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|host| host.trim().replace([':', ' '], "_"))
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("dlock-{host}-{}-{}", std::process::id(), &random[..12])
}
