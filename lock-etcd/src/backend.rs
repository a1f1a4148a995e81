//! [`EtcdBackend`]: the connection, the leases and the watches one backend shares.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::backend::{LockRef, OwnerId};
use dlock_core::{LockError, LockKind};
use serde_json::Value;

use crate::config::EtcdBackendBuilder;
use crate::http::{Dialer, Endpoint};
use crate::keys::{Family, NameKeys};
use crate::leases::{hold_id, Granted, HoldRecord, Leases, SessionKey};
use crate::transport::{Fail, Resend, Transport};
use crate::watch::Watches;
use crate::wire::{first_created, txn, Kv, TxnAnswer};

/// Locks on etcd (3.4 or later), through its v3 JSON gateway.
///
/// The layout is etcd's own `concurrency.Mutex` and `Election`: the lock named `N` is the key
/// prefix `N/`, each contender a key under it bound to a lease, and the one created first
/// holds; so `etcdctl lock N`, `etcdctl elect N` and Go services using those packages exclude
/// dlock's holders and are excluded by them. Fencing tokens are create revisions. See
/// `docs/etcd.md` for the keys of every kind.
///
/// Clones share the connections, leases and watches.
#[derive(Clone)]
pub struct EtcdBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) transport: Arc<Transport>,
    pub(crate) leases: Leases,
    pub(crate) watches: Arc<Watches>,
    pub(crate) namespace: String,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.inner.transport.describe())
            .field("namespace", &self.inner.namespace)
            .finish_non_exhaustive()
    }
}

impl EtcdBackend {
    /// Connects to etcd at `endpoints` (`http://host:port`, or several separated by commas, as
    /// etcdctl's `--endpoints`) with the default settings.
    ///
    /// # Errors
    ///
    /// As [`EtcdBackendBuilder::build`].
    pub fn connect(endpoints: &str) -> Result<EtcdBackend, LockError> {
        Self::builder(endpoints).build()
    }

    /// A builder for a backend on `endpoints`, for credentials, TLS, timeouts and a
    /// namespace.
    pub fn builder(endpoints: &str) -> EtcdBackendBuilder {
        EtcdBackendBuilder::new(endpoints)
    }

    pub(crate) fn from_builder(
        builder: EtcdBackendBuilder,
        endpoints: Vec<Endpoint>,
    ) -> Result<EtcdBackend, LockError> {
        let dialer = Dialer {
            connect_timeout: builder.connect_timeout,
            #[cfg(feature = "tls")]
            tls: crate::tls::client_config(&builder, &endpoints)?,
        };
        #[cfg(not(feature = "tls"))]
        if endpoints.iter().any(|e| e.tls)
            || !builder.root_certificates.is_empty()
            || builder.client_certificate.is_some()
        {
            return Err(LockError::config(
                "https:// endpoints and TLS certificates need dlock-etcd's `tls` feature",
            ));
        }
        let transport = Arc::new(Transport::new(
            endpoints,
            dialer,
            builder.request_timeout,
            builder.user.clone(),
        ));
        transport.authenticate()?;
        // One read of the member's own copy, so a backend that builds is one that reaches
        // etcd (also while its members elect a leader).
        transport
            .call(
                "/v3/kv/range",
                &serde_json::json!({
                    "key": crate::wire::b64(b"\0"),
                    "count_only": true,
                    "serializable": true,
                }),
                Resend::Safe,
            )
            .map_err(LockError::from)?;
        let leases = Leases::new(transport.clone(), builder.watchdog_lease);
        Ok(EtcdBackend {
            inner: Arc::new(Inner {
                watches: Arc::new(Watches::new(transport.clone())),
                transport,
                leases,
                namespace: builder.namespace,
            }),
        })
    }

    /// How many etcd watches this backend has open: one per name that has waiters (or
    /// observers) in this process, however many there are.
    pub fn watch_streams(&self) -> usize {
        self.inner.watches.streams()
    }

    /// The key prefix of lock `name` (`<namespace><name>/`, `/` and `%` in the name escaped):
    /// what `etcdctl lock` and `etcdctl elect` take as the name.
    pub fn key_prefix(&self, name: &str) -> String {
        String::from_utf8_lossy(&self.inner.keys(name).prefix).into_owned()
    }
}

impl Inner {
    pub(crate) fn keys(&self, name: &str) -> NameKeys {
        NameKeys::new(&self.namespace, name)
    }

    /// Runs a transaction that writes (never sent again blind: an answer lost is an error).
    pub(crate) fn write(
        &self,
        compare: Vec<Value>,
        success: Vec<Value>,
        failure: Vec<Value>,
    ) -> Result<TxnAnswer, Fail> {
        self.transport
            .call("/v3/kv/txn", &txn(compare, success, failure), Resend::Never)
            .map(TxnAnswer::from_value)
    }

    /// Deletes one key; how many went (0 or 1). Never sent again blind.
    pub(crate) fn delete_key(&self, key: &[u8]) -> Result<i64, LockError> {
        self.transport
            .call(
                "/v3/kv/deleterange",
                &serde_json::json!({ "key": crate::wire::b64(key) }),
                Resend::Never,
            )
            .map(|answer| crate::wire::int(&answer["deleted"]))
            .map_err(LockError::from)
    }

    /// Runs a transaction that only reads.
    pub(crate) fn read(&self, ops: Vec<Value>) -> Result<TxnAnswer, LockError> {
        self.transport
            .call(
                "/v3/kv/txn",
                &txn(Vec::new(), ops, Vec::new()),
                Resend::Safe,
            )
            .map(TxnAnswer::from_value)
            .map_err(LockError::from)
    }

    /// The first contender of `name` (the holder of an exclusive kind), if any.
    pub(crate) fn first(&self, keys: &NameKeys) -> Result<Option<Kv>, LockError> {
        Ok(self
            .read(vec![first_created(&keys.all(), 1)])?
            .kvs(0)?
            .into_iter()
            .next())
    }

    /// `WrongKind` if `first` (the name's first key) shows the name in use as another family
    /// than `lock`'s. A key of another program counts as an exclusive lock or an election
    /// (etcd's `Mutex` and `Election`), and as another kind for the rest.
    pub(crate) fn check_kind(
        &self,
        lock: LockRef<'_>,
        keys: &NameKeys,
        first: Option<&Kv>,
    ) -> Result<(), LockError> {
        let Some(first) = first else {
            return Ok(());
        };
        let wanted = Family::of(lock.kind);
        match keys.family_of_key(&first.key) {
            Some(found) if Some(found) == wanted => Ok(()),
            None if matches!(wanted, Some(Family::Lock | Family::Election)) => Ok(()),
            found => Err(LockError::WrongKind {
                name: lock.name.to_owned(),
                expected: lock.kind,
                found: found
                    .map_or("a lock of another etcd program", Family::describe)
                    .to_owned(),
            }),
        }
    }

    /// How a hold that is not on the store any more ended, as far as the store tells: taken
    /// over if someone else holds the name now, else gone.
    pub(crate) fn loss(&self, keys: &NameKeys) -> dlock_core::backend::LossReason {
        match self.first(keys) {
            Ok(Some(_)) => dlock_core::backend::LossReason::TakenOver,
            _ => dlock_core::backend::LossReason::Gone,
        }
    }

    /// Remembers the hold `owner` made of `lock` at `key`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn remember(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        key: Vec<u8>,
        create_revision: i64,
        lease: Granted,
        session: Option<SessionKey>,
        asked: Duration,
        sent_at: Instant,
    ) {
        self.leases.record(
            hold_id(lock, owner),
            HoldRecord {
                key,
                create_revision,
                lease,
                session,
                asked,
                sent_at,
                renewed: false,
            },
        );
    }

    pub(crate) fn unsupported(lock: LockRef<'_>) -> LockError {
        LockError::Unsupported {
            name: lock.name.to_owned(),
            kind: lock.kind,
        }
    }

    pub(crate) fn family(lock: LockRef<'_>) -> Result<Family, LockError> {
        Family::of(lock.kind).ok_or_else(|| Self::unsupported(lock))
    }

    /// Whether `kind`'s new holds carry a fencing token (their key's create revision).
    pub(crate) fn fenced(kind: LockKind) -> bool {
        kind.is_fenced()
    }
}
