//! Taking a hold: every kind's first acquire, and the extend of a hold the client has.

use std::time::Instant;

use dlock_core::backend::{Acquire, AcquireRequest, Grant, LockRef};
use dlock_core::{LockError, LockKind};
use serde_json::Value;

use crate::backend::Inner;
use crate::keys::Family;
use crate::leases::{hold_id, whole_seconds, Granted, SessionKey};
use crate::transport::Fail;
use crate::wire::{created_at, empty, exists, first_created, nested, put, rebind, Kv, Span};

impl Inner {
    pub(crate) fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        Self::family(lock)?;
        if request.reentry {
            return self.extend(request);
        }
        match lock.kind {
            LockKind::Read => self.retry_on_lost_session(request, Self::take_read),
            LockKind::Fair => self.retry_on_lost_session(request, Self::take_fair),
            LockKind::Semaphore => self.take_permit(request),
            LockKind::Latch => self.latch_open(lock),
            _ => self.retry_on_lost_session(request, Self::take_exclusive),
        }
    }

    /// Runs `take` with a lease for the request; once more with a new one if etcd no longer
    /// had the session (it ran out while the client held nothing on it).
    fn retry_on_lost_session(
        &self,
        request: &AcquireRequest<'_>,
        take: fn(&Self, &AcquireRequest<'_>, Granted, Option<SessionKey>) -> Result<Acquire, Fail>,
    ) -> Result<Acquire, LockError> {
        for _ in 0..2 {
            let (lease, session) = self.leases.lease_for(request.owner, request.lease)?;
            match take(self, request, lease, session.clone()) {
                Err(Fail::LeaseNotFound) => {
                    if let Some(session) = &session {
                        self.leases.forget_session(session);
                    }
                }
                Err(fail) => {
                    self.drop_own(lease, session.as_ref());
                    return Err(fail.into());
                }
                Ok(acquire) => {
                    // A fair waiter's place stays bound to its lease while it waits.
                    if !acquire.is_acquired() && request.lock.kind != LockKind::Fair {
                        self.drop_own(lease, session.as_ref());
                    }
                    return Ok(acquire);
                }
            }
        }
        Err(LockError::protocol(
            "etcd lost the client's lease twice in a row",
        ))
    }

    /// A lease of the hold's own that no hold uses is kept for the next attempt of that TTL
    /// (a waiter tries again soon), while it lasts.
    pub(crate) fn drop_own(&self, lease: Granted, session: Option<&SessionKey>) {
        if session.is_none() {
            self.leases.spare(lease);
        }
    }

    /// The exclusive kinds (reentrant, fenced, write, election): taken when no key of the name
    /// exists, etcd's create-if-absent on the whole prefix.
    fn take_exclusive(
        &self,
        request: &AcquireRequest<'_>,
        lease: Granted,
        session: Option<SessionKey>,
    ) -> Result<Acquire, Fail> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let key = keys.hold(lock, request.owner);
        // An election's key shows its candidate (etcd's `Election`); a lock's, its hold.
        let value = request.value.unwrap_or(request.owner.as_str()).as_bytes();
        let sent_at = Instant::now();
        let _creating = self.leases.creating(&key);
        let answer = self.write(
            vec![empty(&keys.all())],
            vec![put(&key, value, lease.id)],
            vec![first_created(&keys.all(), 1)],
        )?;
        if answer.succeeded {
            let revision = answer.revision;
            self.remember(
                lock,
                request.owner,
                key,
                revision,
                lease,
                session,
                request.lease,
                sent_at,
            );
            return Ok(self.granted(lock.kind, revision));
        }
        let first = answer.kvs(0)?.into_iter().next();
        self.check_kind(lock, &keys, first.as_ref())?;
        match first {
            // The client's key, no hold of this backend's: made by an attempt whose answer was
            // lost, which nobody believes; adopted.
            Some(first) if first.key == key => match self.leases.holder_of_key(&key) {
                None if !self.leases.others_creating(&key) => {
                    self.adopt(request, &key, value, &first, (lease, session), sent_at)
                }
                // This very hold, asked again without the flag of a re-entry.
                Some((id, record))
                    if id.2 == *request.owner
                        && record.create_revision == first.create_revision =>
                {
                    drop(_creating);
                    match self.extend(request).map_err(Fail::Lock)? {
                        Acquire::Gone { .. } => Ok(Acquire::Held {
                            remaining_lease: None,
                        }),
                        other => Ok(other),
                    }
                }
                _ => self.held_by(&first),
            },
            Some(first) => self.held_by(&first),
            None => Ok(Acquire::Held {
                remaining_lease: None,
            }),
        }
    }

    /// The answer to an attempt that found `first` holding: its remaining lease, or, for a
    /// hold of this backend on a fixed lease that is over, nothing left (deleted: etcd keeps
    /// it until its whole second is over, its holder no longer counts on it).
    fn held_by(&self, first: &Kv) -> Result<Acquire, Fail> {
        match self.fixed_end(first) {
            Some(end) if end <= Instant::now() => {
                let span = Span::key(&first.key);
                self.write(
                    vec![created_at(&span, first.create_revision)],
                    vec![crate::wire::delete(&span)],
                    Vec::new(),
                )?;
                Ok(Acquire::Held {
                    remaining_lease: Some(std::time::Duration::from_millis(1)),
                })
            }
            Some(end) => Ok(Acquire::Held {
                remaining_lease: Some(end.saturating_duration_since(Instant::now())),
            }),
            None => Ok(Acquire::Held {
                remaining_lease: self.leases.remaining(first.lease)?,
            }),
        }
    }

    /// When the holder `first` ends, if it is a hold of this backend on a fixed lease (never
    /// renewed): its own lease asked for, not etcd's whole seconds.
    fn fixed_end(&self, first: &Kv) -> Option<Instant> {
        let (_, record) = self.leases.holder_of_key(&first.key)?;
        (record.create_revision == first.create_revision
            && record.session.is_none()
            && !record.renewed)
            .then(|| record.sent_at + record.asked)
    }

    /// A hold of this id found on the store (made by an attempt whose answer was lost):
    /// bound to the lease of this attempt and taken as this attempt's.
    fn adopt(
        &self,
        request: &AcquireRequest<'_>,
        key: &[u8],
        value: &[u8],
        found: &Kv,
        (lease, session): (Granted, Option<SessionKey>),
        sent_at: Instant,
    ) -> Result<Acquire, Fail> {
        // Only as it was found: of two attempts adopting it, the second finds it changed.
        let answer = self.write(
            vec![
                created_at(&Span::key(key), found.create_revision),
                modified_at(key, found.mod_revision),
            ],
            vec![put(key, value, lease.id)],
            Vec::new(),
        )?;
        if !answer.succeeded {
            return Ok(Acquire::Held {
                remaining_lease: None,
            });
        }
        let lock = request.lock;
        self.remember(
            lock,
            request.owner,
            key.to_vec(),
            found.create_revision,
            lease,
            session,
            request.lease,
            sent_at,
        );
        Ok(self.granted(lock.kind, found.create_revision))
    }

    pub(crate) fn granted(&self, kind: LockKind, revision: i64) -> Acquire {
        if Self::fenced(kind) {
            Acquire::Acquired(Grant::PLAIN.with_fencing_token(revision.unsigned_abs()))
        } else {
            Acquire::ACQUIRED
        }
    }

    /// A read hold: taken while no key of the name is outside the readers' folder, except the
    /// caller's own write hold (a writer may read).
    fn take_read(
        &self,
        request: &AcquireRequest<'_>,
        lease: Granted,
        session: Option<SessionKey>,
    ) -> Result<Acquire, Fail> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let key = keys.hold(lock, request.owner);
        let readers = keys.side(LockKind::Read);
        let reader_end = readers.end.clone().unwrap_or_default();
        let mut compare = vec![
            empty(&Span::between(&keys.prefix, &readers.key)),
            empty(&Span::between(
                &reader_end,
                &crate::wire::prefix_end(&keys.prefix),
            )),
        ];
        if let Some(writer) = request.write_hold {
            let write_key = keys.hold(LockRef::new(lock.name, LockKind::Write), writer);
            let mut after = write_key.clone();
            after.push(0);
            compare = vec![
                empty(&Span::between(&keys.prefix, &readers.key)),
                empty(&Span::between(&reader_end, &write_key)),
                empty(&Span::between(
                    &after,
                    &crate::wire::prefix_end(&keys.prefix),
                )),
            ];
        }
        let sent_at = Instant::now();
        let answer = self.write(
            compare,
            vec![put(&key, b"", lease.id)],
            vec![first_created(&keys.all(), 1)],
        )?;
        if answer.succeeded {
            self.remember(
                lock,
                request.owner,
                key,
                answer.revision,
                lease,
                session,
                request.lease,
                sent_at,
            );
            return Ok(Acquire::ACQUIRED);
        }
        let first = answer.kvs(0)?.into_iter().next();
        self.check_kind(lock, &keys, first.as_ref())?;
        let writer = self.read(vec![first_created(&keys.side(LockKind::Write), 1)])?;
        let remaining = match writer.kvs(0)?.first() {
            Some(writer) => self.leases.remaining(writer.lease)?,
            None => None,
        };
        Ok(Acquire::Held {
            remaining_lease: remaining,
        })
    }

    /// The fair lock: etcd's `Mutex` queue. Each waiter's place is a key of its own (its
    /// waiter id), made when it first waits and kept across its attempts, whose value names
    /// the attempt's hold; the place created first holds.
    fn take_fair(
        &self,
        request: &AcquireRequest<'_>,
        lease: Granted,
        session: Option<SessionKey>,
    ) -> Result<Acquire, Fail> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let place = keys.hold(lock, request.waiter);
        let queue = keys.family(Family::Fair);
        let others = keys.others(Family::Fair);
        let take = put(&place, request.owner.as_str().as_bytes(), lease.id);
        let look = first_created(&queue, 2);
        let newcomer = if request.will_wait {
            vec![take.clone(), look.clone()]
        } else {
            vec![look.clone()]
        };
        let sent_at = Instant::now();
        let answer = self.write(
            vec![empty(&others[0]), empty(&others[1])],
            vec![nested(
                vec![exists(&Span::key(&place))],
                vec![take.clone(), look.clone()],
                vec![nested(vec![empty(&keys.all())], vec![take, look], newcomer)],
            )],
            vec![first_created(&keys.all(), 1)],
        )?;
        if !answer.succeeded {
            let first = answer.kvs(0)?.into_iter().next();
            self.check_kind(lock, &keys, first.as_ref())?;
            return Ok(Acquire::Held {
                remaining_lease: None,
            });
        }
        let queued = answer.nested(0)?;
        let (placed, firsts) = if queued.succeeded {
            (true, queued.kvs(1)?)
        } else {
            let inner = queued.nested(0)?;
            let placed = inner.succeeded || request.will_wait;
            (placed, inner.kvs(usize::from(placed))?)
        };
        match firsts.first() {
            Some(head) if head.key == place => {
                self.remember(
                    lock,
                    request.owner,
                    place,
                    head.create_revision,
                    lease,
                    session,
                    request.lease,
                    sent_at,
                );
                Ok(Acquire::ACQUIRED)
            }
            Some(head) => {
                let mut remaining = self.leases.remaining(head.lease)?;
                if placed {
                    // Back before the place's lease could run out, to keep it.
                    let keep = request.lease / 2;
                    remaining = Some(remaining.map_or(keep, |r| r.min(keep)));
                }
                Ok(Acquire::Held {
                    remaining_lease: remaining,
                })
            }
            None => Ok(Acquire::Held {
                remaining_lease: None,
            }),
        }
    }

    /// Extends a hold the client has (a re-entry with a longer lease, or onto the watchdog):
    /// only if the store still has it, never shortening its lease.
    fn extend(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let id = hold_id(lock, request.owner);
        let Some(record) = self.leases.lookup(&id) else {
            return Ok(Acquire::Gone {
                reason: self.loss(&keys),
            });
        };
        let now = Instant::now();
        let needed = now + request.lease;
        let current = record
            .session
            .as_ref()
            .and_then(|s| self.leases.current_session(s))
            .filter(|s| s.id == record.lease.id)
            .unwrap_or(record.lease);
        let mut compare = vec![created_at(&Span::key(&record.key), record.create_revision)];
        if lock.kind == LockKind::Fair {
            compare.push(value_is(&record.key, request.owner.as_str().as_bytes()));
        }
        let (target, session, fresh) = if current.ends_after >= needed {
            (current, record.session.clone(), false)
        } else {
            match self.leases.lease_for(request.owner, request.lease) {
                Ok((target, session)) if target.ends_after >= needed => {
                    (target, session, target.id != current.id)
                }
                Ok((target, session)) => {
                    self.drop_own(target, session.as_ref());
                    let own = self.leases.grant(whole_seconds(request.lease))?;
                    (own, None, true)
                }
                Err(error) => return Err(error),
            }
        };
        let success = if fresh {
            vec![rebind(&record.key, target.id)]
        } else {
            Vec::new()
        };
        let answer = match self.write(compare, success, Vec::new()) {
            Ok(answer) => answer,
            Err(fail) => {
                if fresh {
                    self.drop_own(target, session.as_ref());
                }
                return Err(fail.into());
            }
        };
        if !answer.succeeded {
            if fresh {
                self.drop_own(target, session.as_ref());
            }
            self.leases.forget(&id);
            return Ok(Acquire::Gone {
                reason: self.loss(&keys),
            });
        }
        if fresh {
            let mut updated = record.clone();
            updated.lease = target;
            updated.session = session;
            updated.asked = request.lease;
            updated.sent_at = now;
            if record.session.is_none() && record.lease.id != target.id {
                self.leases.revoke(record.lease.id);
            }
            self.leases.record(id, updated);
        }
        Ok(self.granted(lock.kind, record.create_revision))
    }
}

/// `mod_revision(key) == revision`.
pub(crate) fn modified_at(key: &[u8], revision: i64) -> Value {
    serde_json::json!({
        "key": crate::wire::b64(key),
        "target": "MOD",
        "result": "EQUAL",
        "mod_revision": revision.to_string(),
    })
}

/// `value(key) == value`.
pub(crate) fn value_is(key: &[u8], value: &[u8]) -> Value {
    serde_json::json!({
        "key": crate::wire::b64(key),
        "target": "VALUE",
        "result": "EQUAL",
        "value": crate::wire::b64(value),
    })
}
