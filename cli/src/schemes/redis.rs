//! Redis: `redis://`, `rediss://`, `redis+unix://` and `unix://` URLs (redis-rs's), and
//! `redis-sentinel://` for the master a set of sentinels names, `redis-cluster://` for a Redis
//! Cluster.

use std::sync::Arc;

use dlocks::backend::DistributedLock;
use dlocks::redis::RedisBackend;

use super::Scheme;
use crate::connect::{Access, Target, RESPONSE_TIMEOUT};
use crate::exit_code::Failure;

/// The Redis entry: it takes every URL no other entry claims, and redis-rs says what is wrong
/// with one it cannot use.
pub static SCHEME: Scheme = Scheme {
    store: "Redis",
    claims: |_| true,
    redact: dlocks::redis::redact_url,
    open,
    takes_schema: false,
};

/// Opens the server, or the master the sentinels name. Every command opens it alike: nothing
/// is created on Redis before a lock is taken.
fn open(target: &Target, _access: Access) -> Result<Arc<dyn DistributedLock>, Failure> {
    // `redis-sentinel://` and `redis-cluster://` URLs too: the library reads them.
    let builder = RedisBackend::builder(&target.url);
    match builder.response_timeout(RESPONSE_TIMEOUT).build() {
        Ok(backend) => Ok(Arc::new(backend)),
        Err(error) => {
            let failure = Failure::from(error);
            Err(Failure::new(
                failure.code,
                format!("cannot use the Redis server: {}", failure.message),
            ))
        }
    }
}
