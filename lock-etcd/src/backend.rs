//! [`EtcdBackend`]: the connection, the leases and the watches one backend shares.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use dlock_core::backend::{LockRef, LossReason, OwnerId};
use dlock_core::{LockError, LockKind};

use crate::config::EtcdBackendBuilder;
use crate::gate::Gates;
use crate::holds::{hold_id, HoldRecord, Holds, PendingMove};
use crate::http::{Dialer, Endpoint};
use crate::keys::{shares_key, Family, NameKeys};
use crate::leases::{Granted, Leases, SessionKey};
use crate::place_lease::PlaceLease;
use crate::reader_marks::ReaderMarks;
use crate::revisions::Revisions;
use crate::steps::Places;
use crate::transport::{Fail, Resend, Transport};
use crate::turns::Turns;
use crate::watch::Watches;
use crate::wire::{
    created_at, exists, first_created, range, txn, value_is, Json, Kv, Span, TxnAnswer,
};

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
    pub(crate) holds: Holds,
    pub(crate) gates: Gates,
    pub(crate) watches: Arc<Watches>,
    pub(crate) namespace: String,
    /// When the store's revisions were seen (see [`Revisions`]).
    pub(crate) revisions: Revisions,
    /// Fair waiters' places, for an attempt in one call, a wake-up by turn and a give-up.
    pub(crate) places: Places,
    /// The lease the places share, kept alive while they are wanted.
    pub(crate) place_lease: PlaceLease,
    pub(crate) reader_marks: ReaderMarks,
    /// The plain lock's waiters' marks seen first (see [`Turns`]).
    pub(crate) turns: Turns,
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
    /// etcdctl's `--endpoints`; or the `dlock` command's `etcd://[user:password@]host:port
    /// [,host:port...]`, `etcds://` for HTTPS) with the default settings.
    ///
    /// # Errors
    ///
    /// As [`EtcdBackendBuilder::build`].
    pub fn connect(endpoints: &str) -> Result<EtcdBackend, LockError> {
        Self::builder(endpoints).build()
    }

    /// A builder for a backend on `endpoints` (as [`connect`](Self::connect) takes them), for
    /// credentials, TLS, timeouts and a namespace.
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
                "https:// endpoints and TLS certificates need the `tls` feature of dlocks \
                 (features = [\"etcd\", \"tls\"])",
            ));
        }
        let transport = Arc::new(Transport::new(
            endpoints,
            dialer,
            builder.request_timeout,
            builder.user.clone(),
        ));
        transport.authenticate()?;
        // One read of a member's own copy, so a backend that builds is one that reaches etcd
        // (also while its members elect a leader): each endpoint in turn, a request timeout
        // each, until one answers.
        let probe = Json::from(serde_json::json!({
            "key": crate::wire::b64(b"\0"),
            "count_only": true,
            "serializable": true,
        }));
        let mut tried = 0;
        while let Err(fail) = transport.call("/v3/kv/range", &probe, Resend::Safe) {
            tried += 1;
            if tried >= transport.endpoint_count() {
                return Err(fail.into());
            }
        }
        let leases = Leases::new(transport.clone(), builder.watchdog_lease);
        let place_lease = PlaceLease::new(transport.clone());
        Ok(EtcdBackend {
            inner: Arc::new(Inner {
                watches: Arc::new(Watches::new(transport.clone())),
                transport,
                leases,
                holds: Holds::default(),
                gates: Gates::default(),
                namespace: builder.namespace,
                revisions: Revisions::default(),
                places: Places::default(),
                place_lease,
                reader_marks: ReaderMarks::default(),
                turns: Turns::default(),
            }),
        })
    }

    /// How many etcd watches this backend has open: one per name that has waiters (or
    /// observers) in this process, however many there are, one more for the marks of a
    /// plain or read-write lock's waiters, and one more where a read-write lock's readers wait
    /// beside its writers (readers watch only the writers' holds). A name's watch stays open
    /// for a second after its last waiter left, for the next waiter to find in place.
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
        compare: Vec<Json>,
        success: Vec<Json>,
        failure: Vec<Json>,
    ) -> Result<TxnAnswer, Fail> {
        self.transport
            .call("/v3/kv/txn", &txn(compare, success, failure), Resend::Never)
            .map(|answer| self.seen(TxnAnswer::from_value(answer)))
    }

    /// `answer`, its revision noted as seen now.
    fn seen(&self, answer: TxnAnswer) -> TxnAnswer {
        self.revisions.saw(answer.revision);
        answer
    }

    /// Runs a transaction that writes and may be sent again after its answer was lost: one
    /// whose second run answers as its first (it keeps its answer under its request's id).
    pub(crate) fn write_latched(
        &self,
        compare: Vec<Json>,
        success: Vec<Json>,
        failure: Vec<Json>,
    ) -> Result<TxnAnswer, Fail> {
        self.transport
            .call("/v3/kv/txn", &txn(compare, success, failure), Resend::Safe)
            .map(|answer| self.seen(TxnAnswer::from_value(answer)))
    }

    /// Runs a transaction that only reads.
    pub(crate) fn read(&self, ops: Vec<Json>) -> Result<TxnAnswer, LockError> {
        self.transport
            .call(
                "/v3/kv/txn",
                &txn(Vec::new(), ops, Vec::new()),
                Resend::Safe,
            )
            .map(|answer| self.seen(TxnAnswer::from_value(answer)))
            .map_err(LockError::from)
    }

    /// `WrongKind` if `first` (the name's first live key) shows the name in use as another
    /// family than `lock`'s. A key of another program counts as an exclusive lock or an
    /// election (etcd's `Mutex` and `Election`), and as another kind for the rest.
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
            // etcd's own `Mutex` and `Election` contenders: the exclusive kinds wait for them,
            // and the fair lock's waiters queue with them.
            None if matches!(wanted, Some(Family::Lock | Family::Fair | Family::Election)) => {
                Ok(())
            }
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
    /// over if someone else holds the name now, else force-unlocked if its tombstone is there,
    /// else gone.
    pub(crate) fn loss(&self, keys: &NameKeys, owner: &OwnerId) -> LossReason {
        let found = self.read(vec![
            first_created(&keys.all(), 1),
            range(&Span::key(&keys.ended(owner.as_str()))),
        ]);
        match found {
            Ok(answer) if answer.kvs(0).is_ok_and(|kvs| !kvs.is_empty()) => LossReason::TakenOver,
            Ok(answer) if answer.kvs(1).is_ok_and(|kvs| !kvs.is_empty()) => {
                LossReason::ForceUnlocked
            }
            _ => LossReason::Gone,
        }
    }

    /// The comparison that holds while `key` is `owner`'s hold of `lock`: the key's value names
    /// it (a key holds of a client, the fair lock's holder key), or the key is there (a key of
    /// the hold's own).
    pub(crate) fn mine(lock: LockRef<'_>, owner: &OwnerId, key: &[u8]) -> Json {
        if shares_key(lock.kind) {
            value_is(key, owner.as_str().as_bytes())
        } else {
            exists(&Span::key(key))
        }
    }

    /// The comparisons that hold while `key` is `owner`'s hold of `lock`, as this backend
    /// `recorded` it: as [`mine`](Self::mine); or, for a hold its waiter's turn made
    /// (`HoldRecord::turn_of`), that its place was not deleted since (its create revision):
    /// the hold is the place until its first renewal writes its id into it, and after.
    pub(crate) fn mine_as_recorded(
        lock: LockRef<'_>,
        owner: &OwnerId,
        key: &[u8],
        recorded: Option<&HoldRecord>,
    ) -> Vec<Json> {
        let turn = recorded
            .filter(|record| record.turn_of.is_some() && record.key == key)
            .and_then(|record| record.made_at);
        match turn {
            Some(created) => vec![created_at(&Span::key(key), created)],
            None => vec![Self::mine(lock, owner, key)],
        }
    }

    /// Whether `kv` is `owner`'s hold of `lock` (as [`mine`](Self::mine) compares).
    pub(crate) fn is_mine(lock: LockRef<'_>, owner: &OwnerId, kv: &Kv) -> bool {
        !shares_key(lock.kind) || kv.value == owner.as_str().as_bytes()
    }

    /// Remembers the hold `owner` made of `lock` at `key`, written at `revision`, counted on
    /// until `deadline`.
    pub(crate) fn remember(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        key: Vec<u8>,
        revision: i64,
        (lease, session): (Granted, Option<SessionKey>),
        deadline: Instant,
    ) {
        self.holds.record(
            hold_id(lock, owner),
            HoldRecord {
                key,
                made_at: Some(revision),
                written: Some(revision),
                lease,
                session,
                deadline,
                pending_move: None,
                turn_of: None,
            },
        );
    }

    /// Remembers that a step that would make `owner`'s hold of `lock` at `key` failed with an
    /// unknown outcome: the hold may be on the store (or arrive there later), and is asked
    /// about when next met. A live hold already recorded at that key is kept as it is (the
    /// step made nothing). An over one, whose key the step writes over, stays as it was until
    /// the store shows a later write of the key: found as it was, the key is still the over
    /// hold's, not the step's.
    pub(crate) fn remember_unknown(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        key: Vec<u8>,
        (lease, session): (Granted, Option<SessionKey>),
        deadline: Instant,
    ) {
        let id = hold_id(lock, owner);
        let known = self.holds.lookup(&id).filter(|known| known.key == key);
        if known
            .as_ref()
            .is_some_and(|known| known.written.is_some() && !known.is_over(Instant::now()))
        {
            // A step makes a hold only where the name had no live key of it: with the hold
            // live, it made nothing, and the hold stays as it was (on its lease, to its
            // deadline).
            return;
        }
        if let Some(mut over) = known.clone().filter(|known| known.written.is_some()) {
            over.pending_move = Some(PendingMove {
                from: over.written.unwrap_or_default(),
                lease,
                session,
                deadline,
                anew: true,
            });
            over.written = None;
            self.holds.record(id, over);
            return;
        }
        let made_at = known.and_then(|known| known.made_at);
        self.holds.record(
            id,
            HoldRecord {
                key,
                made_at,
                written: None,
                lease,
                session,
                deadline,
                pending_move: None,
                turn_of: None,
            },
        );
    }

    /// Adds to `compare` what lets a transaction put a hold's key on `lease`: the session's
    /// gate, when `lease` is a session (see [`crate::gate`]).
    pub(crate) fn gated(
        &self,
        compare: &mut Vec<Json>,
        lease: Granted,
        session: Option<&SessionKey>,
    ) -> Result<(), Fail> {
        if session.is_some() {
            compare.push(self.through_gate(lease.id)?);
        }
        Ok(())
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

    /// Whether `kind`'s new holds carry a fencing token (the revision that made them).
    pub(crate) fn fenced(kind: LockKind) -> bool {
        kind.is_fenced()
    }
}

/// Whether a step's failure leaves its outcome unknown (the store may have run it).
pub(crate) fn unknown(fail: &Fail) -> bool {
    matches!(fail, Fail::Lock(error) if error.is_unavailable())
}
