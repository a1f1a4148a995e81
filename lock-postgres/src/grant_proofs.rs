//! Grants that prove themselves: the secret each fair waiter's offer carries, and the grants
//! whose message brought it back.
//!
//! A fair waiter that offers to be granted the lock sends a fresh random secret with its
//! attempt; the store keeps it where the locks' readers cannot read it (a schema of its own,
//! which roles granted only the lock tables cannot use), and the release that grants that
//! very offer sends it back on the waiter's channel (`g<attempt>:<key>:<secret>`). Anyone may
//! `NOTIFY`, and a reader of the lock tables knows the offer's number, but not its secret: a
//! grant message carrying the secret of the waiter's latest offer was sent by the store's own
//! release, so the waiter holds without a claim of its own.
//!
//! The hold is believed for the grant's lease counted from when the attempt that made the
//! offer was sent: the store started the grant's lease later than that (the release ran after
//! the offer was kept), so it ends later too, as the lease rule needs. A proof with less than
//! half that lease left is not used: the waiter claims as it would without one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The waiters' latest offers, by waiter key (`keys::waiter_key`).
#[derive(Default)]
pub(crate) struct GrantProofs {
    offers: Mutex<HashMap<String, Offer>>,
}

/// One waiter's latest offer.
struct Offer {
    attempt: u64,
    hold: String,
    secret: String,
    sent_at: Instant,
    lease: Duration,
    /// A grant of this offer came with its secret.
    proven: bool,
}

impl GrantProofs {
    /// Notes the offer of the waiter whose key is `key`, made by `attempt` as the hold `hold`
    /// for a grant lease of `lease`, about to be sent (so `sent_at` is no later than the
    /// store's keeping of it); it replaces the waiter's earlier one. Answers the secret to send
    /// with it.
    pub(crate) fn offer(&self, key: &str, attempt: u64, hold: &str, lease: Duration) -> String {
        let secret = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        self.offers.lock().insert(
            key.to_owned(),
            Offer {
                attempt,
                hold: hold.to_owned(),
                secret: secret.clone(),
                sent_at: Instant::now(),
                lease,
                proven: false,
            },
        );
        secret
    }

    /// A grant message for the waiter whose key is `key`, naming `attempt` and carrying
    /// `proof`: the offer is proven if it is that attempt's and the proof is its secret.
    pub(crate) fn prove(&self, key: &str, attempt: u64, proof: &str) {
        if let Some(offer) = self.offers.lock().get_mut(key) {
            if offer.attempt == attempt && same(offer.secret.as_bytes(), proof.as_bytes()) {
                offer.proven = true;
            }
        }
    }

    /// The hold `hold` of the waiter whose key is `key`, if a grant proved its latest offer:
    /// how long it is held for from `now` on the store at least. The offer is spent either
    /// way; `None` if there was no proof, it was another hold's, or less than half the grant
    /// lease is left.
    pub(crate) fn take(&self, key: &str, hold: &str, now: Instant) -> Option<Duration> {
        let mut offers = self.offers.lock();
        let offer = offers.get(key)?;
        if !offer.proven || offer.hold != hold {
            return None;
        }
        let offer = offers.remove(key)?;
        let left = (offer.sent_at + offer.lease).saturating_duration_since(now);
        (left >= offer.lease / 2).then_some(left)
    }

    /// The waiter whose key is `key` makes no more offers (it holds, or stopped waiting).
    pub(crate) fn forget(&self, key: &str) {
        self.offers.lock().remove(key);
    }
}

/// Whether `a` and `b` are equal, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::GrantProofs;

    const LEASE: Duration = Duration::from_secs(2);

    #[test]
    fn only_the_latest_offers_own_secret_proves_a_grant() {
        let proofs = GrantProofs::default();
        let first = proofs.offer("wk", 1, "hold", LEASE);
        let second = proofs.offer("wk", 2, "hold", LEASE);
        // The earlier attempt's grant, a wrong secret, another waiter's key: nothing.
        proofs.prove("wk", 1, &first);
        proofs.prove("wk", 2, &first);
        proofs.prove("wk", 2, "forged");
        proofs.prove("other", 2, &second);
        assert_eq!(proofs.take("wk", "hold", Instant::now()), None);
        proofs.prove("wk", 2, &second);
        // Another hold of the same waiter is not the one granted.
        assert_eq!(proofs.take("wk", "another hold", Instant::now()), None);
        let left = proofs.take("wk", "hold", Instant::now()).expect("proven");
        assert!(left <= LEASE && left > LEASE / 2);
        // Spent.
        assert_eq!(proofs.take("wk", "hold", Instant::now()), None);
    }

    #[test]
    fn a_proof_with_less_than_half_its_lease_left_is_not_used() {
        let proofs = GrantProofs::default();
        let secret = proofs.offer("wk", 7, "hold", LEASE);
        proofs.prove("wk", 7, &secret);
        let later = Instant::now() + LEASE / 2 + Duration::from_millis(1);
        assert_eq!(proofs.take("wk", "hold", later), None);
        // And the offer is spent: the waiter claims.
        assert_eq!(proofs.take("wk", "hold", Instant::now()), None);
    }

    #[test]
    fn a_forgotten_offer_proves_nothing() {
        let proofs = GrantProofs::default();
        let secret = proofs.offer("wk", 3, "hold", LEASE);
        proofs.forget("wk");
        proofs.prove("wk", 3, &secret);
        assert_eq!(proofs.take("wk", "hold", Instant::now()), None);
    }
}
