//! A fair lock's queue as the store shows it (what `dlock status` shows an operator): where a
//! waiter arrived is where the store put it, so a test that needs waiters to arrive in an order
//! waits for the store to count each one, not for a pause to pass.

use std::thread;
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;

/// How long a waiter may take to queue: its first step, on a loaded machine, through consensus.
const QUEUE_PATIENCE: Duration = Duration::from_secs(30);

/// Waits until the store shows at least `count` waiters queued for the fair lock `name`;
/// `false` if `backend` does not inspect its locks (the caller waits another way).
pub fn await_queued(backend: &dyn DistributedLock, name: &str, count: u64) -> bool {
    let Some(inspection) = backend.inspection() else {
        return false;
    };
    let deadline = Instant::now() + QUEUE_PATIENCE;
    loop {
        let queued = inspection.inspect(name).expect("inspect").queued_waiters;
        if queued >= count {
            return true;
        }
        assert!(
            Instant::now() < deadline,
            "{count} waiters did not queue for {name} within {QUEUE_PATIENCE:?} (the store shows {queued})"
        );
        thread::sleep(Duration::from_millis(5));
    }
}
