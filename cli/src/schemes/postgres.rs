//! PostgreSQL: `postgres://` and `postgresql://` URLs, and libpq's `key=value` strings.

use std::sync::Arc;

use dlocks::backend::DistributedLock;
use dlocks::postgres::PostgresBackend;

use super::Scheme;
use crate::connect::{Access, Target, RESPONSE_TIMEOUT};
use crate::exit_code::Failure;

/// The PostgreSQL entry.
pub static SCHEME: Scheme = Scheme {
    store: "PostgreSQL",
    claims,
    redact: dlocks::postgres::redact_url,
    open,
    takes_schema: true,
};

/// The URL prefixes of PostgreSQL.
const PREFIXES: [&str; 2] = ["postgres://", "postgresql://"];

fn claims(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    PREFIXES.iter().any(|prefix| lower.starts_with(prefix))
        || (!url.contains("://") && url.contains('='))
}

/// Opens the database: the schema is created (or brought up to date) only by a command that
/// takes locks, as a program using the library does; reading commands fail on a database
/// without it. The deployment's own schema says whether its leases are ephemeral.
fn open(target: &Target, access: Access) -> Result<Arc<dyn DistributedLock>, Failure> {
    let mut builder = PostgresBackend::builder(&target.url)
        .statement_timeout(RESPONSE_TIMEOUT)
        .durability_from_schema(true)
        .create_schema(access == Access::Take);
    if let Some(schema) = &target.schema {
        builder = builder.schema(schema);
    }
    match builder.build() {
        Ok(backend) => Ok(Arc::new(backend)),
        Err(error) => {
            let failure = Failure::from(error);
            Err(Failure::new(
                failure.code,
                format!("cannot use the PostgreSQL database: {}", failure.message),
            ))
        }
    }
}
