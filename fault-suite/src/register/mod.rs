//! The shared register the workers protect with the lock: a counter in a store of its own
//! (never faulted), a Redis key or a PostgreSQL table, each access logged in the order the
//! store saw it.
//!
//! Given a fencing token, an access goes through `dlocks::fence`, as a user's write would: the
//! store refuses a token older than the newest one that reached the register (logged as
//! refused), in the access's own atomic step. Without a token the register accepts everything,
//! as a store that knows nothing of the lock does. Either way a write that finds a higher value
//! than the one its writer read overwrites the updates made since its read: they are logged as
//! lost updates.

mod postgres;
mod redis;

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::redis_server::RedisServer;

/// The register's name: its Redis key, its fence's resource on PostgreSQL.
pub const REGISTER: &str = "suite:register";

/// Where the register lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterKind {
    /// A hash on a Redis server, written by fenced scripts.
    Redis,
    /// A row of a PostgreSQL table, written in transactions that check the fence first.
    Postgres,
}

impl RegisterKind {
    /// Every kind, by its name on the command line.
    pub const ALL: [RegisterKind; 2] = [RegisterKind::Redis, RegisterKind::Postgres];

    /// The name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            RegisterKind::Redis => "redis",
            RegisterKind::Postgres => "postgres",
        }
    }
}

/// The register's server, started for one run.
pub enum RegisterServer {
    Redis(RedisServer),
    Postgres(PostgresServer),
}

impl RegisterServer {
    /// Starts a server of `kind` and sets the register up on it.
    pub fn start(kind: RegisterKind) -> Result<RegisterServer, String> {
        match kind {
            RegisterKind::Redis => Ok(RegisterServer::Redis(RedisServer::start())),
            RegisterKind::Postgres => {
                let server = PostgresServer::start();
                postgres::set_up(&mut server.admin())?;
                Ok(RegisterServer::Postgres(server))
            }
        }
    }

    /// The URL workers reach the register by.
    pub fn url(&self) -> String {
        match self {
            RegisterServer::Redis(server) => server.url(),
            RegisterServer::Postgres(server) => server.url(),
        }
    }

    /// The register's whole log, in the order it saw the accesses.
    pub fn read_log(&self) -> Result<Vec<LogEntry>, String> {
        let lines = match self {
            RegisterServer::Redis(server) => redis::read_log(&mut server.admin()),
            RegisterServer::Postgres(server) => postgres::read_log(&mut server.admin()),
        }?;
        Ok(lines.iter().filter_map(|line| parse_entry(line)).collect())
    }
}

/// The pid of the worker that last read the register at `url`: most likely the lock's holder.
pub fn last_reader(url: &str) -> Result<Option<u32>, String> {
    if postgres::claims(url) {
        postgres::last_reader(url)
    } else {
        redis::last_reader(url)
    }
}

/// A worker's connection to the register.
pub trait Register {
    /// Reads the value as hold `hold`, with its token if fenced, recording `pid` as the holder.
    fn read(&mut self, hold: &str, token: Option<u64>, pid: u32) -> Result<Access, String>;

    /// Writes `new` as hold `hold`, which read `read`.
    fn write(
        &mut self,
        hold: &str,
        token: Option<u64>,
        read: i64,
        new: i64,
    ) -> Result<Access, String>;
}

/// Connects to the register at `url` (a Redis or a PostgreSQL URL).
pub fn connect(url: &str) -> Result<Box<dyn Register>, String> {
    if postgres::claims(url) {
        Ok(Box::new(postgres::PostgresRegister::connect(url)?))
    } else {
        Ok(Box::new(redis::RedisRegister::connect(url)?))
    }
}

/// What the register answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Accepted; for a read the value, for a write how many updates it overwrote unseen.
    Accepted { value: i64, lost_updates: u64 },
    /// Refused: the token was older than the newest one that reached the register.
    Refused,
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

/// A log line: `r` or `w`, the hold, the token (empty without one), `1` accepted or `0`
/// refused, the updates lost, separated by `|`.
fn entry_line(write: bool, hold: &str, token: Option<u64>, accepted: bool, lost: u64) -> String {
    format!(
        "{}|{hold}|{}|{}|{lost}",
        if write { "w" } else { "r" },
        token_arg(token),
        u8::from(accepted)
    )
}

fn token_arg(token: Option<u64>) -> String {
    token.map(|token| token.to_string()).unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_entries_parse() {
        let entry = parse_entry("w|12:0:3|1795329184530308|1|17").expect("entry");
        assert!(entry.write && entry.accepted);
        assert_eq!(entry.lost_updates, 17);
        assert_eq!(entry.token, Some(1_795_329_184_530_308));
        let read = parse_entry("r|12:0:3||0|0").expect("entry");
        assert!(!read.write && !read.accepted && read.token.is_none());
    }

    #[test]
    fn a_line_parses_back_to_its_entry() {
        let line = entry_line(true, "7:1:9", Some(42), false, 0);
        let entry = parse_entry(&line).expect("entry");
        assert_eq!(
            entry,
            LogEntry {
                write: true,
                hold: "7:1:9".into(),
                token: Some(42),
                accepted: false,
                lost_updates: 0
            }
        );
    }
}
