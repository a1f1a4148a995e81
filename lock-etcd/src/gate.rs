//! The gate of a session: a key on the session's lease (`<namespace>dlock-gate:<lease id in
//! hex>`) whose revision every transaction that puts a hold's key on the session compares.
//!
//! A step whose answer was lost leaves an attempt of unknown outcome, and its request may still
//! be on its way (held up in the network, queued in a member). A copy that lands after the
//! backend asked the store and forgot the attempt would put a key nobody counts on, and on a
//! session the watchdog keeps alive for the client's other holds that key would block the name
//! for as long as the client lives. So before the backend concludes that such an attempt made
//! nothing, it writes the gate again: a copy landing later compares the old revision and
//! changes nothing. (A key on a lease of its own ends with that lease, as the lease rule wants:
//! no gate is needed there.)

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::backend::Inner;
use crate::transport::Fail;
use crate::wire::{modified_at, put, Json};

/// The revision each session's gate was last written at, by the session's lease id.
#[derive(Default)]
pub(crate) struct Gates {
    revisions: Mutex<HashMap<i64, i64>>,
}

impl Gates {
    fn note(&self, lease: i64, revision: i64) {
        let mut revisions = self.revisions.lock();
        let kept = revisions.entry(lease).or_insert(revision);
        *kept = (*kept).max(revision);
    }

    /// Forgets the gate of a session etcd no longer has.
    pub(crate) fn forget(&self, lease: i64) {
        self.revisions.lock().remove(&lease);
    }
}

impl Inner {
    fn gate_key(&self, lease: i64) -> Vec<u8> {
        format!("{}dlock-gate:{lease:x}", self.namespace).into_bytes()
    }

    /// The comparison that lets a transaction put a key on the session `lease`: its gate as
    /// this backend last wrote it (written first, if this backend never did).
    pub(crate) fn through_gate(&self, lease: i64) -> Result<Json, Fail> {
        let known = self.gates.revisions.lock().get(&lease).copied();
        let revision = match known {
            Some(revision) => revision,
            None => self.move_gate(lease)?,
        };
        Ok(modified_at(&self.gate_key(lease), revision))
    }

    /// Writes the gate of the session `lease` again: every transaction sent before, through
    /// the gate as it was, changes nothing when it lands. `LeaseNotFound` when the session is
    /// gone (then nothing can be put on it any more either). A write that fails leaves no
    /// revision noted: the next put through the gate writes it first.
    pub(crate) fn move_gate(&self, lease: i64) -> Result<i64, Fail> {
        match self.write(
            Vec::new(),
            vec![put(&self.gate_key(lease), b"", lease)],
            Vec::new(),
        ) {
            Ok(answer) => {
                self.gates.note(lease, answer.revision);
                Ok(answer.revision)
            }
            Err(fail) => {
                // Written or not (an answer lost): the revision noted may be the gate's no
                // longer, and every put through it would fail its comparison; the next one
                // writes the gate again.
                self.gates.forget(lease);
                Err(fail)
            }
        }
    }
}
