//! The watchdog's renewal on PostgreSQL: one call renews a whole batch of holds; a large batch
//! goes as two halves at once, cut by name.

use std::time::Duration;

use dlock_core::backend::{HoldRef, LossReason, Renewal};
use dlock_core::LockError;

use super::codec::{micros, one_row, protocol};
use super::statements::Step;
use super::PostgresBackend;
use crate::error::to_lock_error;
use crate::pool::{Retry, StepFailure};

/// From this many holds a renewal is sent in two halves at once.
const SPLIT_RENEWAL_AT: usize = 2_000;

/// Which half of a split renewal a name's holds go to.
fn odd_hash(name: &str) -> bool {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    name.hash(&mut hasher);
    hasher.finish() % 2 == 1
}

impl PostgresBackend {
    /// Renews `holds`: one call, or two halves at once on two connections for a large batch.
    pub(super) fn renew_all(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
    ) -> Result<Vec<Renewal>, LockError> {
        if holds.len() >= SPLIT_RENEWAL_AT && self.inner.pool.max_size() >= 2 {
            // Two halves at once on two connections: the server renews each on a core of its
            // own. Each hold's renewal stands alone, so two transactions lose nothing; the
            // halves are cut by name, so they never wait for (or deadlock on) each other's
            // rows (several read holds or permits of one name share its row).
            let in_second: Vec<bool> = holds.iter().map(|hold| odd_hash(hold.lock.name)).collect();
            let (mut first, mut second) = (Vec::new(), Vec::new());
            for (hold, odd) in holds.iter().zip(&in_second) {
                if *odd {
                    second.push(*hold);
                } else {
                    first.push(*hold);
                }
            }
            let both = std::thread::scope(|scope| {
                let other = std::thread::Builder::new()
                    .name("dlock-renew-half".into())
                    .spawn_scoped(scope, || self.renew_batch(&second, lease))
                    .ok()?;
                let mine = self.renew_batch(&first, lease);
                Some((mine, other.join()))
            });
            if let Some((mine, Ok(other))) = both {
                let (mut mine, mut other) = (mine?.into_iter(), other?.into_iter());
                // Back in the order asked (each half answered in its own order).
                return in_second
                    .iter()
                    .map(|second| if *second { other.next() } else { mine.next() })
                    .collect::<Option<Vec<Renewal>>>()
                    .ok_or_else(|| LockError::protocol("a half renewal answered too few results"));
            }
            // No second thread (or it panicked): one call for the whole batch.
        }
        self.renew_batch(holds, lease)
    }

    /// One renewal call for every hold of `holds`.
    fn renew_batch(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
    ) -> Result<Vec<Renewal>, LockError> {
        if holds.is_empty() {
            return Ok(Vec::new());
        }
        let mut kinds = Vec::with_capacity(holds.len());
        for hold in holds {
            kinds.push(self.check(hold.lock)?);
        }
        let names: Vec<&str> = holds.iter().map(|h| h.lock.name).collect();
        let owners: Vec<&str> = holds.iter().map(|h| h.owner.as_str()).collect();
        let lease = micros(lease);
        let sql = self.inner.statements.get(Step::Renew);
        let timeout = self.inner.statement_timeout;
        // Renewing twice is harmless: a failed connection's renewal is simply sent again.
        let rows = self
            .inner
            .pool
            .run("renewing leases", Retry::OnConnectionFailure, |con, _| {
                con.query(
                    timeout,
                    sql,
                    &[&kinds, &names, &owners, &lease, &self.inner.sync],
                )
            })
            .map_err(|failure| match failure {
                StepFailure::Checkout(error) => error,
                StepFailure::Call(error) => {
                    to_lock_error(error, "renewing leases", &self.inner.server)
                }
            })?;
        let codes: Vec<i16> = one_row(rows, "a renewal")?.try_get(0).map_err(protocol)?;
        if codes.len() != holds.len() {
            return Err(LockError::protocol(format!(
                "a renewal of {} holds answered {} results",
                holds.len(),
                codes.len()
            )));
        }
        Ok(codes
            .into_iter()
            .map(|code| match code {
                1 => Renewal::Renewed,
                2 => Renewal::Lost(LossReason::TakenOver),
                _ => Renewal::Lost(LossReason::Gone),
            })
            .collect())
    }
}
