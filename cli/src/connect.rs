//! The Redis backend and lock client a command uses.

use std::time::Duration;

use dlock::redis::RedisBackend;
use dlock::LockClient;

use crate::exit_code::Failure;

/// How long one read or write on a connection may take: a renewal that gets no answer fails
/// after this long (`run` counts on it to know how much of a lease is left when renewals fail).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// The scheme of a master behind Redis Sentinel:
/// `redis-sentinel://host:port[,host:port...]/<master name>`.
pub const SENTINEL_SCHEME: &str = "redis-sentinel://";

/// Connects to the server at `url` (or to the master the sentinels of a `redis-sentinel://`
/// URL name); an unreachable server exits with 69, a malformed URL with 2.
pub fn backend(url: &str) -> Result<RedisBackend, Failure> {
    let builder = match url.strip_prefix(SENTINEL_SCHEME) {
        Some(rest) => {
            let (hosts, master) = rest.split_once('/').unwrap_or((rest, ""));
            let sentinels: Vec<String> = hosts
                .split(',')
                .filter(|host| !host.is_empty())
                .map(|host| format!("redis://{host}"))
                .collect();
            if master.is_empty() || sentinels.is_empty() {
                return Err(Failure::new(
                    crate::exit_code::USAGE,
                    format!(
                        "a Sentinel URL is {SENTINEL_SCHEME}host:port[,host:port...]/<master name>, \
                         got {url:?}"
                    ),
                ));
            }
            RedisBackend::sentinel_builder(master, sentinels)
        }
        None => RedisBackend::builder(url),
    };
    builder
        .response_timeout(RESPONSE_TIMEOUT)
        .build()
        .map_err(|error| {
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
    LockClient::builder(backend)
        .watchdog_lease(lease)
        .client_id(client_id())
        .build()
        .map_err(|error| match error {
            // The watchdog lease is what `--lease` sets: name the flag, not the field.
            dlock::LockError::InvalidArgument {
                argument: "watchdog_lease",
                reason,
            } => Failure::new(
                crate::exit_code::USAGE,
                format!("invalid --lease: {reason}"),
            ),
            error => Failure::from(error),
        })
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
