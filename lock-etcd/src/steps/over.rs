//! Holds of this backend that are over: their deadline has passed (their holder counts on them
//! no longer), though etcd may keep their keys for up to a second and a half more (whole
//! seconds, a lessor that looks every half second), or as long as a session lives. A step that
//! meets such a key treats it as gone and deletes it in its own transaction: its comparisons
//! let the key be there only as this backend last wrote it, and its operations delete it only
//! so.
//!
//! A hold whose making step failed with an unknown outcome is asked about first (one read of
//! all of a name's such keys): the store tells whether it was made, at which revision.

use std::time::Instant;

use dlock_core::backend::{LockRef, OwnerId};
use dlock_core::LockError;

use crate::backend::Inner;
use crate::holds::{HoldId, HoldRecord};
use crate::keys::shares_key;
use crate::transport::Fail;
use crate::wire::{
    delete, empty, modified_at, modified_before, nested, range, rebind, Json, Kv, Span, OPS_PER_TXN,
};

/// The most over holds one step deletes; more are deleted before it, in steps of their own.
pub(crate) const OVER_PER_STEP: usize = 32;

/// The holds of one name that are over, as found before a step.
#[derive(Debug, Default)]
pub(crate) struct Over {
    holds: Vec<(HoldId, HoldRecord)>,
}

impl Over {
    /// Whether `kv` is an over hold's key as this backend last wrote it.
    pub(crate) fn contains(&self, kv: &Kv) -> bool {
        self.holds
            .iter()
            .any(|(_, record)| record.key == kv.key && Some(kv.mod_revision) <= record.written)
    }

    /// How many holds of the name are over.
    pub(crate) fn len(&self) -> usize {
        self.holds.len()
    }

    /// The keys of `kvs` that are not over.
    pub(crate) fn live(&self, kvs: Vec<Kv>) -> Vec<Kv> {
        kvs.into_iter().filter(|kv| !self.contains(kv)).collect()
    }

    /// How many keys a read of the first live one of a span must look at.
    pub(crate) fn room(&self) -> i64 {
        i64::try_from(self.holds.len()).unwrap_or(i64::MAX - 1) + 1
    }

    /// Comparisons that hold when `span` has no key but over ones, each still as this backend
    /// last wrote it (or gone).
    pub(crate) fn empty(&self, span: &Span) -> Vec<Json> {
        let (mut compares, gaps) = self.split(span);
        compares.extend(gaps.iter().map(empty));
        compares
    }

    /// `span` split at the over holds' keys in it: a comparison for each of those (still as
    /// this backend last wrote it, or gone), and the spans between them.
    pub(crate) fn split(&self, span: &Span) -> (Vec<Json>, Vec<Span>) {
        let end = span.end.clone();
        let inside: Vec<&HoldRecord> = {
            let mut inside: Vec<&HoldRecord> = self
                .holds
                .iter()
                .map(|(_, record)| record)
                .filter(|record| span.contains(&record.key))
                .collect();
            inside.sort_by(|a, b| a.key.cmp(&b.key));
            inside.dedup_by(|a, b| a.key == b.key);
            inside
        };
        if inside.is_empty() {
            return (Vec::new(), vec![span.clone()]);
        }
        let (mut compares, mut gaps) = (Vec::new(), Vec::new());
        let mut from = span.key.clone();
        for record in inside {
            if from < record.key {
                gaps.push(Span::between(&from, &record.key));
            }
            compares.push(unchanged(record));
            from = record.key.clone();
            from.push(0);
        }
        match end {
            Some(end) if from < end => gaps.push(Span::between(&from, &end)),
            _ => {}
        }
        (compares, gaps)
    }

    /// Deletes of the over holds' keys, each only as this backend last wrote it; `except` keys
    /// the step writes itself (etcd refuses two writes of one key in a transaction).
    pub(crate) fn deletes(&self, except: &[&[u8]]) -> Vec<Json> {
        let mut seen: Vec<&[u8]> = Vec::new();
        self.holds
            .iter()
            .map(|(_, record)| record)
            .filter(|record| !except.contains(&record.key.as_slice()))
            .filter(|record| {
                let first = !seen.contains(&record.key.as_slice());
                seen.push(&record.key);
                first
            })
            .map(|record| {
                nested(
                    vec![unchanged(record)],
                    vec![delete(&Span::key(&record.key))],
                    Vec::new(),
                )
            })
            .collect()
    }

    /// The over hold `owner` of `lock`, if it is one.
    pub(crate) fn find(&self, lock: LockRef<'_>, owner: &OwnerId) -> Option<&HoldRecord> {
        let id = crate::holds::hold_id(lock, owner);
        self.holds
            .iter()
            .find(|(over, _)| *over == id)
            .map(|(_, record)| record)
    }

    /// Forgets the over holds once a transaction with their deletes ran (whichever branch).
    pub(crate) fn done(&self, inner: &Inner) {
        for (id, record) in &self.holds {
            inner.holds.forget_if(id, record);
        }
    }
}

/// `mod_revision(key) <= record.written`: the key is as this backend last wrote it, or gone.
fn unchanged(record: &HoldRecord) -> Json {
    let written = record.written.unwrap_or(0);
    modified_before(&Span::key(&record.key), written.saturating_add(1))
}

impl Inner {
    /// The holds of `name` this backend made that are over now, after asking the store about
    /// those whose making step's outcome is unknown: at most [`OVER_PER_STEP`] of them, the
    /// others deleted first, [`OPS_PER_TXN`] to a transaction (a step carries two
    /// comparisons and a delete for each, and etcd refuses a transaction of more than 128
    /// operations to a list).
    pub(crate) fn over(&self, name: &str) -> Result<Over, LockError> {
        let mut recorded = self.holds.of_name(name);
        if recorded.iter().any(|(_, record)| record.written.is_none()) {
            recorded = self.resolve(recorded)?;
        }
        let now = Instant::now();
        let mut over: Vec<(HoldId, HoldRecord)> = recorded
            .into_iter()
            .filter(|(_, record)| record.written.is_some() && record.is_over(now))
            .collect();
        while over.len() > OVER_PER_STEP {
            let end = over.len() - OVER_PER_STEP;
            let swept = Over {
                holds: over.drain(..end.min(OPS_PER_TXN)).collect(),
            };
            self.write(Vec::new(), swept.deletes(&[]), Vec::new())?;
            swept.done(self);
        }
        Ok(Over { holds: over })
    }

    /// Asks the store at once about the holds of `names` whose last write's answer was just
    /// lost. An extend or a move that landed counts only if an answer that arrived while its
    /// hold lasted showed it (see `resolve`); asked when next met, after the hold's first
    /// deadline, one that landed at once could no longer be told from one held up in the
    /// network past it, and the hold would be given up while the store keeps it on its new
    /// lease. Best effort, in one call (the first request that fails ends it, so a store that
    /// does not answer costs one request timeout): the holds not settled now are asked about
    /// again when next met.
    pub(crate) fn resolve_now(&self, names: &[&str]) {
        let recorded: Vec<(HoldId, HoldRecord)> = names
            .iter()
            .flat_map(|name| self.holds.of_name(name))
            .collect();
        if recorded.iter().any(|(_, record)| record.written.is_none()) {
            // An error leaves the records unsure, as they were.
            let _ = self.resolve(recorded);
        }
    }

    /// Asks the store about the holds of `recorded` a write of which had an unknown outcome
    /// (one read, after the gates of the sessions they may be on moved: see [`crate::gate`]).
    /// One found (its key has the hold's value, or is the hold's own) is there as last written
    /// at the key's mod revision (and was made then, if its making was the unknown write). One
    /// not found is gone; or, if its making was the unknown write: on a session, never made
    /// (a copy arriving later finds the gate moved) and forgotten; on a lease of its own, not
    /// made yet, and forgotten once over (a copy arriving later makes a hold nobody counts on,
    /// which that lease ends), else asked about again.
    fn resolve(
        &self,
        recorded: Vec<(HoldId, HoldRecord)>,
    ) -> Result<Vec<(HoldId, HoldRecord)>, LockError> {
        let unknown: Vec<usize> = (0..recorded.len())
            .filter(|at| recorded[*at].1.written.is_none())
            .collect();
        let mut gated: Vec<i64> = unknown
            .iter()
            .map(|at| &recorded[*at].1)
            .filter_map(|record| match &record.pending_move {
                Some(pending) => pending.session.as_ref().map(|_| pending.lease.id),
                None if record.made_at.is_none() && record.session.is_some() => {
                    Some(record.lease.id)
                }
                None => None,
            })
            .collect();
        gated.sort_unstable();
        gated.dedup();
        for lease in gated {
            match self.move_gate(lease) {
                // A session etcd no longer has takes no key either.
                Ok(_) | Err(Fail::LeaseNotFound) => {}
                Err(fail) => return Err(fail.into()),
            }
        }
        let mut answers = Vec::new();
        for chunk in unknown.chunks(OPS_PER_TXN) {
            answers.push(
                self.read(
                    chunk
                        .iter()
                        .map(|at| range(&Span::key(&recorded[*at].1.key)))
                        .collect(),
                )?,
            );
        }
        let now = Instant::now();
        let mut resolved = Vec::with_capacity(recorded.len());
        let mut found = std::collections::HashMap::new();
        for (step, at) in unknown.iter().enumerate() {
            let answer = &answers[step / OPS_PER_TXN];
            found.insert(*at, answer.kvs(step % OPS_PER_TXN)?.into_iter().next());
        }
        for (at, (id, mut record)) in recorded.into_iter().enumerate() {
            let Some(kv) = found.remove(&at) else {
                resolved.push((id, record));
                continue;
            };
            // A hold its waiter's turn made is its empty place until a write of its id lands.
            let made = kv.filter(|kv| {
                !shares_key(id.1)
                    || kv.value == id.2.as_str().as_bytes()
                    || record.turn_of.is_some()
                        && kv.value.is_empty()
                        && (record.pending_move.as_ref()).is_some_and(|p| p.from == kv.mod_revision)
            });
            match made {
                Some(kv) => {
                    let mut written = kv.mod_revision;
                    if let Some(pending) = record.pending_move.take() {
                        if kv.mod_revision > pending.from {
                            // The write landed: the hold is on the lease it asked for. A take
                            // over the ended hold's key made a new hold, counted on to its own
                            // deadline (as any take of unknown outcome). An extend or a move
                            // that landed while the hold lasted (an answer by its deadline
                            // showed its revision) keeps it as long as it asked; held up in
                            // the network past that, it lengthens nothing: the hold had
                            // ended, and only its key lives on, to be deleted.
                            record.lease = pending.lease;
                            record.session = pending.session;
                            if let Some(place) = record.turn_of.take() {
                                self.place_lease.let_go(&place, &record.key);
                            }
                            if pending.anew {
                                record.deadline = pending.deadline;
                                record.made_at = None;
                            } else if self.revisions.written_by(kv.mod_revision, record.deadline) {
                                record.deadline = record.deadline.max(pending.deadline);
                            }
                        } else if pending.anew {
                            // Not landed: the key is the over hold's, as this backend last
                            // wrote it. A copy landing later finds it written since, or gone
                            // (then, on a session, the gate moved above stops it; on a lease
                            // of its own, it makes a hold that lease ends).
                        } else if pending.session.is_none() {
                            // It did not land, and a copy of it still may: the key is written
                            // again as it is, so that the copy (which compares the revision it
                            // was sent with) changes nothing. (Onto a session, the gate moved
                            // above stops it.)
                            match self.touch(&record, pending.from)? {
                                Some(revision) => written = revision,
                                None => {
                                    // Changed meanwhile: asked about again when next met.
                                    record.pending_move = Some(pending);
                                    resolved.push((id, record));
                                    continue;
                                }
                            }
                        }
                    }
                    // Made by the unknown write: at its key's creation, for a key of its own;
                    // at the write, for a key its client's holds share.
                    let made = if shares_key(id.1) {
                        kv.mod_revision
                    } else {
                        kv.create_revision
                    };
                    record.made_at = record.made_at.or(Some(made));
                    record.written = Some(written);
                    self.holds.record(id.clone(), record.clone());
                    resolved.push((id, record));
                }
                None if record.made_at.is_some()
                    || record.session.is_some()
                    || record.is_over(now) =>
                {
                    self.holds.forget_if(&id, &record);
                }
                None => resolved.push((id, record)),
            }
        }
        Ok(resolved)
    }

    /// Writes `record`'s key again, on the lease it is on, if it is still as written at
    /// revision `from`: the revision it is at now, or `None` if it changed.
    fn touch(&self, record: &HoldRecord, from: i64) -> Result<Option<i64>, LockError> {
        let answer = self.write(
            vec![modified_at(&record.key, from)],
            vec![rebind(&record.key, record.lease.id)],
            Vec::new(),
        )?;
        Ok(answer.succeeded.then_some(answer.revision))
    }
}
