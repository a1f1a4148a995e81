//! The watchdog's renewal: one keep-alive of the client's session lease renews every hold on
//! it, then one read of the lease's keys tells which holds are still there. Holds that were
//! on leases of their own move onto the session (once); a session etcd no longer has ended
//! every hold on it, and each is reported lost at once. A hold the backend has no record of
//! (made by a step whose answer was lost, or granted by another client's release) is looked
//! for on the store and, if there, moved onto the session.
//!
//! Each hold renewed is counted on until the renewal's sent-at plus the lease; one that is not
//! renewed in time is over (see `over`), and the session's over holds are deleted at each
//! renewal, so a hold the watchdog stopped renewing ends with its lease, not with the session.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use dlock_core::backend::{HoldRef, LossReason, Renewal};
use dlock_core::{LockError, LockKind};

use crate::backend::Inner;
use crate::holds::{hold_id, HoldRecord, PendingMove};
use crate::keys::shares_key;
use crate::leases::{client_of, Granted, SessionKey};
use crate::wire::{delete, nested, put, range, rebind, value_is, Span, OPS_PER_TXN};

impl Inner {
    /// Renews `holds`; a hold named twice in the batch is renewed once, and answered alike.
    pub(crate) fn renew(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
    ) -> Result<Vec<Renewal>, LockError> {
        let mut distinct: Vec<HoldRef<'_>> = Vec::with_capacity(holds.len());
        let mut places = std::collections::HashMap::with_capacity(holds.len());
        let at: Vec<usize> = holds
            .iter()
            .map(|hold| {
                *places
                    .entry(hold_id(hold.lock, hold.owner))
                    .or_insert_with(|| {
                        distinct.push(*hold);
                        distinct.len() - 1
                    })
            })
            .collect();
        if distinct.len() == holds.len() {
            return self.renew_distinct(holds, lease);
        }
        let answers = self.renew_distinct(&distinct, lease)?;
        Ok(at.into_iter().map(|found| answers[found]).collect())
    }

    /// Renews `holds`, each named once.
    fn renew_distinct(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
    ) -> Result<Vec<Renewal>, LockError> {
        self.leases.learn_watchdog(lease);
        // Holds a write of which had an unknown outcome are asked about first, as every step
        // on their name does (made, moved or not; the sessions' gates moved).
        let unsure: HashSet<&str> = holds
            .iter()
            .filter(|hold| {
                self.holds
                    .lookup(&hold_id(hold.lock, hold.owner))
                    .is_some_and(|record| record.written.is_none())
            })
            .map(|hold| hold.lock.name)
            .collect();
        for name in unsure {
            self.over(name)?;
        }
        let sent_at = Instant::now();
        let mut records: Vec<Option<HoldRecord>> = holds
            .iter()
            .map(|hold| self.holds.lookup(&hold_id(hold.lock, hold.owner)))
            .collect();
        let mut answers = vec![Renewal::Lost(LossReason::Gone); holds.len()];
        if holds.is_empty() {
            return Ok(answers);
        }
        for (at, record) in records.iter_mut().enumerate() {
            if record
                .as_ref()
                .is_some_and(|r| r.written.is_some() && r.is_over(sent_at))
            {
                // Its holder stopped counting on it: ended, whatever etcd still keeps.
                answers[at] = Renewal::Lost(LossReason::Expired);
                *record = None;
            } else if record.as_ref().is_some_and(|r| r.written.is_none()) {
                *record = None;
            }
        }
        let key = self.batch_session(holds, &records, lease);
        let found = self.unknown_holds(holds, &records, &mut answers, sent_at)?;
        let before = self.leases.current_session(&key);
        let kept = match before {
            // Kept alive moments ago, and lasting past this renewal's promise already.
            Some(session) if session.fresh_for(sent_at, lease) => Some(session),
            Some(_) => self.leases.refresh_session(&key)?,
            None => None,
        };
        let session = match kept {
            Some(kept) => kept,
            None => self.leases.session(&key, lease)?,
        };
        let mut on_session = Vec::new();
        let mut moving = found;
        let mut own = Vec::new();
        for (at, record) in records.iter().enumerate() {
            let Some(record) = record else { continue };
            if record.lease.id == session.id {
                on_session.push(at);
            } else if before.is_some_and(|b| b.id == record.lease.id) {
                // Its session ran out on etcd: every hold on it ended with it.
                answers[at] = Renewal::Lost(LossReason::Expired);
                self.holds.forget(&hold_id(holds[at].lock, holds[at].owner));
            } else if record.session.is_none() && record.lease.ends_after <= session.ends_after
                || !lasts(record.lease, lease)
            {
                // Onto the session: a lease of its own that ends first, or a lease that kept
                // alive would not last the renewal (a session of another watchdog lease).
                moving.push((at, record.clone()));
            } else {
                own.push(at);
            }
        }
        let until = sent_at + lease;
        // Holds whose key is not where the backend last put it: a write of it whose answer
        // was lost landed after the backend asked (an extend held up in the network). Looked
        // for on the store once the others are renewed.
        let mut strays = Vec::new();
        self.move_onto(
            holds,
            &moving,
            (session, &key),
            until,
            &mut answers,
            Some(&mut strays),
        )?;
        self.keep_own(holds, &records, &own, until, &mut answers, &mut strays)?;
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
                // The key is this hold's if the backend still has it recorded as it was once
                // the attempts in flight at that key are done (a later hold of the client at
                // the same key replaces the record).
                self.holds.settle(&record.key, self.transport.timeout);
                let current = self
                    .holds
                    .lookup(&id)
                    .filter(|now| now.made_at == record.made_at);
                match current {
                    Some(mut now) if present.contains(&record.key) => {
                        answers[at] = Renewal::Renewed;
                        now.lease = session;
                        now.deadline = now.deadline.max(until);
                        self.holds.record(id, now);
                    }
                    Some(_) => strays.push(at),
                    None => {
                        answers[at] = Renewal::Lost(
                            self.loss(&self.keys(holds[at].lock.name), holds[at].owner),
                        );
                        self.holds.forget_if(&id, record);
                    }
                }
            }
        }
        if !strays.is_empty() {
            let found = self.look_up(holds, &strays, &mut answers, sent_at)?;
            for at in &strays {
                if matches!(answers[*at], Renewal::Lost(_)) {
                    if let Some(record) = &records[*at] {
                        self.holds
                            .forget_if(&hold_id(holds[*at].lock, holds[*at].owner), record);
                    }
                }
            }
            self.move_onto(holds, &found, (session, &key), until, &mut answers, None)?;
        }
        self.end_over(&key);
        Ok(answers)
    }

    /// Holds this backend has no (settled) record of, looked for on the store: those found
    /// (their key, with their id) are returned to be moved onto the session; the others are
    /// lost, taken over if the name has another holder now.
    fn unknown_holds(
        &self,
        holds: &[HoldRef<'_>],
        records: &[Option<HoldRecord>],
        answers: &mut [Renewal],
        now: Instant,
    ) -> Result<Vec<(usize, HoldRecord)>, LockError> {
        let unknown: Vec<usize> = (0..holds.len())
            .filter(|at| records[*at].is_none() && answers[*at] == Renewal::Lost(LossReason::Gone))
            .collect();
        self.look_up(holds, &unknown, answers, now)
    }

    /// The holds `unknown` of the batch, looked for on the store by their keys: those found
    /// (with their id) are returned as found, to be moved onto the session; the others are
    /// answered lost.
    fn look_up(
        &self,
        holds: &[HoldRef<'_>],
        unknown: &[usize],
        answers: &mut [Renewal],
        now: Instant,
    ) -> Result<Vec<(usize, HoldRecord)>, LockError> {
        let mut found = Vec::new();
        for chunk in unknown.chunks(OPS_PER_TXN) {
            let ops = chunk
                .iter()
                .map(|at| {
                    let hold = &holds[*at];
                    let keys = self.keys(hold.lock.name);
                    match hold.lock.kind {
                        // A fair hold's key is its waiter's: found by its value.
                        LockKind::Fair => range(&keys.queue()),
                        _ => range(&Span::key(&keys.hold(hold.lock, hold.owner))),
                    }
                })
                .collect();
            let answer = self.read(ops)?;
            for (step, at) in chunk.iter().enumerate() {
                let hold = &holds[*at];
                let kv = answer
                    .kvs(step)?
                    .into_iter()
                    .find(|kv| Self::is_mine(hold.lock, hold.owner, kv));
                // The revision that made it: as remembered (a write of it since had an unknown
                // outcome), else its key's creation for a key of its own, else the last write.
                let remembered = self
                    .holds
                    .lookup(&hold_id(hold.lock, hold.owner))
                    .and_then(|record| record.made_at);
                match kv {
                    Some(kv) => {
                        // Counted on as the store keeps it, to its lease's end, until a move
                        // onto the session is seen to land (its answer may be lost).
                        let left = self.leases.remaining(kv.lease)?.unwrap_or_default();
                        found.push((
                            *at,
                            HoldRecord {
                                made_at: Some(remembered.unwrap_or(
                                    if shares_key(hold.lock.kind) {
                                        kv.mod_revision
                                    } else {
                                        kv.create_revision
                                    },
                                )),
                                key: kv.key,
                                written: Some(kv.mod_revision),
                                lease: Granted {
                                    id: kv.lease,
                                    ttl: 0,
                                    ends_after: now + left,
                                },
                                session: None,
                                deadline: now + left,
                                pending_move: None,
                                turn_of: None,
                            },
                        ));
                    }
                    None => {
                        answers[*at] =
                            Renewal::Lost(self.loss(&self.keys(hold.lock.name), hold.owner));
                    }
                }
            }
        }
        Ok(found)
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

    /// Binds the keys of the holds `moving` to `session`, each only if it is still that hold's
    /// as this backend last wrote it.
    fn move_onto(
        &self,
        holds: &[HoldRef<'_>],
        moving: &[(usize, HoldRecord)],
        (session, key): (Granted, &SessionKey),
        until: Instant,
        answers: &mut [Renewal],
        mut strays: Option<&mut Vec<usize>>,
    ) -> Result<(), LockError> {
        if moving.is_empty() {
            return Ok(());
        }
        // Through the session's gate, as every put onto a session: a move whose answer was
        // lost cannot land once the backend concluded it did not.
        let gate = self.through_gate(session.id)?;
        for chunk in moving.chunks(OPS_PER_TXN) {
            let steps = chunk
                .iter()
                .map(|(at, record)| {
                    let hold = &holds[*at];
                    let key = &record.key;
                    let written = crate::wire::modified_at(key, record.written.unwrap_or_default());
                    // A hold its waiter's turn made is its place, empty, until its id is
                    // written into it: the hold it is.
                    let (mine, write) = match record.turn_of {
                        Some(_) => (
                            value_is(key, b""),
                            put(key, hold.owner.as_str().as_bytes(), session.id),
                        ),
                        None => (
                            Self::mine(hold.lock, hold.owner, key),
                            rebind(key, session.id),
                        ),
                    };
                    nested(vec![mine, written, gate.clone()], vec![write], Vec::new())
                })
                .collect();
            let answer = match self.write(Vec::new(), steps, Vec::new()) {
                Ok(answer) => answer,
                Err(fail) => {
                    if crate::backend::unknown(&fail) {
                        // Moved or not: the keys are asked about when next met, and until the
                        // store shows a move landed its hold counts as it was.
                        for (at, record) in chunk {
                            let mut unsure = record.clone();
                            unsure.pending_move = Some(PendingMove {
                                from: record.written.unwrap_or_default(),
                                lease: session,
                                session: Some(key.clone()),
                                deadline: record.deadline.max(until),
                                anew: false,
                            });
                            unsure.written = None;
                            self.holds
                                .record(hold_id(holds[*at].lock, holds[*at].owner), unsure);
                        }
                        let mut names: Vec<&str> =
                            chunk.iter().map(|(at, _)| holds[*at].lock.name).collect();
                        names.sort_unstable();
                        names.dedup();
                        self.resolve_now(&names);
                    }
                    return Err(fail.into());
                }
            };
            for (step, (at, record)) in chunk.iter().enumerate() {
                let id = hold_id(holds[*at].lock, holds[*at].owner);
                if answer.nested(step)?.succeeded {
                    answers[*at] = Renewal::Renewed;
                    let mut moved = record.clone();
                    moved.lease = session;
                    moved.session = Some(key.clone());
                    moved.written = Some(answer.revision);
                    moved.deadline = moved.deadline.max(until);
                    if let Some(place) = moved.turn_of.take() {
                        self.place_lease.let_go(&place, &moved.key);
                    }
                    // Its own lease, keyless now, runs out by itself.
                    self.holds.record(id, moved);
                } else if let Some(strays) = strays.as_mut() {
                    strays.push(*at);
                } else {
                    answers[*at] = Renewal::Lost(
                        self.loss(&self.keys(holds[*at].lock.name), holds[*at].owner),
                    );
                    self.holds.forget_if(&id, record);
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
        until: Instant,
        answers: &mut [Renewal],
        strays: &mut Vec<usize>,
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
                    renewed.deadline = renewed.deadline.max(until);
                    self.holds.record(id, renewed);
                }
                Some(_) => strays.push(*at),
                None => {
                    answers[*at] = Renewal::Lost(LossReason::Expired);
                    self.holds.forget_if(&id, record);
                }
            }
        }
        Ok(())
    }

    /// Deletes the holds on the session `key` that are over (the watchdog no longer renews
    /// them, or their lease was a fixed one as long as the watchdog's): they end when their
    /// holder's lease does, not when the session does. Best effort: a step that meets one
    /// deletes it too.
    fn end_over(&self, key: &SessionKey) {
        let now = Instant::now();
        let unsure: HashSet<String> = self
            .holds
            .over_on(key, now)
            .into_iter()
            .filter(|(_, record)| record.written.is_none())
            .map(|((name, _, _), _)| name)
            .collect();
        for name in unsure {
            // Asked about first: made or not, and at which revision.
            let _ = self.over(&name);
        }
        let over: Vec<_> = self
            .holds
            .over_on(key, now)
            .into_iter()
            .filter(|(_, record)| record.written.is_some())
            .collect();
        for chunk in over.chunks(OPS_PER_TXN) {
            let steps = chunk
                .iter()
                .map(|(_, record)| {
                    nested(
                        vec![crate::wire::modified_at(
                            &record.key,
                            record.written.unwrap_or_default(),
                        )],
                        vec![delete(&Span::key(&record.key))],
                        Vec::new(),
                    )
                })
                .collect();
            if self.write(Vec::new(), steps, Vec::new()).is_ok() {
                for (id, record) in chunk {
                    self.holds.forget_if(id, record);
                }
            }
        }
    }
}

/// Whether `lease`, kept alive, lasts `wanted` (its TTL is whole seconds).
fn lasts(lease: Granted, wanted: Duration) -> bool {
    Duration::from_secs(lease.ttl.max(0).unsigned_abs()) >= wanted
}
