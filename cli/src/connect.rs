//! The backend a command uses, by its URL's scheme, opened for what the command does, and the
//! lock client on it.

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::postgres::PostgresBackend;
use dlocks::redis::RedisBackend;
use dlocks::LockClient;

use crate::exit_code::{Failure, USAGE};

/// How long one read or write on a connection (one statement on PostgreSQL) may take: a
/// renewal that gets no answer fails after this long (`run` counts on it to know how much of a
/// lease is left when renewals fail).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// The scheme of a master behind Redis Sentinel:
/// `redis-sentinel://[user:password@]host:port[,host:port...]/<master name>`.
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

/// What a command does to the store, which decides how it opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only reads (`status`, `list`, `top`, `watch`, `leader`): creates, upgrades and writes
    /// nothing, and fails on a PostgreSQL database without the schema.
    Read,
    /// Frees locks (`force-unlock`): writes only to the locks it frees, creates nothing.
    Unlock,
    /// Takes locks (`run`): creates the PostgreSQL schema if it is missing, as a program using
    /// the library does.
    Take,
}

/// Where the backend is: its URL, and the PostgreSQL schema when one is named.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URL (any scheme).
    pub url: String,
    /// `--schema` or `$DLOCK_PG_SCHEMA`; PostgreSQL only.
    pub schema: Option<String>,
    /// Whether the schema was named with `--schema` (a usage error on Redis) rather than by
    /// the environment (ignored on Redis).
    pub schema_given: bool,
}

impl Target {
    /// Whether the URL names a PostgreSQL database.
    pub fn is_postgres(&self) -> bool {
        is_postgres(&self.url)
    }

    /// The URL without its password, for messages and screens.
    pub fn shown(&self) -> String {
        redacted(&self.url)
    }
}

/// `postgres://` and `postgresql://` URLs, and libpq's `key=value` strings.
fn is_postgres(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    POSTGRES_SCHEMES
        .iter()
        .any(|scheme| lower.starts_with(scheme))
        || (!url.contains("://") && url.contains('='))
}

/// Connects to the backend `target` names by its URL's scheme: PostgreSQL for `postgres://`
/// and `postgresql://` (and libpq's `host=... dbname=...` strings), Redis otherwise (the master the sentinels name, for
/// `redis-sentinel://`), opened for `access`. An unreachable server exits with 69, a malformed
/// URL with 2.
pub fn backend(target: &Target, access: Access) -> Result<Backend, Failure> {
    if target.is_postgres() {
        let mut builder = PostgresBackend::builder(&target.url)
            .statement_timeout(RESPONSE_TIMEOUT)
            // The deployment's schema says whether its leases are ephemeral.
            .durability_from_schema(true)
            .create_schema(access == Access::Take);
        if let Some(schema) = &target.schema {
            builder = builder.schema(schema);
        }
        return builder.build().map(Backend::Postgres).map_err(|error| {
            let failure = Failure::from(error);
            Failure::new(
                failure.code,
                format!("cannot use the PostgreSQL database: {}", failure.message),
            )
        });
    }
    if target.schema_given {
        return Err(Failure::new(
            USAGE,
            format!(
                "--schema names a PostgreSQL schema, and {} is no PostgreSQL URL",
                target.shown()
            ),
        ));
    }
    let url = target.url.as_str();
    let builder = match url.strip_prefix(SENTINEL_SCHEME) {
        Some(rest) => sentinel_builder(url, rest)?,
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

/// The builder for `redis-sentinel://[user:password@]host:port[,host:port...]/<master>`
/// (`rest` is what follows the scheme): the credentials are the master's, the sentinels are
/// reached without.
fn sentinel_builder(url: &str, rest: &str) -> Result<dlocks::redis::RedisBackendBuilder, Failure> {
    // The userinfo runs to the last `@`: a password may hold raw `/`, `@` or `:`.
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, master) = after.split_once('/').unwrap_or((after, ""));
    let sentinels: Vec<String> = hosts
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| format!("redis://{host}"))
        .collect();
    if master.is_empty() || sentinels.is_empty() {
        return Err(Failure::new(
            USAGE,
            format!(
                "a Sentinel URL is {SENTINEL_SCHEME}[user:password@]host:port[,host:port...]/\
                 <master name>, got {:?}",
                redacted(url)
            ),
        ));
    }
    let mut builder = RedisBackend::sentinel_builder(master, sentinels);
    if let Some(userinfo) = userinfo {
        let (user, password) = userinfo.split_once(':').unwrap_or(("", userinfo));
        let user = decoded(user);
        let user = (!user.is_empty()).then_some(user.as_str());
        builder = builder.master_credentials(user, &decoded(password));
    }
    Ok(builder)
}

/// `text` with its `%XX` escapes decoded (as URLs carry user names and passwords).
fn decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// A lock client whose owner ids say where they come from (`dlock-<host>-<pid>-<random>:<thread>`),
/// so `dlock status` on another machine shows who holds a lock.
pub fn client(backend: Arc<dyn DistributedLock>, lease: Duration) -> Result<LockClient, Failure> {
    LockClient::builder(backend)
        .watchdog_lease(lease)
        .client_id(client_id())
        .build()
        .map_err(|error| match error {
            // The watchdog lease is what `--lease` sets: name the flag, not the field.
            dlocks::LockError::InvalidArgument {
                argument: "watchdog_lease",
                reason,
            } => Failure::new(USAGE, format!("invalid --lease: {reason}")),
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

/// `url` without its password, by its family's redaction: PostgreSQL's for `postgres://`,
/// `postgresql://` and `key=value` strings, Redis's for the rest.
pub fn redacted(url: &str) -> String {
    if is_postgres(url) {
        dlocks::postgres::redact_url(url)
    } else {
        dlocks::redis::redact_url(url)
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn a_shown_url_hides_its_password_by_its_family() {
        for (url, shown) in [
            ("redis://app:secret@db:6379/2", "redis://app:***@db:6379/2"),
            (
                "redis-sentinel://:se/cret@h1:26379,h2:26379/main",
                "redis-sentinel://:***@h1:26379,h2:26379/main",
            ),
            ("postgres://app@db/locks", "postgres://app@db/locks"),
            (
                "postgresql://db/locks?password=secret",
                "postgresql://db/locks?password=***",
            ),
            ("host=db password = 'se cret'", "host=db password = ***"),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redacted(url), shown, "{url}");
        }
    }
}
