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
//! Every step that takes or reads a name as one kind checks what the name is in use as first
//! (`preamble/kinds.lua`), before it writes anything.
//!
//! Each step's Lua is its own `.lua` file next to the module that names it
//! (`reentrant/acquire.lua`, ...), with the shared functions it calls in `preamble/`.

/// A step's script: the preambles it needs (files under `preamble/`), then its own file, both
/// without `.lua`. The Lua lives in `.lua` files so it can be read, linted and run on its own.
macro_rules! step {
    ($name:literal, $file:literal $(, $preamble:literal)*) => {
        $crate::scripts::LuaScript::new(
            $name,
            $file,
            concat!(
                $(include_str!(concat!($preamble, ".lua")),)*
                include_str!(concat!($file, ".lua"))
            ),
        )
    };
}

mod client_record;
mod fair;
mod fence;
#[cfg(test)]
mod headers;
mod read_write;
mod reentrant;
mod synchronizers;

pub(crate) use client_record::CLIENT_RECORD_PUBLISH;
pub(crate) use fair::{FAIR_ACQUIRE, FAIR_CANCEL, FAIR_FORCE_UNLOCK, FAIR_RELEASE, FAIR_RENEW};
pub(crate) use fence::{FENCED_DELETE, FENCED_HSET, FENCED_SET};
pub(crate) use read_write::{
    READ_ACQUIRE, READ_FORCE_UNLOCK, READ_RELEASE, READ_RENEW, READ_STATUS, READ_WRITE_CANCEL,
    WRITE_ACQUIRE, WRITE_FORCE_UNLOCK, WRITE_RELEASE, WRITE_STATUS,
};
pub(crate) use reentrant::{
    ACQUIRE, CANCEL, FENCED_ACQUIRE, FORCE_UNLOCK, HAND_OVER, RELEASE, RENEW, STATUS, UNDO_ACQUIRE,
};
pub(crate) use synchronizers::{
    ELECTION_CAMPAIGN, ELECTION_LEADER, LATCH_COUNT, LATCH_COUNT_DOWN, LATCH_OPEN, LATCH_TRY_SET,
    SEMAPHORE_ACQUIRE, SEMAPHORE_ADD, SEMAPHORE_AVAILABLE, SEMAPHORE_HAND_OVER, SEMAPHORE_RELEASE,
    SEMAPHORE_RENEW, SEMAPHORE_STATUS, SEMAPHORE_TRY_SET,
};

use redis::Script;

use crate::resp;

/// The error code of a script that found the lock's name used by another kind of lock.
pub(crate) const WRONG_KIND: &str = "DLOCK_WRONGKIND";

/// The error code of a script refusing a count Redis cannot keep.
pub(crate) const INVALID: &str = "DLOCK_INVALID";

/// How a script announces a release on a lock's channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Announce {
    /// `PUBLISH`: one server (or a Sentinel's master).
    Publish,
    /// `SPUBLISH`, sharded pub/sub: on a cluster the message goes to the channel's slot owner
    /// alone instead of every node, and it is what Redisson sends and listens to there.
    ShardedPublish,
}

/// A script and its SHA1, computed once, in both announcing forms.
pub(crate) struct LuaScript {
    /// What the script does, for error messages.
    pub(crate) name: &'static str,
    /// Its file under `src/scripts`, without `.lua`.
    file: &'static str,
    /// The text sent to the server (preambles and step), in its `PUBLISH` form.
    code: &'static str,
    script: Script,
    sharded: Script,
}

/// `code` announcing with `SPUBLISH` instead of `PUBLISH`.
fn sharded_code(code: &str) -> String {
    code.replace("redis.call('publish'", "redis.call('spublish'")
}

impl LuaScript {
    pub(crate) fn new(name: &'static str, file: &'static str, code: &'static str) -> Self {
        LuaScript {
            name,
            file,
            code,
            script: Script::new(code),
            sharded: Script::new(&sharded_code(code)),
        }
    }

    fn form(&self, announce: Announce) -> &Script {
        match announce {
            Announce::Publish => &self.script,
            Announce::ShardedPublish => &self.sharded,
        }
    }

    /// The script in its `PUBLISH` form, for a caller's own connection.
    pub(crate) fn script(&self) -> &Script {
        &self.script
    }

    /// The SHA1 `EVALSHA` names the script by.
    pub(crate) fn sha(&self, announce: Announce) -> &str {
        self.form(announce).get_hash()
    }

    /// Runs the script on `con` with `keys` and `args` (`EVALSHA`, loading it first if the
    /// server does not have it): for steps outside the lock layout's batches.
    pub(crate) fn invoke<T: redis::FromRedisValue>(
        &self,
        con: &mut dyn redis::ConnectionLike,
        keys: &[&str],
        args: &[String],
    ) -> redis::RedisResult<T> {
        let mut invocation = self.script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        invocation.invoke(con)
    }

    /// Sends `SCRIPT LOAD`, after the server answered `NOSCRIPT` (restarted, or its script
    /// cache flushed). On a cluster connection the script goes to every node.
    pub(crate) fn load(
        &self,
        con: &mut dyn redis::ConnectionLike,
        announce: Announce,
    ) -> redis::RedisResult<String> {
        self.form(announce).load(con)
    }
}

/// The shared Lua the steps start with: files under `src/scripts`, without `.lua`.
pub const LUA_PREAMBLES: &[&str] = &[
    "fence/check",
    "preamble/clock",
    "preamble/ended",
    "preamble/kinds",
    "preamble/tokens",
    "preamble/marks",
    "preamble/reads",
    "preamble/turns",
];

/// Every step's script as (its file under `src/scripts` without `.lua`, the text sent to the
/// server), so a test can run each one and check that none is left out.
pub fn lua_steps() -> Vec<(&'static str, &'static str)> {
    let steps: [&LuaScript; 42] = [
        &FENCED_SET,
        &FENCED_DELETE,
        &FENCED_HSET,
        &ACQUIRE,
        &FENCED_ACQUIRE,
        &RELEASE,
        &UNDO_ACQUIRE,
        &HAND_OVER,
        &CANCEL,
        &RENEW,
        &STATUS,
        &FORCE_UNLOCK,
        &FAIR_ACQUIRE,
        &FAIR_RELEASE,
        &FAIR_CANCEL,
        &FAIR_FORCE_UNLOCK,
        &FAIR_RENEW,
        &READ_ACQUIRE,
        &READ_RELEASE,
        &READ_RENEW,
        &READ_STATUS,
        &READ_FORCE_UNLOCK,
        &WRITE_ACQUIRE,
        &WRITE_RELEASE,
        &WRITE_STATUS,
        &WRITE_FORCE_UNLOCK,
        &READ_WRITE_CANCEL,
        &SEMAPHORE_ACQUIRE,
        &SEMAPHORE_RELEASE,
        &SEMAPHORE_HAND_OVER,
        &SEMAPHORE_RENEW,
        &SEMAPHORE_STATUS,
        &SEMAPHORE_TRY_SET,
        &SEMAPHORE_ADD,
        &SEMAPHORE_AVAILABLE,
        &LATCH_OPEN,
        &LATCH_TRY_SET,
        &LATCH_COUNT_DOWN,
        &LATCH_COUNT,
        &ELECTION_CAMPAIGN,
        &ELECTION_LEADER,
        &CLIENT_RECORD_PUBLISH,
    ];
    steps
        .into_iter()
        .map(|script| (script.file, script.code))
        .collect()
}

/// Loads `scripts` (each once, in any order) after a `NOSCRIPT`: the server restarted or its
/// scripts were flushed.
pub(crate) fn load_missing<'a>(
    con: &mut dyn redis::ConnectionLike,
    scripts: impl IntoIterator<Item = &'a LuaScript>,
    announce: Announce,
) -> redis::RedisResult<()> {
    let mut scripts: Vec<&LuaScript> = scripts.into_iter().collect();
    scripts.sort_by_key(|script| script.sha(announce));
    scripts.dedup_by_key(|script| script.sha(announce));
    for script in scripts {
        tracing::debug!(
            script = script.name,
            "script missing on the server, loading it"
        );
        script.load(con, announce)?;
    }
    Ok(())
}

/// Builds `EVALSHA <sha> <number of keys> keys... args...`.
pub(crate) fn evalsha(
    script: &LuaScript,
    announce: Announce,
    keys: &[&str],
    args: &[&str],
) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha(announce))
        .arg(keys.len())
        .arg(keys)
        .arg(args);
    cmd
}

/// `EVAL <script> <number of keys> keys... args...`: the script's whole text, for a command
/// written where no `NOSCRIPT` answer will be read (behind a request given up).
pub(crate) fn eval(
    script: &LuaScript,
    announce: Announce,
    keys: &[&str],
    args: &[&str],
) -> redis::Cmd {
    let code = match announce {
        Announce::Publish => script.code.to_owned(),
        Announce::ShardedPublish => sharded_code(script.code),
    };
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(code).arg(keys.len()).arg(keys).arg(args);
    cmd
}

/// Appends `EVALSHA <sha> <number of keys> keys... args...` to `out`, encoded as the server
/// reads it: the same bytes as [`evalsha`]'s packed command, without building a `Cmd`.
pub(crate) fn write_evalsha(
    out: &mut Vec<u8>,
    script: &LuaScript,
    announce: Announce,
    keys: &[String],
    args: &[String],
) {
    resp::command_header(out, 3 + keys.len() + args.len());
    resp::word(out, b"EVALSHA");
    resp::word(out, script.sha(announce).as_bytes());
    resp::number(out, keys.len());
    for word in keys.iter().chain(args) {
        resp::word(out, word.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::{fair, read_write, reentrant, sharded_code, synchronizers, Announce};

    #[test]
    fn write_evalsha_encodes_what_the_command_packs() {
        let keys = vec!["lock".to_owned(), "{lock}:queue".to_owned()];
        let args = vec!["30000".to_owned(), "owner:1".to_owned(), String::new()];
        for announce in [Announce::Publish, Announce::ShardedPublish] {
            let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let packed = super::evalsha(&reentrant::RELEASE, announce, &key_refs, &arg_refs)
                .get_packed_command();
            let mut written = b"prefix".to_vec();
            super::write_evalsha(&mut written, &reentrant::RELEASE, announce, &keys, &args);
            assert_eq!(&written[..6], b"prefix");
            assert_eq!(
                String::from_utf8_lossy(&written[6..]),
                String::from_utf8_lossy(&packed)
            );
        }
    }

    #[test]
    fn the_sharded_form_announces_with_spublish_only() {
        let scripts = [
            &*reentrant::RELEASE,
            &*reentrant::FORCE_UNLOCK,
            &*fair::FAIR_RELEASE,
            &*read_write::READ_RELEASE,
            &*read_write::WRITE_RELEASE,
            &*synchronizers::SEMAPHORE_RELEASE,
            &*synchronizers::SEMAPHORE_ADD,
            &*synchronizers::LATCH_COUNT_DOWN,
            &*synchronizers::ELECTION_CAMPAIGN,
        ];
        for script in scripts {
            let plain = script.code;
            let sharded = sharded_code(plain);
            let publishes = plain.matches("redis.call('publish'").count();
            assert!(publishes > 0, "{} announces nothing", script.name);
            assert!(!sharded.contains("'publish'"), "{}", script.name);
            assert_eq!(sharded.matches("redis.call('spublish'").count(), publishes);
            assert_ne!(
                script.sha(Announce::Publish),
                script.sha(Announce::ShardedPublish)
            );
        }
    }
}
