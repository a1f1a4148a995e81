//! The Lua scripts: each lock operation is one atomic script run by `EVALSHA`, one file per
//! kind of lock.
//!
//! Every key a script touches is passed in `KEYS` and every value in `ARGV` (except the
//! read-hold keys of other owners, which Redisson's layout derives from the lock's name, as
//! Redisson's own scripts do; they share the lock's hash tag), so the scripts are constants
//! (loaded once per server) and stay within one cluster slot.
//!
//! A script that finds the name used by a lock of another kind answers with the error
//! `DLOCK_WRONGKIND <what it found>`, which the backend turns into `LockError::WrongKind`.

mod fair;
mod read_write;
mod reentrant;

pub(crate) use fair::{FAIR_ACQUIRE, FAIR_CANCEL, FAIR_FORCE_UNLOCK, FAIR_RELEASE, FAIR_RENEW};
pub(crate) use read_write::{
    READ_ACQUIRE, READ_FORCE_UNLOCK, READ_RELEASE, READ_RENEW, READ_STATUS, WRITE_ACQUIRE,
    WRITE_FORCE_UNLOCK, WRITE_RELEASE, WRITE_STATUS,
};
pub(crate) use reentrant::{
    ACQUIRE, FENCED_ACQUIRE, FORCE_UNLOCK, HAND_OVER, RELEASE, RENEW, STATUS,
};

use redis::Script;

/// The error code of a script that found the lock's name used by another kind of lock.
pub(crate) const WRONG_KIND: &str = "DLOCK_WRONGKIND";

/// A script and its SHA1, computed once.
pub(crate) struct LuaScript {
    /// What the script does, for error messages.
    pub(crate) name: &'static str,
    script: Script,
}

impl LuaScript {
    pub(crate) fn new(name: &'static str, code: &'static str) -> Self {
        LuaScript {
            name,
            script: Script::new(code),
        }
    }

    /// The SHA1 `EVALSHA` names the script by.
    pub(crate) fn sha(&self) -> &str {
        self.script.get_hash()
    }

    /// Sends `SCRIPT LOAD`, after the server answered `NOSCRIPT` (restarted, or its script
    /// cache flushed).
    pub(crate) fn load(&self, con: &mut dyn redis::ConnectionLike) -> redis::RedisResult<String> {
        self.script.load(con)
    }
}

/// Builds `EVALSHA <sha> <number of keys> keys... args...`.
pub(crate) fn evalsha(script: &LuaScript, keys: &[&str], args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha()).arg(keys.len()).arg(keys).arg(args);
    cmd
}
