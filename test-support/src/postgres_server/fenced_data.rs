//! The PostgreSQL harness's data behind the fence: a table of values in the server's database,
//! written in transactions that call `dlocks::fence::postgres::check` first.

use dlocks::fence::postgres as fence;
use dlocks::LockError;

use super::PostgresServer;
use crate::server_cases::fenced_writes::{FencedData, FencedStore};

/// Values in a table, each write a transaction behind the fence.
struct FencedTable(postgres::Client);

impl FencedStore for FencedTable {
    fn write(&mut self, resource: &str, value: &str, token: u64) -> Result<(), LockError> {
        let mut tx = self.0.transaction().expect("begin");
        fence::check(&mut tx, resource, token)?;
        tx.execute(
            "INSERT INTO fenced_values (resource, value) VALUES ($1, $2) \
             ON CONFLICT (resource) DO UPDATE SET value = excluded.value",
            &[&resource, &value],
        )
        .expect("write");
        tx.commit().expect("commit");
        Ok(())
    }

    fn read(&mut self, resource: &str) -> Option<String> {
        self.0
            .query_opt(
                "SELECT value FROM fenced_values WHERE resource = $1",
                &[&resource],
            )
            .expect("read")
            .map(|row| row.get(0))
    }
}

impl FencedData for PostgresServer {
    fn fenced_store(&self) -> Box<dyn FencedStore> {
        let mut client = self.admin();
        fence::install(&mut client).expect("install the fence");
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS fenced_values (resource text PRIMARY KEY, value text)",
            )
            .expect("the data's table");
        Box::new(FencedTable(client))
    }
}
