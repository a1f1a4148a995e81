//! The backend a command uses, by its URL's scheme, and the lock client on it.

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::postgres::PostgresBackend;
use dlocks::redis::RedisBackend;
use dlocks::LockClient;

use crate::exit_code::Failure;

/// How long one read or write on a connection (one statement on PostgreSQL) may take: a
/// renewal that gets no answer fails after this long (`run` counts on it to know how much of a
/// lease is left when renewals fail).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// The scheme of a master behind Redis Sentinel:
/// `redis-sentinel://host:port[,host:port...]/<master name>`.
pub const SENTINEL_SCHEME: &str = "redis-sentinel://";

/// The schemes of PostgreSQL URLs.
pub const POSTGRES_SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// A connected backend.
pub enum Backend {
    /// A Redis server, or a master behind Sentinel.
    Redis(RedisBackend),
    /// A PostgreSQL database.
    Postgres(PostgresBackend),
}

impl Backend {
    /// The backend for a lock client.
    pub fn shared(self) -> Arc<dyn DistributedLock> {
        match self {
            Backend::Redis(backend) => Arc::new(backend),
            Backend::Postgres(backend) => Arc::new(backend),
        }
    }
}

/// Connects to the backend `url` names by its scheme: PostgreSQL for `postgres://` and
/// `postgresql://`, Redis otherwise (the master the sentinels name, for `redis-sentinel://`).
/// An unreachable server exits with 69, a malformed URL with 2.
pub fn backend(url: &str) -> Result<Backend, Failure> {
    if POSTGRES_SCHEMES
        .iter()
        .any(|scheme| url.starts_with(scheme))
    {
        return PostgresBackend::builder(url)
            .statement_timeout(RESPONSE_TIMEOUT)
            .build()
            .map(Backend::Postgres)
            .map_err(|error| {
                let failure = Failure::from(error);
                Failure::new(
                    failure.code,
                    format!("cannot use the PostgreSQL database: {}", failure.message),
                )
            });
    }
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
        .map(Backend::Redis)
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
pub fn client(backend: Backend, lease: Duration) -> Result<LockClient, Failure> {
    LockClient::builder(backend.shared())
        .watchdog_lease(lease)
        .client_id(client_id())
        .build()
        .map_err(|error| match error {
            // The watchdog lease is what `--lease` sets: name the flag, not the field.
            dlocks::LockError::InvalidArgument {
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

/// `url` with its password (if any) replaced by `***`, for showing on a screen.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info
                .split_once(':')
                .map_or(user_info, |(user, _)| user);
            let hidden = if user_info.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn a_shown_url_hides_its_password() {
        assert_eq!(
            redacted("redis://app:secret@db:6379/2"),
            "redis://app:***@db:6379/2"
        );
        assert_eq!(
            redacted("postgres://app@db/locks"),
            "postgres://app@db/locks"
        );
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redacted("not a url"), "not a url");
    }
}
