//! The shared register the workers protect with the lock: a counter on a Redis server of its
//! own (never faulted), read and written by scripts that keep a log of every access.
//!
//! Given a fencing token, the register keeps the highest token it has seen (the fence) and
//! refuses a read or write with a lower one, or with the same token from another hold: a
//! holder that lost its lease cannot touch the register once its successor has. Without a
//! token it accepts everything, as a store that knows nothing of the lock does. Either way a
//! write that finds a higher value than the one its writer read overwrites the updates made
//! since its read: they are logged as lost updates.

use std::time::Duration;

use redis::{Connection, Script};

/// Key of the register's hash: `value`, `fence`, `fence_hold`, `holder` (the pid of the last
/// reader).
pub const REGISTER_KEY: &str = "suite:register";
/// Key of the access log: one entry per read or write, in the order the register saw them.
pub const LOG_KEY: &str = "suite:register:log";

const FENCE_CHECK: &str = r"
local function refused(kind)
    redis.call('rpush', KEYS[2], kind .. '|' .. ARGV[1] .. '|' .. ARGV[2] .. '|0|0')
    return {0, 0}
end
local fenced = ARGV[2] ~= ''
if fenced then
    local token = tonumber(ARGV[2])
    local fence = tonumber(redis.call('hget', KEYS[1], 'fence') or '0')
    if token < fence or (token == fence and redis.call('hget', KEYS[1], 'fence_hold') ~= ARGV[1]) then
        return refused(KIND)
    end
    redis.call('hset', KEYS[1], 'fence', ARGV[2], 'fence_hold', ARGV[1])
end
";

/// KEYS: register, log. ARGV: hold id, token ('' when unfenced), pid. Reply `{1, value}` or
/// `{0, 0}` when refused.
fn read_script() -> Script {
    Script::new(&format!(
        "{}\nredis.call('hset', KEYS[1], 'holder', ARGV[3])
local value = tonumber(redis.call('hget', KEYS[1], 'value') or '0')
redis.call('rpush', KEYS[2], 'r|' .. ARGV[1] .. '|' .. ARGV[2] .. '|1|0')
return {{1, value}}",
        FENCE_CHECK.replace("KIND", "'r'")
    ))
}

/// KEYS: register, log. ARGV: hold id, token ('' when unfenced), value read, value to write.
/// Reply `{1, lost}` (lost: how many updates since the read this write overwrites) or `{0, 0}`.
fn write_script() -> Script {
    Script::new(&format!(
        "{}\nlocal current = tonumber(redis.call('hget', KEYS[1], 'value') or '0')
local lost = math.max(current - tonumber(ARGV[3]), 0)
redis.call('hset', KEYS[1], 'value', ARGV[4])
redis.call('rpush', KEYS[2], 'w|' .. ARGV[1] .. '|' .. ARGV[2] .. '|1|' .. lost)
return {{1, lost}}",
        FENCE_CHECK.replace("KIND", "'w'")
    ))
}

/// A worker's connection to the register.
pub struct Register {
    con: Connection,
    read: Script,
    write: Script,
}

/// What the register answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Accepted; for a read the value, for a write how many updates it overwrote unseen.
    Accepted { value: i64, lost_updates: u64 },
    /// Refused: the token was older than the fence.
    Refused,
}

impl Register {
    /// Connects to the register at `url`.
    pub fn connect(url: &str) -> redis::RedisResult<Register> {
        let client = redis::Client::open(url)?;
        let con = client.get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        con.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(Register {
            con,
            read: read_script(),
            write: write_script(),
        })
    }

    /// Reads the value as hold `hold`, with its token if fenced, recording `pid` as the holder.
    pub fn read(&mut self, hold: &str, token: Option<u64>, pid: u32) -> redis::RedisResult<Access> {
        let (accepted, value): (i64, i64) = self
            .read
            .key(REGISTER_KEY)
            .key(LOG_KEY)
            .arg(hold)
            .arg(token_arg(token))
            .arg(pid)
            .invoke(&mut self.con)?;
        Ok(if accepted == 1 {
            Access::Accepted {
                value,
                lost_updates: 0,
            }
        } else {
            Access::Refused
        })
    }

    /// Writes `new` as hold `hold`, which read `read`.
    pub fn write(
        &mut self,
        hold: &str,
        token: Option<u64>,
        read: i64,
        new: i64,
    ) -> redis::RedisResult<Access> {
        let (accepted, lost): (i64, i64) = self
            .write
            .key(REGISTER_KEY)
            .key(LOG_KEY)
            .arg(hold)
            .arg(token_arg(token))
            .arg(read)
            .arg(new)
            .invoke(&mut self.con)?;
        Ok(if accepted == 1 {
            Access::Accepted {
                value: new,
                lost_updates: u64::try_from(lost).unwrap_or(0),
            }
        } else {
            Access::Refused
        })
    }
}

fn token_arg(token: Option<u64>) -> String {
    token.map(|token| token.to_string()).unwrap_or_default()
}

/// One entry of the register's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub write: bool,
    pub hold: String,
    pub token: Option<u64>,
    pub accepted: bool,
    /// For an accepted write: how many updates made since its read it overwrote.
    pub lost_updates: u64,
}

/// The register's whole log, in the order it saw the accesses.
pub fn read_log(con: &mut Connection) -> redis::RedisResult<Vec<LogEntry>> {
    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg(LOG_KEY)
        .arg(0)
        .arg(-1)
        .query(con)?;
    Ok(lines.iter().filter_map(|line| parse_entry(line)).collect())
}

fn parse_entry(line: &str) -> Option<LogEntry> {
    let mut parts = line.split('|');
    let kind = parts.next()?;
    let hold = parts.next()?.to_owned();
    let token = parts.next()?;
    let accepted = parts.next()? == "1";
    let lost_updates = parts.next()?.parse().ok()?;
    Some(LogEntry {
        write: kind == "w",
        hold,
        token: token.parse().ok(),
        accepted,
        lost_updates,
    })
}

/// The pid of the worker that last read the register: most likely the lock's holder.
pub fn last_reader(con: &mut Connection) -> Option<u32> {
    redis::cmd("HGET")
        .arg(REGISTER_KEY)
        .arg("holder")
        .query::<Option<u32>>(con)
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::parse_entry;

    #[test]
    fn log_entries_parse() {
        let entry = parse_entry("w|12:0:3|1795329184530308|1|17").expect("entry");
        assert!(entry.write && entry.accepted);
        assert_eq!(entry.lost_updates, 17);
        assert_eq!(entry.token, Some(1_795_329_184_530_308));
        let unfenced = parse_entry("r|12:0:4||1|0").expect("entry");
        assert_eq!(unfenced.token, None);
        assert!(parse_entry("garbage").is_none());
    }
}
