//! The register on a PostgreSQL server of its own: a row (`value`, and `holder`, the pid of
//! the last reader) and a log table, each access one transaction; with a token, the
//! transaction calls `dlocks::fence::postgres::check` first, as a user's writer would.

use dlocks::fence::postgres as fence;
use dlocks::LockError;
use postgres::{Client, NoTls, Transaction};

use super::{entry_line, Access, Register, REGISTER};

/// Whether `url` is a PostgreSQL URL.
pub fn claims(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Makes the register's tables and installs the fence.
pub fn set_up(admin: &mut Client) -> Result<(), String> {
    fence::install(admin).map_err(|error| error.to_string())?;
    admin
        .batch_execute(
            "CREATE TABLE suite_register (id int PRIMARY KEY, value bigint NOT NULL, holder int);
             INSERT INTO suite_register VALUES (1, 0, NULL);
             CREATE TABLE suite_register_log (id bigserial PRIMARY KEY, entry text NOT NULL);",
        )
        .map_err(|error| error.to_string())
}

/// A worker's connection to the register.
pub struct PostgresRegister {
    client: Client,
}

impl PostgresRegister {
    /// Connects to the register at `url`, every statement bounded.
    pub fn connect(url: &str) -> Result<PostgresRegister, String> {
        let mut config: postgres::Config = url
            .parse()
            .map_err(|error: postgres::Error| error.to_string())?;
        config
            .connect_timeout(std::time::Duration::from_secs(2))
            .options("-c statement_timeout=5000");
        let client = config.connect(NoTls).map_err(|error| error.to_string())?;
        Ok(PostgresRegister { client })
    }
}

impl Register for PostgresRegister {
    fn read(&mut self, hold: &str, token: Option<u64>, pid: u32) -> Result<Access, String> {
        let pid = i32::try_from(pid).unwrap_or(i32::MAX);
        self.access(false, hold, token, |tx| {
            let value: i64 = tx
                .query_one(
                    "UPDATE suite_register SET holder = $1 WHERE id = 1 RETURNING value",
                    &[&pid],
                )?
                .get(0);
            Ok((value, 0))
        })
    }

    fn write(
        &mut self,
        hold: &str,
        token: Option<u64>,
        read: i64,
        new: i64,
    ) -> Result<Access, String> {
        self.access(true, hold, token, |tx| {
            let current: i64 = tx
                .query_one(
                    "SELECT value FROM suite_register WHERE id = 1 FOR UPDATE",
                    &[],
                )?
                .get(0);
            tx.execute("UPDATE suite_register SET value = $1 WHERE id = 1", &[&new])?;
            Ok((new, u64::try_from(current - read).unwrap_or(0)))
        })
    }
}

impl PostgresRegister {
    /// One access in one transaction: the fence's check (with a token), `body` (the value and
    /// the updates lost), its log entry. The row's lock, taken by the body and held to the
    /// commit, puts the log in the order the accesses were made.
    fn access(
        &mut self,
        write: bool,
        hold: &str,
        token: Option<u64>,
        body: impl FnOnce(&mut Transaction<'_>) -> Result<(i64, u64), postgres::Error>,
    ) -> Result<Access, String> {
        let mut tx = self
            .client
            .transaction()
            .map_err(|error| error.to_string())?;
        if let Some(token) = token {
            match fence::check(&mut tx, REGISTER, token) {
                Ok(()) => {}
                Err(LockError::StaleToken { .. }) => {
                    drop(tx);
                    self.client
                        .execute(
                            "INSERT INTO suite_register_log (entry) VALUES ($1)",
                            &[&entry_line(write, hold, Some(token), false, 0)],
                        )
                        .map_err(|error| error.to_string())?;
                    return Ok(Access::Refused);
                }
                Err(error) => return Err(error.to_string()),
            }
        }
        let (value, lost_updates) = body(&mut tx).map_err(|error| error.to_string())?;
        tx.execute(
            "INSERT INTO suite_register_log (entry) VALUES ($1)",
            &[&entry_line(write, hold, token, true, lost_updates)],
        )
        .map_err(|error| error.to_string())?;
        tx.commit().map_err(|error| error.to_string())?;
        Ok(Access::Accepted {
            value,
            lost_updates,
        })
    }
}

/// The register's log lines.
pub fn read_log(admin: &mut Client) -> Result<Vec<String>, String> {
    Ok(admin
        .query("SELECT entry FROM suite_register_log ORDER BY id", &[])
        .map_err(|error| error.to_string())?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

/// The pid of the worker that last read the register at `url`.
pub fn last_reader(url: &str) -> Result<Option<u32>, String> {
    let mut register = PostgresRegister::connect(url)?;
    let holder: Option<i32> = register
        .client
        .query_one("SELECT holder FROM suite_register WHERE id = 1", &[])
        .map_err(|error| error.to_string())?
        .get(0);
    Ok(holder.and_then(|pid| u32::try_from(pid).ok()))
}
