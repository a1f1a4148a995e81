//! The backend a command uses, by its URL's scheme, opened for what the command does, and the
//! lock client on it.

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::{DistributedLock, Inspection};
use dlocks::LockClient;

use crate::exit_code::{Failure, USAGE};
use crate::schemes::{self, Scheme};

/// How long one read or write on a connection (one statement on PostgreSQL) may take: a
/// renewal that gets no answer fails after this long (`run` counts on it to know how much of a
/// lease is left when renewals fail).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// A backend opened for a command, and the URL family it was reached by.
pub struct Store {
    backend: Arc<dyn DistributedLock>,
    scheme: &'static Scheme,
}

impl Store {
    /// The backend, for a lock client.
    pub fn shared(&self) -> Arc<dyn DistributedLock> {
        Arc::clone(&self.backend)
    }

    /// What the store holds, read through the backend's inspection hook.
    pub fn inspection(&self) -> Result<&dyn Inspection, Failure> {
        self.backend.inspection().ok_or_else(|| {
            Failure::new(
                USAGE,
                format!(
                    "the {} backend cannot show what it holds",
                    self.scheme.store
                ),
            )
        })
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
    /// The URL without its password, for messages and screens.
    pub fn shown(&self) -> String {
        redacted(&self.url)
    }
}

/// Opens the backend `target` names by its URL's family (see [`crate::schemes`]), for
/// `access`. An unreachable server exits with 69, a malformed URL with 2.
pub fn backend(target: &Target, access: Access) -> Result<Store, Failure> {
    let scheme = schemes::of(&target.url);
    if target.schema_given && !scheme.takes_schema {
        return Err(Failure::new(
            USAGE,
            format!(
                "--schema names a PostgreSQL schema, and {} is no PostgreSQL URL",
                target.shown()
            ),
        ));
    }
    let backend = (scheme.open)(target, access)?;
    Ok(Store { backend, scheme })
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

/// `url` without its password, by its family's redaction.
pub fn redacted(url: &str) -> String {
    (schemes::of(url).redact)(url)
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
            (
                "redis-cluster://app:se@cr/et@h1:7000,h2:7001",
                "redis-cluster://app:***@h1:7000,h2:7001",
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
