//! The fence where the data lives: a write carries its hold's fencing token, and the database
//! that keeps the data refuses it, in the writer's own transaction, once a newer token wrote.
//!
//! A lease lock cannot stop a holder that paused (a GC pause, a stopped VM, a slow network)
//! from writing after its lease ran out and another holder took the lock. Its token can: the
//! next holder's token is higher, and once that holder wrote, the late write is refused. The
//! check and the write must be one atomic step, so the check runs inside the transaction that
//! writes: [`check`] calls the `dlock_fence(resource, token)` function [`install`] puts in the
//! data's database, which takes the resource's fence row lock until the transaction ends (two
//! writers checking at once take turns), refuses an older token than the newest that wrote, and
//! admits the same token again (one hold writing twice).
//!
//! Any driver or language can call the function as plain SQL: `SELECT dlock_fence('account:1',
//! 42)` raises SQLSTATE `DL101` for a stale token, which aborts the transaction.
//!
//! # Examples
//!
//! ```no_run
//! use dlocks::LockClient;
//! use dlocks::fence::postgres as fence;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = LockClient::new(dlocks::MemoryBackend::new());
//! let mut data = postgres::Client::connect("postgres://app@127.0.0.1/app", postgres::NoTls)?;
//! fence::install(&mut data)?; // once; `dlock postgres-schema --fence` prints the same SQL
//!
//! let guard = client.fenced_lock("account:1").lock()?;
//! let mut tx = data.transaction()?;
//! fence::check(&mut tx, "account:1", guard.token())?; // a stale token ends here
//! tx.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 1", &[])?;
//! tx.commit()?;
//! guard.unlock()?;
//! # Ok(())
//! # }
//! ```

use dlock_core::LockError;
use postgres::GenericClient;

use crate::schema::{check_schema_name, quoted, quoted_role};

/// The SQLSTATE `dlock_fence` raises for a stale token; its DETAIL is the newest token.
pub const STALE_TOKEN: &str = "DL101";

const SQL: &str = include_str!("sql/fence.sql");

/// Serializes processes installing the fence in one schema at once (`CREATE OR REPLACE
/// FUNCTION` run twice at once fails with "tuple concurrently updated").
const INSTALL_LOCK: i32 = 0x646c_6663;

/// The SQL that installs the fence (the `dlock_fences` table and the `dlock_fence` function) in
/// schema `schema` of the data's database, in one transaction; running it again changes
/// nothing.
///
/// ```
/// let sql = dlocks::fence::postgres::install_sql("public")?;
/// assert!(sql.contains("CREATE OR REPLACE FUNCTION \"public\".dlock_fence"));
/// # Ok::<(), dlocks::LockError>(())
/// ```
///
/// # Errors
///
/// [`LockError::Config`] for a schema name that is not 1 to 63 letters, digits or `_`.
pub fn install_sql(schema: &str) -> Result<String, LockError> {
    check_schema_name(schema)?;
    Ok(format!(
        "BEGIN;\nSELECT pg_advisory_xact_lock({INSTALL_LOCK}, hashtext('{schema}'));\n{}\nCOMMIT;\n",
        SQL.replace("@S@", &quoted(schema))
    ))
}

/// The SQL granting `role` what a writer needs of the fence in schema `schema`: calling
/// `dlock_fence` (which writes its table with the caller's rights).
///
/// ```
/// let grants = dlocks::fence::postgres::grant_sql("public", "app")?;
/// assert!(grants.contains("GRANT EXECUTE ON FUNCTION \"public\".dlock_fence(text, bigint) TO \"app\""));
/// # Ok::<(), dlocks::LockError>(())
/// ```
///
/// # Errors
///
/// [`LockError::Config`] for a schema name as [`install_sql`] refuses it, or a role name with a
/// double quote or NUL in it.
pub fn grant_sql(schema: &str, role: &str) -> Result<String, LockError> {
    check_schema_name(schema)?;
    let (s, r) = (quoted(schema), quoted_role(role)?);
    Ok(format!(
        "GRANT USAGE ON SCHEMA {s} TO {r};\n\
         GRANT SELECT, INSERT, UPDATE ON {s}.dlock_fences TO {r};\n\
         GRANT EXECUTE ON FUNCTION {s}.dlock_fence(text, bigint) TO {r};\n"
    ))
}

/// Installs the fence in the first schema of `client`'s search path (where [`check`] and a
/// plain `SELECT dlock_fence(..)` then find it), if it is not there yet. Needs the right to
/// create in that schema; the writers need only `EXECUTE` on the function and `SELECT,
/// INSERT, UPDATE` on the table.
///
/// # Errors
///
/// [`LockError::Config`] when the search path names no schema (or one whose name
/// [`install_sql`] refuses), [`LockError::Unavailable`] when the server could not be reached,
/// [`LockError::Protocol`] for what the server refused (missing rights).
pub fn install(client: &mut impl GenericClient) -> Result<(), LockError> {
    let schema: Option<String> = client
        .query_one("SELECT current_schema()", &[])
        .and_then(|row| row.try_get(0))
        .map_err(|error| to_lock_error(error, "reading the search path"))?;
    let Some(schema) = schema else {
        return Err(LockError::config(
            "the search path names no schema to install the fence in",
        ));
    };
    client
        .batch_execute(&install_sql(&schema)?)
        .map_err(|error| to_lock_error(error, "installing the fence"))
}

/// Admits a write of `resource` by the holder of fencing token `token`, inside the transaction
/// `tx` that writes it: refuses a token older than the newest one that wrote `resource` (the
/// transaction is then aborted, so nothing it wrote commits). The resource's fence row stays
/// locked until `tx` ends, so a writer checking at once waits for it.
///
/// Tokens are compared per resource, whichever lock or backend they came from: use one lock
/// name per resource (or a resource per lock name), so the tokens of one resource increase.
///
/// # Errors
///
/// [`LockError::StaleToken`] when a newer token already wrote; [`LockError::InvalidArgument`]
/// for a token past 2^63 - 1 (no backend hands one out); [`LockError::Unavailable`] and
/// [`LockError::Protocol`] as [`install`] (a missing fence is a `Protocol` error naming
/// `dlock_fence`).
pub fn check(tx: &mut impl GenericClient, resource: &str, token: u64) -> Result<(), LockError> {
    let stored = i64::try_from(token).map_err(|_| {
        LockError::invalid(
            "token",
            format!("fencing token {token} is past what PostgreSQL's bigint holds"),
        )
    })?;
    match tx.query_one("SELECT dlock_fence($1, $2)", &[&resource, &stored]) {
        Ok(_) => Ok(()),
        Err(error) => Err(stale(&error, resource, token)
            .unwrap_or_else(|| to_lock_error(error, "checking the fence"))),
    }
}

/// The [`LockError::StaleToken`] `error` is, if it is one.
fn stale(error: &postgres::Error, resource: &str, token: u64) -> Option<LockError> {
    let db = error.as_db_error()?;
    if db.code().code() != STALE_TOKEN {
        return None;
    }
    let newest = db.detail()?.parse().ok()?;
    Some(LockError::StaleToken {
        resource: resource.to_owned(),
        token,
        newest,
    })
}

/// `error`, raised while doing `what` on the data's database, as a [`LockError`]: what the
/// server answered is a protocol error, a connection that failed is unavailable.
fn to_lock_error(error: postgres::Error, what: &str) -> LockError {
    match error.as_db_error() {
        Some(db) => LockError::Protocol {
            message: format!(
                "the data's database answered while {what}: {} (SQLSTATE {})",
                db.message(),
                db.code().code()
            ),
            lock: None,
            source: Some(Box::new(error)),
        },
        None => LockError::unavailable(
            format!("the data's database was unavailable while {what}: {error}"),
            error,
        ),
    }
}
