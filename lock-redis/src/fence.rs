//! The fence where the data lives: a write to Redis carries its hold's fencing token, and one
//! script checks it and writes, so a write whose token is older than one that already wrote is
//! refused.
//!
//! A lease lock cannot stop a holder that paused (a GC pause, a stopped VM, a slow network)
//! from writing after its lease ran out and another holder took the lock. Its token can: the
//! next holder's token is higher, and once that holder wrote, the late write is refused. Each
//! function here is one script, so the check and the write are one atomic step: it keeps the
//! newest token that wrote a key in a fence key beside it (`<key>:dlock_fence`, or
//! `{<key>}:dlock_fence` for a key without a hash tag: the same cluster slot either way), refuses
//! an older token with [`LockError::StaleToken`], and admits the same token again (one hold
//! writing twice). The fence key has no expiry: it must outlive every holder that could still
//! write.
//!
//! The connection is the caller's own (`redis::Connection`, a pooled one, a cluster
//! connection): the data may live on another Redis than the locks.
//!
//! # Examples
//!
//! ```no_run
//! use dlocks::LockClient;
//! use dlocks::fence::redis as fence;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = LockClient::new(dlocks::MemoryBackend::new());
//! let mut data = redis::Client::open("redis://127.0.0.1/")?.get_connection()?;
//!
//! let guard = client.fenced_lock("report:today").lock()?;
//! fence::set(&mut data, "report:today", "42 rows", guard.token())?; // a stale token ends here
//! guard.unlock()?;
//! # Ok(())
//! # }
//! ```

use dlock_core::LockError;
use redis::{
    ConnectionLike, FromRedisValue, RedisError, Script, ScriptInvocation, ToRedisArgs, Value,
};

use crate::cluster::key_slot;
use crate::scripts::{FENCED_DELETE, FENCED_HSET, FENCED_SET};

/// What a key's fence key ends with.
const FENCE_SUFFIX: &str = ":dlock_fence";

/// The fence check run before a [`FencedScript`]'s own Lua.
const CHECK: &str = include_str!("scripts/fence/check.lua");

/// The key that keeps the newest token that wrote `key`: in the same cluster slot.
///
/// ```
/// use dlocks::fence::redis::fence_key;
///
/// assert_eq!(fence_key("report:today")?, "{report:today}:dlock_fence");
/// assert_eq!(fence_key("{user:7}:profile")?, "{user:7}:profile:dlock_fence");
/// # Ok::<(), dlocks::LockError>(())
/// ```
///
/// # Errors
///
/// [`LockError::InvalidArgument`] for a key whose slot no fence key can share (one with a `}`
/// but no hash tag, such as `a{}b`).
pub fn fence_key(key: &str) -> Result<String, LockError> {
    let slot = key_slot(key);
    [
        format!("{key}{FENCE_SUFFIX}"),
        format!("{{{key}}}{FENCE_SUFFIX}"),
    ]
    .into_iter()
    .find(|fence| key_slot(fence) == slot)
    .ok_or_else(|| {
        LockError::invalid(
            "key",
            format!(
                "{key:?}: no fence key shares its cluster slot (a key with a `}}` needs a hash \
                 tag such as `{{tag}}`)"
            ),
        )
    })
}

/// Sets `key` to `value` if `token` is not older than the newest token that wrote `key`.
///
/// # Errors
///
/// [`LockError::StaleToken`] when a newer token already wrote (nothing is written);
/// [`LockError::Unavailable`] when Redis could not be reached or did not answer in time;
/// [`LockError::Protocol`] for what Redis refused; [`LockError::InvalidArgument`] as
/// [`fence_key`].
pub fn set(
    con: &mut dyn ConnectionLike,
    key: &str,
    value: impl ToRedisArgs,
    token: u64,
) -> Result<(), LockError> {
    run(FENCED_SET.script(), con, key, token, |call| {
        call.arg(value);
    })
    .map(|_| ())
}

/// Deletes `key` if `token` is not older than the newest token that wrote it; the fence key
/// stays, so an older holder cannot write the key again. Answers whether the key was there.
///
/// # Errors
///
/// As [`set`].
pub fn delete(con: &mut dyn ConnectionLike, key: &str, token: u64) -> Result<bool, LockError> {
    let deleted = run(FENCED_DELETE.script(), con, key, token, |_| {})?;
    Ok(matches!(deleted, Value::Int(1)))
}

/// Sets `field` of the hash `key` to `value` if `token` is not older than the newest token that
/// wrote `key` (the fence is the hash's, not the field's). Answers whether the field is new.
///
/// # Errors
///
/// As [`set`].
pub fn hset(
    con: &mut dyn ConnectionLike,
    key: &str,
    field: &str,
    value: impl ToRedisArgs,
    token: u64,
) -> Result<bool, LockError> {
    let added = run(FENCED_HSET.script(), con, key, token, |call| {
        call.arg(field).arg(value);
    })?;
    Ok(matches!(added, Value::Int(1)))
}

/// A Lua script of the caller's own run behind the fence of its first key: the check and the
/// script are one script, so nothing the script writes is written for a stale token. The
/// script sees its own `KEYS` and `ARGV`, and what it returns is the answer.
///
/// ```no_run
/// use dlocks::fence::redis::FencedScript;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut data = redis::Client::open("redis://127.0.0.1/")?.get_connection()?;
/// # let token = 1;
/// let append = FencedScript::new("redis.call('rpush', KEYS[1], ARGV[1]) return redis.call('llen', KEYS[1])");
/// let length: i64 = append.invoke(&mut data, &["audit:today"], &["paid"], token)?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FencedScript {
    script: Script,
}

impl FencedScript {
    /// The script whose body is `lua`.
    pub fn new(lua: &str) -> Self {
        FencedScript {
            script: Script::new(&format!(
                "{CHECK}local function fenced()\n{lua}\nend\nreturn {{1, fenced()}}\n"
            )),
        }
    }

    /// Runs the script with `keys` and `args` if `token` is not older than the newest token
    /// that wrote `keys[0]`; its answer.
    ///
    /// # Errors
    ///
    /// As [`set`]; [`LockError::InvalidArgument`] for no keys; [`LockError::Protocol`] for an
    /// error the script raised or an answer that is not a `T`.
    pub fn invoke<T: FromRedisValue>(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &[&str],
        args: &[&str],
        token: u64,
    ) -> Result<T, LockError> {
        let Some((resource, others)) = keys.split_first() else {
            return Err(LockError::invalid(
                "keys",
                "a fenced script names the key it is fenced by first",
            ));
        };
        let mut invocation = self.script.prepare_invoke();
        invocation.key(*resource);
        for key in others {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let answer = answered(
            invocation
                .key(fence_key(resource)?)
                .arg(token.to_string())
                .invoke(con),
            resource,
            token,
        )?;
        T::from_redis_value(answer).map_err(|error| {
            LockError::protocol(format!(
                "the fenced script's answer for {resource:?} is not what was asked for: {error}"
            ))
        })
    }
}

/// Runs one of the fenced writes on `key`: the key and its fence key, the arguments `write`
/// adds, then the token. The write's own answer.
fn run(
    script: &Script,
    con: &mut dyn ConnectionLike,
    key: &str,
    token: u64,
    write: impl FnOnce(&mut ScriptInvocation<'_>),
) -> Result<Value, LockError> {
    let mut invocation = script.prepare_invoke();
    invocation.key(key).key(fence_key(key)?);
    write(&mut invocation);
    invocation.arg(token.to_string());
    answered(invocation.invoke(con), key, token)
}

/// What a fenced script answered: `{1, answer}` written, `{0, newest}` stale.
fn answered(reply: Result<Value, RedisError>, key: &str, token: u64) -> Result<Value, LockError> {
    let reply = reply.map_err(|error| to_lock_error(error, key))?;
    let Value::Array(mut parts) = reply else {
        return Err(unexpected(key, &reply));
    };
    match parts.first() {
        Some(Value::Int(1)) => Ok(if parts.len() > 1 {
            parts.swap_remove(1)
        } else {
            Value::Nil
        }),
        Some(Value::Int(0)) => {
            let newest = match parts.get(1) {
                Some(Value::BulkString(bytes)) => std::str::from_utf8(bytes)
                    .ok()
                    .and_then(|text| text.parse().ok()),
                _ => None,
            };
            match newest {
                Some(newest) => Err(LockError::StaleToken {
                    resource: key.to_owned(),
                    token,
                    newest,
                }),
                None => Err(unexpected(key, &Value::Array(parts))),
            }
        }
        _ => Err(unexpected(key, &Value::Array(parts))),
    }
}

fn unexpected(key: &str, reply: &Value) -> LockError {
    let fence = fence_key(key).unwrap_or_default();
    LockError::protocol(format!(
        "the fenced write of {key:?} answered {reply:?}, not a fence's answer (is its fence key \
         {fence:?} in use for something else?)"
    ))
}

/// `error` from a fenced write of `key`: a connection that failed or timed out is unavailable,
/// what Redis refused a protocol error.
fn to_lock_error(error: RedisError, key: &str) -> LockError {
    if error.is_io_error() || error.is_timeout() || error.is_connection_dropped() {
        LockError::Unavailable {
            message: format!(
                "the data's Redis was unavailable for the fenced write of {key:?}: {error}"
            ),
            lock: None,
            source: Some(Box::new(error)),
        }
    } else {
        LockError::Protocol {
            message: format!("the data's Redis refused the fenced write of {key:?}: {error}"),
            lock: None,
            source: Some(Box::new(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_key_shares_its_keys_slot() {
        for key in ["plain", "{tag}rest", "a{b", "x{y}z{w}", "é:ü"] {
            let fence = fence_key(key).expect("fence key");
            assert_eq!(key_slot(&fence), key_slot(key), "{key} and {fence}");
            assert_ne!(fence, key);
        }
        for key in ["a{}b", "{}", "a}b"] {
            assert!(
                fence_key(key).is_err_and(|error| error.is_invalid_argument()),
                "{key}"
            );
        }
    }
}
