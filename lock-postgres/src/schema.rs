//! The schema: its SQL (tables and functions, versioned), and how a backend checks it and
//! creates it on first use.

use std::time::Duration;

use dlock_core::LockError;
use sha2::{Digest, Sha256};
use tokio_postgres::error::SqlState;
use tokio_postgres::SimpleQueryMessage;

use crate::connection::{CallError, Connection};
use crate::durability::Durability;
use crate::error::to_lock_error;
use crate::keys::hex;

/// The schema's version: a backend finding an older one upgrades it (when allowed), and one
/// finding a newer one refuses to run on it.
pub const SCHEMA_VERSION: u32 = 15;

/// The schema used when none is set: `dlock`.
pub const DEFAULT_SCHEMA: &str = "dlock";

/// The schema's SQL, with `@S@` for the quoted schema name, `@SECRETS@` for its secrets' schema
/// ([`secrets_schema`]), `@CHANNEL@` for the notification
/// channel, `@VERSION@` for the version, and `@UNLOGGED@` / `@TABLES@` for whether the lease
/// tables are unlogged.
const SQL: &str = include_str!("sql/schema.sql");

/// First key of the advisory lock taken around creating a schema (`dlck` in ASCII); the second
/// is the hash of the schema's name.
const MIGRATION_LOCK: i32 = 0x646c_636b;

/// Checks a schema name: letters, digits and `_`, not starting with a digit, 1 to 63 bytes (a
/// PostgreSQL identifier that needs no escaping anywhere, and names the `LISTEN` channel too).
pub(crate) fn check_schema_name(schema: &str) -> Result<(), LockError> {
    let valid = !schema.is_empty()
        && schema.len() <= 63
        && schema
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !schema.starts_with(|c: char| c.is_ascii_digit());
    if valid {
        Ok(())
    } else {
        Err(LockError::config(format!(
            "schema {schema:?}: a schema name is 1 to 63 letters, digits or `_`, not starting \
             with a digit"
        )))
    }
}

/// The schema that keeps the secrets of schema `schema`'s fair waiters, which only its owner
/// and the lock users granted it may use: `<schema>$secrets`, a name no lock schema has (`$`
/// is not in one); for a schema name too long for that, its first 38 bytes, `$secrets$` and
/// 16 hex digits of its SHA-256 (63 bytes, PostgreSQL's longest identifier).
pub(crate) fn secrets_schema(schema: &str) -> String {
    const SUFFIX: &str = "$secrets";
    if schema.len() + SUFFIX.len() <= 63 {
        return format!("{schema}{SUFFIX}");
    }
    let hash = hex(&Sha256::digest(schema.as_bytes())[..8]);
    // Schema names are ASCII: any byte is a character boundary.
    format!("{}{SUFFIX}${hash}", &schema[..38])
}

/// The schema name as a quoted identifier.
pub(crate) fn quoted(schema: &str) -> String {
    format!("\"{schema}\"")
}

/// The SQL that creates schema `schema` (or upgrades it to this version), as one transaction
/// under an advisory lock so that two processes running it at once do not collide: what a
/// backend runs when it may create the schema, and what a DBA runs for an application user
/// that may not (`dlock postgres-schema` prints it). Running it again is harmless.
///
/// Its tables are logged, for every [`Durability`] but `Ephemeral` (see [`schema_sql_for`]).
///
/// ```
/// let sql = dlocks::postgres::schema_sql("dlock")?;
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS \"dlock\".locks"));
/// # Ok::<(), dlocks::LockError>(())
/// ```
///
/// # Errors
///
/// [`LockError::Config`] for a schema name that is not 1 to 63 letters, digits or `_`.
pub fn schema_sql(schema: &str) -> Result<String, LockError> {
    schema_sql_for(schema, Durability::On)
}

/// The SQL of [`schema_sql`] for backends of durability `durability`: with
/// [`Durability::Ephemeral`], the lease tables are `UNLOGGED`. The SQL refuses (SQLSTATE
/// `DL003`) to run on a schema whose tables are of the other sort.
///
/// ```
/// use dlocks::postgres::{schema_sql_for, Durability};
///
/// let sql = schema_sql_for("cache_locks", Durability::Ephemeral)?;
/// assert!(sql.contains("CREATE UNLOGGED TABLE IF NOT EXISTS \"cache_locks\".locks"));
/// # Ok::<(), dlocks::LockError>(())
/// ```
///
/// # Errors
///
/// As [`schema_sql`].
pub fn schema_sql_for(schema: &str, durability: Durability) -> Result<String, LockError> {
    let body = schema_body(schema, durability)?;
    Ok(format!(
        "BEGIN;\n{};\n{body}\nCOMMIT;\n",
        migration_lock(schema)
    ))
}

/// The statement that makes processes creating schema `schema` at once wait for each other.
fn migration_lock(schema: &str) -> String {
    format!("SELECT pg_advisory_xact_lock({MIGRATION_LOCK}, hashtext('{schema}'))")
}

/// The schema's statements, without the transaction around them.
fn schema_body(schema: &str, durability: Durability) -> Result<String, LockError> {
    check_schema_name(schema)?;
    let (unlogged, tables) = if durability.is_unlogged() {
        ("UNLOGGED ", UNLOGGED)
    } else {
        ("", LOGGED)
    };
    let body = SQL
        .replace("@SECRETS@", &quoted(&secrets_schema(schema)))
        .replace("@S@", &quoted(schema))
        .replace("@CHANNEL@", schema)
        .replace("@VERSION@", &SCHEMA_VERSION.to_string())
        .replace("@UNLOGGED@", unlogged)
        .replace("@TABLES@", tables);
    Ok(body)
}

/// The SQL granting `role` what the lock steps need on schema `schema` (nothing more: no
/// `CREATE`): its tables, and the fair waiters' secrets (`<schema>$secrets`), which a role
/// that may only read the locks must not be granted (it would turn the grants' proofs off).
///
/// ```
/// let grants = dlocks::postgres::grant_sql("dlock", "app")?;
/// assert!(grants.contains("GRANT USAGE ON SCHEMA \"dlock\" TO \"app\""));
/// # Ok::<(), dlocks::LockError>(())
/// ```
///
/// # Errors
///
/// [`LockError::Config`] for a schema name as [`schema_sql`] refuses it, or a role name with a
/// double quote or NUL in it.
pub fn grant_sql(schema: &str, role: &str) -> Result<String, LockError> {
    check_schema_name(schema)?;
    let s = quoted(schema);
    let secrets = quoted(&secrets_schema(schema));
    let r = quoted_role(role)?;
    Ok(format!(
        "GRANT USAGE ON SCHEMA {s} TO {r};\n\
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {r};\n\
         GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {s} TO {r};\n\
         GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {r};\n\
         GRANT USAGE ON SCHEMA {secrets} TO {r};\n\
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {secrets} TO {r};\n"
    ))
}

/// `role` as an SQL identifier.
pub(crate) fn quoted_role(role: &str) -> Result<String, LockError> {
    if role.is_empty() || role.contains(['"', '\0']) {
        return Err(LockError::config(format!(
            "role {role:?}: not a role name this command quotes"
        )));
    }
    Ok(format!("\"{role}\""))
}

/// `meta`'s `tables` for a schema with logged lease tables.
const LOGGED: &str = "logged";
/// `meta`'s `tables` for a schema with unlogged lease tables ([`Durability::Ephemeral`]).
const UNLOGGED: &str = "unlogged";

/// What a backend finds when it connects.
enum Found {
    Missing,
    /// The version, and whether the lease tables are unlogged.
    Version(u32, bool),
}

/// Makes sure the schema is there at this version: creates or upgrades it when `create` allows,
/// else says what to do. Returns the durability the backend runs with: `durability`, or, when
/// `from_schema`, the sort of the schema found (see [`durability_of`]).
pub(crate) fn ensure(
    con: &mut Connection,
    schema: &str,
    durability: Durability,
    from_schema: bool,
    create: bool,
    timeout: Duration,
    server: &str,
) -> Result<Durability, LockError> {
    let found = read_version(con, schema, timeout, server)?;
    let durability = match found {
        Found::Version(_, unlogged) if from_schema => durability_of(durability, unlogged),
        _ => durability,
    };
    if let Found::Version(_, unlogged) = found {
        if unlogged != durability.is_unlogged() {
            let (tables, want) = if unlogged {
                ("unlogged (made for Durability::Ephemeral)", "logged")
            } else {
                ("logged", "unlogged")
            };
            return Err(LockError::config(format!(
                "{server}: schema {schema:?} keeps its lease tables {tables}, and a backend of \
                 durability {durability} needs them {want}; use another schema for it (or let \
                 the schema decide: durability_from_schema(true))"
            )));
        }
    }
    match found {
        Found::Version(version, _) if version == SCHEMA_VERSION => return Ok(durability),
        Found::Version(version, _) if version > SCHEMA_VERSION => {
            return Err(LockError::config(format!(
                "{server}: schema {schema:?} is at version {version}, newer than this dlock's \
                 {SCHEMA_VERSION}; upgrade dlock, or use another schema"
            )))
        }
        _ => {}
    }
    if !create {
        let what = match found {
            Found::Missing => "does not exist".to_owned(),
            Found::Version(version, _) => {
                format!("is at version {version}, not {SCHEMA_VERSION}")
            }
        };
        return Err(LockError::config(format!(
            "{server}: the dlock schema {schema:?} {what}, and this backend may not create or \
             upgrade it (create_schema(false)); have it made with the SQL `dlock \
             postgres-schema --schema {schema}{ephemeral}` prints (see docs/postgres.md), or \
             by a program whose backend may (create_schema(true), the default)",
            ephemeral = if durability.is_unlogged() {
                " --ephemeral"
            } else {
                ""
            }
        )));
    }
    let body = schema_body(schema, durability)?;
    let failed = |error| {
        to_lock_error(
            error,
            &format!("creating the dlock schema {schema:?}"),
            server,
        )
    };
    // Creating it may wait behind another process doing the same: a few statement timeouts.
    con.batch(
        timeout * 4,
        &format!("BEGIN; {}; SAVEPOINT found", migration_lock(schema)),
    )
    .map_err(failed)?;
    // That process may have made it meanwhile: running the SQL again would lock the tables
    // (ALTER TABLE) against the lock steps of every process already using them.
    let found = read_version(con, schema, timeout, server);
    con.batch(timeout, "ROLLBACK TO SAVEPOINT found")
        .map_err(failed)?;
    if let Ok(Found::Version(SCHEMA_VERSION, unlogged)) = found {
        con.batch(timeout, "COMMIT").map_err(failed)?;
        if from_schema {
            return Ok(durability_of(durability, unlogged));
        }
        if unlogged == durability.is_unlogged() {
            return Ok(durability);
        }
        // Made of the other sort meanwhile: the check below says so.
        return ensure(con, schema, durability, false, false, timeout, server);
    }
    con.batch(timeout * 4, &format!("{body}\nCOMMIT;"))
        .map_err(failed)?;
    tracing::info!(
        server,
        schema,
        version = SCHEMA_VERSION,
        "dlock schema created or upgraded"
    );
    Ok(durability)
}

/// The durability a backend set to `durability` runs with on a schema whose lease tables are
/// `unlogged` or not, when the schema decides: `Ephemeral` on unlogged tables, else the one set
/// (`On` in place of `Ephemeral`).
fn durability_of(durability: Durability, unlogged: bool) -> Durability {
    match (unlogged, durability) {
        (true, _) => Durability::Ephemeral,
        (false, Durability::Ephemeral) => Durability::On,
        (false, durability) => durability,
    }
}

fn read_version(
    con: &mut Connection,
    schema: &str,
    timeout: Duration,
    server: &str,
) -> Result<Found, LockError> {
    let sql = format!(
        "SELECT value, (SELECT value FROM {s}.meta WHERE key = 'tables') FROM {s}.meta \
         WHERE key = 'version'",
        s = quoted(schema)
    );
    match con.simple(timeout, &sql) {
        Ok(messages) => {
            for message in messages {
                if let SimpleQueryMessage::Row(row) = message {
                    let text = row.get(0).unwrap_or("");
                    let unlogged = row.get(1) == Some(UNLOGGED);
                    return text
                        .parse()
                        .map(|version| Found::Version(version, unlogged))
                        .map_err(|_| {
                            LockError::config(format!(
                                "{server}: schema {schema:?} has version {text:?}, not a number"
                            ))
                        });
                }
            }
            Ok(Found::Missing)
        }
        Err(CallError::Db(error))
            if error.code() == Some(&SqlState::UNDEFINED_TABLE)
                || error.code() == Some(&SqlState::INVALID_SCHEMA_NAME) =>
        {
            Ok(Found::Missing)
        }
        Err(error) => Err(to_lock_error(
            error,
            &format!("reading the version of the dlock schema {schema:?}"),
            server,
        )),
    }
}

/// Checks that the database stores text as UTF-8: lock names are any UTF-8 text, and the
/// release keys hash their UTF-8 bytes on both sides.
pub(crate) fn check_encoding(
    con: &mut Connection,
    timeout: Duration,
    server: &str,
) -> Result<(), LockError> {
    let messages = con
        .simple(timeout, "SHOW server_encoding")
        .map_err(|error| to_lock_error(error, "reading the server's encoding", server))?;
    for message in messages {
        if let SimpleQueryMessage::Row(row) = message {
            let encoding = row.get(0).unwrap_or("");
            if encoding.eq_ignore_ascii_case("UTF8") {
                return Ok(());
            }
            return Err(LockError::config(format!(
                "{server}: the database's encoding is {encoding}, and dlock needs UTF8 (lock \
                 names are any UTF-8 text); use a database created with ENCODING 'UTF8'"
            )));
        }
    }
    Err(LockError::protocol(format!(
        "{server} did not answer SHOW server_encoding"
    )))
}

#[cfg(test)]
mod tests {
    use super::{check_schema_name, grant_sql, schema_sql, secrets_schema};

    #[test]
    fn a_schemas_secrets_live_in_a_schema_no_lock_schema_can_be() {
        assert_eq!(secrets_schema("dlock"), "dlock$secrets");
        let long = "x".repeat(63);
        let longer = format!("{}y", "x".repeat(62));
        for name in [&long, &longer] {
            let secrets = secrets_schema(name);
            assert!(secrets.len() <= 63, "{secrets}");
            assert!(check_schema_name(&secrets).is_err(), "{secrets}");
        }
        assert_ne!(secrets_schema(&long), secrets_schema(&longer));
    }

    #[test]
    fn schema_names_need_no_quoting() {
        for good in ["dlock", "locks_2", "_x", "A"] {
            assert!(check_schema_name(good).is_ok(), "{good}");
        }
        for bad in ["", "2x", "a-b", "a\"b", "a b", "é", &"x".repeat(64)] {
            assert!(check_schema_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_sql_has_no_placeholder_left() {
        let sql = schema_sql("locks_2").expect("sql");
        assert!(!sql.contains('@'), "a placeholder is left");
        assert!(sql.contains("pg_notify('locks_2'"));
        assert!(sql.starts_with("BEGIN;") && sql.trim_end().ends_with("COMMIT;"));
        assert!(grant_sql("dlock", "a\"b").is_err());
    }
}
