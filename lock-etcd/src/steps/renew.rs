//! The watchdog's renewal: one keep-alive of the client's session lease renews every hold on
//! it, then one read of the lease's keys tells which holds are still there. Holds that were
//! on leases of their own move onto the session (once); a session etcd no longer has ended
//! every hold on it, and each is reported lost at once.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use dlock_core::backend::{HoldRef, LossReason, Renewal};
use dlock_core::{LockError, LockKind};

use crate::backend::Inner;
use crate::leases::{client_of, hold_id, Granted, HoldRecord, SessionKey};
use crate::steps::acquire::value_is;
use crate::wire::{created_at, delete, first_created, nested, rebind, Span};

/// Holds moved onto a session per transaction (etcd takes 128 operations at most).
const MOVES_PER_TXN: usize = 100;

impl Inner {
    pub(crate) fn renew(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
    ) -> Result<Vec<Renewal>, LockError> {
        self.leases.learn_watchdog(lease);
        let records: Vec<Option<HoldRecord>> = holds
            .iter()
            .map(|hold| self.leases.lookup(&hold_id(hold.lock, hold.owner)))
            .collect();
        let mut answers = vec![Renewal::Lost(LossReason::Gone); holds.len()];
        if holds.is_empty() {
            return Ok(answers);
        }
        self.unknown_holds(holds, &records, &mut answers)?;
        let key = self.batch_session(holds, &records, lease);
        let before = self.leases.current_session(&key);
        let kept = match before {
            Some(_) => self.leases.refresh_session(&key)?,
            None => None,
        };
        let session = match kept {
            Some(kept) => kept,
            None => self.leases.session(&key, lease)?,
        };
        let mut on_session = Vec::new();
        let mut moving = Vec::new();
        let mut own = Vec::new();
        for (at, record) in records.iter().enumerate() {
            let Some(record) = record else { continue };
            if record.lease.id == session.id {
                on_session.push(at);
            } else if before.is_some_and(|b| b.id == record.lease.id) {
                // Its session ran out on etcd: every hold on it ended with it.
                answers[at] = Renewal::Lost(LossReason::Expired);
                self.leases
                    .forget(&hold_id(holds[at].lock, holds[at].owner));
            } else if record.session.is_none() && record.lease.ends_after <= session.ends_after {
                moving.push(at);
            } else {
                own.push(at);
            }
        }
        self.move_onto(holds, &records, &moving, session, &key, &mut answers)?;
        self.keep_own(holds, &records, &own, &mut answers)?;
        if !on_session.is_empty() {
            let present: HashSet<Vec<u8>> = self
                .leases
                .keys_of(session.id)?
                .unwrap_or_default()
                .into_iter()
                .collect();
            for at in on_session {
                let Some(record) = &records[at] else { continue };
                let id = hold_id(holds[at].lock, holds[at].owner);
                // The key is this hold's if the backend still has it recorded at the key's
                // revision once the attempts in flight at that key are done (a later hold of
                // the client at the same key replaces the record).
                self.leases.settle(&record.key, self.transport.timeout);
                let current = self
                    .leases
                    .lookup(&id)
                    .is_some_and(|now| now.create_revision == record.create_revision);
                if current && present.contains(&record.key) {
                    answers[at] = Renewal::Renewed;
                    let mut renewed = record.clone();
                    renewed.lease = session;
                    renewed.renewed = true;
                    self.leases.record(id, renewed);
                } else {
                    answers[at] = Renewal::Lost(self.loss(&self.keys(holds[at].lock.name)));
                    self.leases.forget(&id);
                }
            }
        }
        self.end_unrenewed(&key, holds);
        Ok(answers)
    }

    /// Holds this backend has no record of (released, or never made here): lost, taken over
    /// if the name has another holder now.
    fn unknown_holds(
        &self,
        holds: &[HoldRef<'_>],
        records: &[Option<HoldRecord>],
        answers: &mut [Renewal],
    ) -> Result<(), LockError> {
        let unknown: Vec<usize> = (0..holds.len())
            .filter(|at| records[*at].is_none())
            .collect();
        for chunk in unknown.chunks(MOVES_PER_TXN) {
            let ops = chunk
                .iter()
                .map(|at| first_created(&self.keys(holds[*at].lock.name).all(), 1))
                .collect();
            let answer = self.read(ops)?;
            for (step, at) in chunk.iter().enumerate() {
                let held = !answer.kvs(step)?.is_empty();
                answers[*at] = Renewal::Lost(if held {
                    LossReason::TakenOver
                } else {
                    LossReason::Gone
                });
            }
        }
        Ok(())
    }

    /// The session a batch is renewed on: its client's (the first hold id naming one), else
    /// the session its holds are on, else one of its own.
    fn batch_session(
        &self,
        holds: &[HoldRef<'_>],
        records: &[Option<HoldRecord>],
        lease: Duration,
    ) -> SessionKey {
        let client = holds
            .iter()
            .find_map(|hold| client_of(hold.owner))
            .map(str::to_owned)
            .or_else(|| {
                records
                    .iter()
                    .flatten()
                    .find_map(|r| r.session.as_ref().map(|s| s.client.clone()))
            })
            .unwrap_or_else(|| format!("permits-{}", holds[0].owner));
        SessionKey {
            client,
            watchdog: lease,
        }
    }

    /// Binds the keys of the holds at `moving` to `session`, each only if it is still that
    /// hold's.
    fn move_onto(
        &self,
        holds: &[HoldRef<'_>],
        records: &[Option<HoldRecord>],
        moving: &[usize],
        session: Granted,
        key: &SessionKey,
        answers: &mut [Renewal],
    ) -> Result<(), LockError> {
        for chunk in moving.chunks(MOVES_PER_TXN) {
            let steps = chunk
                .iter()
                .filter_map(|at| {
                    let record = records[*at].as_ref()?;
                    let mut compare =
                        vec![created_at(&Span::key(&record.key), record.create_revision)];
                    if holds[*at].lock.kind == LockKind::Fair {
                        compare.push(value_is(&record.key, holds[*at].owner.as_str().as_bytes()));
                    }
                    Some(nested(
                        compare,
                        vec![rebind(&record.key, session.id)],
                        Vec::new(),
                    ))
                })
                .collect();
            let answer = self.write(Vec::new(), steps, Vec::new())?;
            for (step, at) in chunk.iter().enumerate() {
                let Some(record) = &records[*at] else {
                    continue;
                };
                let id = hold_id(holds[*at].lock, holds[*at].owner);
                if answer.nested(step)?.succeeded {
                    answers[*at] = Renewal::Renewed;
                    let mut moved = record.clone();
                    moved.lease = session;
                    moved.session = Some(key.clone());
                    moved.renewed = true;
                    // Its own lease, keyless now, runs out by itself.
                    self.leases.record(id, moved);
                } else {
                    answers[*at] = Renewal::Lost(self.loss(&self.keys(holds[*at].lock.name)));
                    self.leases.forget(&id);
                }
            }
        }
        Ok(())
    }

    /// Holds on leases of their own that end later than the session: each lease kept alive.
    fn keep_own(
        &self,
        holds: &[HoldRef<'_>],
        records: &[Option<HoldRecord>],
        own: &[usize],
        answers: &mut [Renewal],
    ) -> Result<(), LockError> {
        for at in own {
            let Some(record) = &records[*at] else {
                continue;
            };
            let id = hold_id(holds[*at].lock, holds[*at].owner);
            let kept = self.leases.keep_alive(record.lease)?;
            let present = match kept {
                Some(_) => self
                    .leases
                    .keys_of(record.lease.id)?
                    .is_some_and(|keys| keys.contains(&record.key)),
                None => false,
            };
            match kept {
                Some(kept) if present => {
                    answers[*at] = Renewal::Renewed;
                    let mut renewed = record.clone();
                    renewed.lease = kept;
                    renewed.renewed = true;
                    self.leases.record(id, renewed);
                }
                Some(_) => {
                    answers[*at] = Renewal::Lost(self.loss(&self.keys(holds[*at].lock.name)));
                    self.leases.forget(&id);
                }
                None => {
                    answers[*at] = Renewal::Lost(LossReason::Expired);
                    self.leases.forget(&id);
                }
            }
        }
        Ok(())
    }

    /// A hold that went on the session when its lease looked like the watchdog's but that the
    /// watchdog never renews (a fixed lease as long as the watchdog's) ends when its own lease
    /// does, not when the session does: deleted once that lease is over.
    fn end_unrenewed(&self, key: &SessionKey, batch: &[HoldRef<'_>]) {
        let now = Instant::now();
        let in_batch: HashSet<_> = batch.iter().map(|h| hold_id(h.lock, h.owner)).collect();
        let over: Vec<_> = self
            .leases
            .holds
            .lock()
            .iter()
            .filter(|(id, record)| {
                record.session.as_ref() == Some(key)
                    && !record.renewed
                    && record.sent_at + record.asked < now
                    && !in_batch.contains(*id)
            })
            .map(|(id, record)| (id.clone(), record.clone()))
            .collect();
        for (id, record) in over {
            let span = Span::key(&record.key);
            let _ = self.write(
                vec![created_at(&span, record.create_revision)],
                vec![delete(&span)],
                Vec::new(),
            );
            self.leases.forget(&id);
        }
    }
}
