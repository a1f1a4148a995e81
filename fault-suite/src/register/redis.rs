//! The register on a Redis server of its own: a hash (`value`, and `holder`, the pid of the
//! last reader) and a log list, each access one script; with a token, one
//! `dlocks::fence::redis::FencedScript` fenced by the hash's key.

use std::time::Duration;

use ::redis::{Client, Connection, Script};
use dlocks::fence::redis::FencedScript;
use dlocks::LockError;

use super::{entry_line, token_arg, Access, Register, REGISTER};

/// Key of the access log: one entry per read or write, in the order the register saw them.
const LOG_KEY: &str = "suite:register:log";

/// KEYS: register, log. ARGV: hold id, token ('' when unfenced), pid. Answers the value.
const READ: &str = "redis.call('hset', KEYS[1], 'holder', ARGV[3])
local value = tonumber(redis.call('hget', KEYS[1], 'value') or '0')
redis.call('rpush', KEYS[2], 'r|' .. ARGV[1] .. '|' .. ARGV[2] .. '|1|0')
return value";

/// KEYS: register, log. ARGV: hold id, token ('' when unfenced), value read, value to write.
/// Answers how many updates since the read this write overwrites.
const WRITE: &str = "local current = tonumber(redis.call('hget', KEYS[1], 'value') or '0')
local lost = math.max(current - tonumber(ARGV[3]), 0)
redis.call('hset', KEYS[1], 'value', ARGV[4])
redis.call('rpush', KEYS[2], 'w|' .. ARGV[1] .. '|' .. ARGV[2] .. '|1|' .. lost)
return lost";

/// One script, plain and behind the fence.
struct Step {
    plain: Script,
    fenced: FencedScript,
}

impl Step {
    fn new(lua: &str) -> Step {
        Step {
            plain: Script::new(lua),
            fenced: FencedScript::new(lua),
        }
    }
}

/// A worker's connection to the register.
pub struct RedisRegister {
    con: Connection,
    read: Step,
    write: Step,
}

impl RedisRegister {
    /// Connects to the register at `url`.
    pub fn connect(url: &str) -> Result<RedisRegister, String> {
        Ok(RedisRegister {
            con: connect(url)?,
            read: Step::new(READ),
            write: Step::new(WRITE),
        })
    }
}

impl Register for RedisRegister {
    fn read(&mut self, hold: &str, token: Option<u64>, pid: u32) -> Result<Access, String> {
        let pid = pid.to_string();
        let value = self.run(false, hold, token, &[&pid])?;
        Ok(value.map_or(Access::Refused, |value| Access::Accepted {
            value,
            lost_updates: 0,
        }))
    }

    fn write(
        &mut self,
        hold: &str,
        token: Option<u64>,
        read: i64,
        new: i64,
    ) -> Result<Access, String> {
        let (read, written) = (read.to_string(), new.to_string());
        let lost = self.run(true, hold, token, &[&read, &written])?;
        Ok(lost.map_or(Access::Refused, |lost| Access::Accepted {
            value: new,
            lost_updates: u64::try_from(lost).unwrap_or(0),
        }))
    }
}

impl RedisRegister {
    /// Runs the read or the write with `args` after the hold and the token: its answer, or
    /// `None` when the fence refused the token (logged as refused).
    fn run(
        &mut self,
        write: bool,
        hold: &str,
        token: Option<u64>,
        args: &[&str],
    ) -> Result<Option<i64>, String> {
        let step = if write { &self.write } else { &self.read };
        let token_text = token_arg(token);
        let mut all = vec![hold, token_text.as_str()];
        all.extend_from_slice(args);
        let Some(token) = token else {
            let mut invocation = step.plain.prepare_invoke();
            invocation.key(REGISTER).key(LOG_KEY);
            for arg in &all {
                invocation.arg(*arg);
            }
            return invocation
                .invoke(&mut self.con)
                .map(Some)
                .map_err(|error| error.to_string());
        };
        match step
            .fenced
            .invoke(&mut self.con, &[REGISTER, LOG_KEY], &all, token)
        {
            Ok(answer) => Ok(Some(answer)),
            Err(LockError::StaleToken { .. }) => {
                // Refused in the check's own step; logged after it, for the count.
                ::redis::cmd("RPUSH")
                    .arg(LOG_KEY)
                    .arg(entry_line(write, hold, Some(token), false, 0))
                    .query::<()>(&mut self.con)
                    .map_err(|error| error.to_string())?;
                Ok(None)
            }
            Err(error) => Err(error.to_string()),
        }
    }
}

fn connect(url: &str) -> Result<Connection, String> {
    let client = Client::open(url).map_err(|error| error.to_string())?;
    let con = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(|error| error.to_string())?;
    for timeout in [
        con.set_read_timeout(Some(Duration::from_secs(5))),
        con.set_write_timeout(Some(Duration::from_secs(5))),
    ] {
        timeout.map_err(|error| error.to_string())?;
    }
    Ok(con)
}

/// The register's log lines.
pub fn read_log(con: &mut Connection) -> Result<Vec<String>, String> {
    ::redis::cmd("LRANGE")
        .arg(LOG_KEY)
        .arg(0)
        .arg(-1)
        .query(con)
        .map_err(|error| error.to_string())
}

/// The pid of the worker that last read the register at `url`.
pub fn last_reader(url: &str) -> Result<Option<u32>, String> {
    ::redis::cmd("HGET")
        .arg(REGISTER)
        .arg("holder")
        .query(&mut connect(url)?)
        .map_err(|error| error.to_string())
}
