//! Redis: `redis://`, `rediss://`, `redis+unix://` and `unix://` URLs (redis-rs's), and
//! `redis-sentinel://` for the master a set of sentinels names.

use std::sync::Arc;

use dlocks::backend::DistributedLock;
use dlocks::redis::{RedisBackend, RedisBackendBuilder};

use super::Scheme;
use crate::connect::{Access, Target, RESPONSE_TIMEOUT};
use crate::exit_code::{Failure, USAGE};

/// The Redis entry: it takes every URL no other entry claims, and redis-rs says what is wrong
/// with one it cannot use.
pub static SCHEME: Scheme = Scheme {
    store: "Redis",
    claims: |_| true,
    redact: dlocks::redis::redact_url,
    open,
    takes_schema: false,
};

/// The scheme of a master behind Redis Sentinel:
/// `redis-sentinel://[user:password@]host:port[,host:port...]/<master name>`.
const SENTINEL_SCHEME: &str = "redis-sentinel://";

/// Opens the server, or the master the sentinels name. Every command opens it alike: nothing
/// is created on Redis before a lock is taken.
fn open(target: &Target, _access: Access) -> Result<Arc<dyn DistributedLock>, Failure> {
    let url = target.url.as_str();
    let builder = match url.strip_prefix(SENTINEL_SCHEME) {
        Some(rest) => sentinel_builder(url, rest)?,
        None => RedisBackend::builder(url),
    };
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

/// The builder for `redis-sentinel://[user:password@]host:port[,host:port...]/<master>`
/// (`rest` is what follows the scheme): the credentials are the master's, the sentinels are
/// reached without.
fn sentinel_builder(url: &str, rest: &str) -> Result<RedisBackendBuilder, Failure> {
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
                dlocks::redis::redact_url(url)
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
