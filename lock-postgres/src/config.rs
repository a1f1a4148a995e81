//! The backend's settings and their builder.

use std::fmt;
use std::time::Duration;

use dlock_core::backend::validate_setting;
use dlock_core::LockError;

use crate::backend::PostgresBackend;
use crate::durability::Durability;
use crate::schema::{check_schema_name, DEFAULT_SCHEMA};
use crate::tls::TlsSettings;

/// Default number of pooled connections.
pub(crate) const DEFAULT_POOL_SIZE: u32 = 10;
/// Default bound on opening a connection (TCP, TLS, startup, authentication).
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default bound on waiting for the answer to one lock step.
pub(crate) const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default bound on waiting for a pooled connection.
pub(crate) const DEFAULT_CHECKOUT_TIMEOUT: Duration = Duration::from_secs(5);

/// The settings a [`PostgresBackend`] runs with.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) url: String,
    pub(crate) pool_size: u32,
    pub(crate) schema: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) statement_timeout: Duration,
    pub(crate) checkout_timeout: Duration,
    pub(crate) durability: Durability,
    pub(crate) durability_from_schema: bool,
    pub(crate) create_schema: bool,
    pub(crate) prepared_statements: bool,
    pub(crate) tls: TlsSettings,
}

/// Configures and connects a [`PostgresBackend`], from [`PostgresBackend::builder`].
///
/// Every network operation of the backend is bounded by these timeouts, so no lock call can
/// hang on an unreachable, paused or overloaded server: it fails with
/// [`LockError::Unavailable`] instead.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use dlocks::postgres::{Durability, PostgresBackend};
///
/// let backend = PostgresBackend::builder("postgres://app:secret@10.0.0.5:5432/app")
///     .pool_size(16)
///     .schema("dlock")
///     .connect_timeout(Duration::from_secs(1))
///     .statement_timeout(Duration::from_millis(500))
///     .checkout_timeout(Duration::from_secs(2))
///     .synchronous_commit(Durability::On)
///     .create_schema(true)
///     .build()?;
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct PostgresBackendBuilder {
    settings: Settings,
}

impl PostgresBackendBuilder {
    pub(crate) fn new(url: &str) -> Self {
        PostgresBackendBuilder {
            settings: Settings {
                url: url.to_owned(),
                pool_size: DEFAULT_POOL_SIZE,
                schema: DEFAULT_SCHEMA.to_owned(),
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
                checkout_timeout: DEFAULT_CHECKOUT_TIMEOUT,
                durability: Durability::On,
                durability_from_schema: false,
                create_schema: true,
                prepared_statements: true,
                tls: TlsSettings::default(),
            },
        }
    }

    /// The most connections kept open for lock steps at once (default 10). Threads that find
    /// all of them busy wait up to the [checkout timeout](Self::checkout_timeout). Waiting for
    /// a lock holds no connection, and the listening connection is not counted.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.settings.pool_size = size;
        self
    }

    /// The schema holding the lock tables and functions (default `dlock`): letters, digits and
    /// `_`, not starting with a digit, at most 63 bytes. Releases are announced on the
    /// `LISTEN` channel of the same name. Clients share locks exactly when they use the same
    /// database and schema.
    pub fn schema(mut self, schema: &str) -> Self {
        self.settings.schema = schema.to_owned();
        self
    }

    /// How long opening a connection may take, TLS and authentication included (default 3 s).
    /// With several hosts in the URL, each host gets this long.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// How long the answer to one lock step may take (default 3 s). A server that stops
    /// answering (paused, overloaded, partitioned) makes lock calls fail with
    /// [`LockError::Unavailable`] after this long instead of hanging; the connection is then
    /// dropped, since its answer may still come.
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.settings.statement_timeout = timeout;
        self
    }

    /// How long a call waits for a free pooled connection, including opening a new one when
    /// the pool has none (default 5 s).
    pub fn checkout_timeout(mut self, timeout: Duration) -> Self {
        self.settings.checkout_timeout = timeout;
        self
    }

    /// The `synchronous_commit` of every lock step's transaction (default
    /// [`Durability::On`]): what a crash or a failover can lose, against how long a step
    /// takes. See [`Durability`].
    pub fn synchronous_commit(mut self, durability: Durability) -> Self {
        self.settings.durability = durability;
        self
    }

    /// Whether the backend creates the schema (or upgrades it) when it finds it missing or
    /// older (default on). That needs the `CREATE` right on the database; off, a missing or
    /// older schema is a [`LockError::Config`] error telling to run the SQL that
    /// [`schema_sql`](crate::schema_sql) returns (`dlock postgres-schema` prints it), and
    /// building the backend writes nothing at all: what a tool that only reads (or an
    /// application user without `CREATE`) opens a database with.
    pub fn create_schema(mut self, create: bool) -> Self {
        self.settings.create_schema = create;
        self
    }

    /// Whether the schema found decides if leases are [`Durability::Ephemeral`] (default off).
    ///
    /// Off, a backend refuses a schema of the other sort (unlogged lease tables for a logged
    /// durability, or the reverse). On, a schema made for `Ephemeral` makes this backend
    /// ephemeral, and a logged one makes it use the
    /// [`synchronous_commit`](Self::synchronous_commit) set (`On` in place of `Ephemeral`): for
    /// tools pointed at whatever deployment there is (the `dlock` command), where the sort is
    /// the schema's, not the operator's to know. A schema the backend creates is of the sort
    /// of the durability set. [`PostgresBackend::durability`] says which it runs with.
    ///
    /// ```no_run
    /// use dlocks::postgres::PostgresBackend;
    ///
    /// // Opens the deployment as it is: no schema created or upgraded, either sort of tables.
    /// let backend = PostgresBackend::builder("postgres://ops@db:5432/app")
    ///     .schema("app_locks")
    ///     .create_schema(false)
    ///     .durability_from_schema(true)
    ///     .build()?;
    /// println!("{} runs with synchronous_commit {}", backend.server(), backend.durability());
    /// # Ok::<(), dlocks::LockError>(())
    /// ```
    pub fn durability_from_schema(mut self, from_schema: bool) -> Self {
        self.settings.durability_from_schema = from_schema;
        self
    }

    /// Whether each connection prepares its statements once and runs them by name (default
    /// on). Behind a pooler in transaction mode (PgBouncer before 1.21, or with
    /// `max_prepared_statements = 0`), turn it off: every step then sends its SQL, parsed by
    /// the server each time, still in one round trip.
    pub fn prepared_statements(mut self, prepared: bool) -> Self {
        self.settings.prepared_statements = prepared;
        self
    }

    /// Trusts the certificate authority in `pem` (PEM, one or more certificates) besides the
    /// system's roots, for servers whose certificate a private CA signed. TLS is used when the
    /// URL says `sslmode=require`; the server's certificate is then always checked, and its
    /// name (or IP address) must match the URL's host, as libpq's `verify-full` does. Setting
    /// a certificate on a URL that does not ask for TLS is a [`LockError::Config`] error.
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.settings.tls.root_certificate = Some(pem.into());
        self
    }

    /// Presents this certificate chain and private key (both PEM) to servers that ask for a
    /// client certificate (`hostssl ... cert` in `pg_hba.conf`).
    #[cfg(feature = "tls")]
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.settings.tls.client_certificate = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Checks the settings, connects, checks the server (a UTF-8 database) and the schema
    /// (creating it when allowed).
    ///
    /// # Errors
    ///
    /// - [`LockError::Config`]: the URL cannot be parsed, a setting is out of range, the server
    ///   refused the credentials or the database, the database is not UTF-8, or the schema is
    ///   missing (or of another version) and may not be created.
    /// - [`LockError::Unavailable`]: nothing answered within the connect timeout.
    /// - [`LockError::Protocol`]: the server refused creating the schema (missing rights).
    pub fn build(self) -> Result<PostgresBackend, LockError> {
        self.validate()?;
        PostgresBackend::from_settings(self.settings)
    }

    fn validate(&self) -> Result<(), LockError> {
        let s = &self.settings;
        if s.pool_size == 0 {
            return Err(LockError::config("pool_size must be at least 1"));
        }
        check_schema_name(&s.schema)?;
        for (name, value) in [
            ("connect_timeout", s.connect_timeout),
            ("statement_timeout", s.statement_timeout),
            ("checkout_timeout", s.checkout_timeout),
        ] {
            validate_setting(name, value, Duration::from_millis(1))?;
        }
        Ok(())
    }
}

impl fmt::Debug for PostgresBackendBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        f.debug_struct("PostgresBackendBuilder")
            .field("url", &crate::url::redact_url(&s.url))
            .field("pool_size", &s.pool_size)
            .field("schema", &s.schema)
            .field("connect_timeout", &s.connect_timeout)
            .field("statement_timeout", &s.statement_timeout)
            .field("checkout_timeout", &s.checkout_timeout)
            .field("synchronous_commit", &s.durability)
            .field("durability_from_schema", &s.durability_from_schema)
            .field("create_schema", &s.create_schema)
            .field("prepared_statements", &s.prepared_statements)
            .field("tls_root_certificate", &s.tls.root_certificate.is_some())
            .field(
                "tls_client_certificate",
                &s.tls.client_certificate.is_some(),
            )
            .finish()
    }
}
