//! Tidying commands shared by every connection to one server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::resp;

/// At most this many commands wait: past it, a new one is dropped (every command queued here
/// deletes a key that also expires by itself).
const MOST_WAITING: usize = 1024;

/// Commands whose replies nobody needs (a release's latch `DEL`), written in front of the next
/// step that *any* connection to the server sends, so they cost no write of their own.
///
/// The queue belongs to the server, not to one connection: a connection may sit idle in the
/// pool for as long as the pool keeps it (or be closed), and a tidying command kept on it would
/// wait as long.
#[derive(Clone, Default)]
pub(crate) struct Tidying {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Set while `queue` holds commands: the common step checks this, not the lock.
    waiting: AtomicBool,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// The commands, packed.
    packed: Vec<u8>,
    count: usize,
}

impl Tidying {
    /// Queues the command of `words`.
    pub(crate) fn push(&self, words: &[&[u8]]) {
        let mut queue = self.inner.queue.lock();
        if queue.count >= MOST_WAITING {
            return;
        }
        resp::command(&mut queue.packed, words);
        queue.count += 1;
        self.inner.waiting.store(true, Ordering::Release);
    }

    /// Whether commands wait to be written.
    pub(crate) fn waiting(&self) -> bool {
        self.inner.waiting.load(Ordering::Acquire)
    }

    /// Moves the waiting commands to the end of `out` and says how many there were.
    pub(crate) fn take_into(&self, out: &mut Vec<u8>) -> usize {
        if !self.waiting() {
            return 0;
        }
        let mut queue = self.inner.queue.lock();
        self.inner.waiting.store(false, Ordering::Release);
        out.extend_from_slice(&queue.packed);
        queue.packed.clear();
        std::mem::take(&mut queue.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_taken_once_in_the_order_they_were_queued() {
        let tidying = Tidying::default();
        assert!(!tidying.waiting());
        tidying.push(&[b"DEL", b"a"]);
        tidying.clone().push(&[b"DEL", b"b"]);
        assert!(tidying.waiting());
        let mut out = b"before".to_vec();
        assert_eq!(tidying.take_into(&mut out), 2);
        assert_eq!(
            out,
            b"before*2\r\n$3\r\nDEL\r\n$1\r\na\r\n*2\r\n$3\r\nDEL\r\n$1\r\nb\r\n"
        );
        assert!(!tidying.waiting());
        assert_eq!(tidying.take_into(&mut out), 0);
    }

    #[test]
    fn a_full_queue_drops_what_comes_next() {
        let tidying = Tidying::default();
        for _ in 0..MOST_WAITING + 5 {
            tidying.push(&[b"DEL", b"k"]);
        }
        assert_eq!(tidying.take_into(&mut Vec::new()), MOST_WAITING);
    }
}
