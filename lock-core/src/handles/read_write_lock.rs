//! The read-write lock's handles: many readers, or one writer.

use std::fmt;

use crate::engine::Handle;
use crate::handles::lock::lock_methods;

/// A read-write lock called [`name`](ReadWriteLock::name), from
/// [`LockClient::read_write_lock`](crate::LockClient::read_write_lock) (Redisson's
/// `RReadWriteLock`): its [`read_lock`](ReadWriteLock::read_lock) is shared by any number of
/// threads in any number of processes, its [`write_lock`](ReadWriteLock::write_lock) excludes
/// every reader and every other writer.
///
/// Both sides are reentrant per thread, renewed by the watchdog, bounded in their waits and
/// reported on when lost, as [`Lock`](crate::Lock) is. A thread holding the write lock may also
/// take the read lock (and keep it after releasing the write lock: a downgrade); a thread
/// holding the read lock that asks for the write lock gets
/// [`LockError::WouldDeadlock`](crate::LockError::WouldDeadlock) at once, since the write lock
/// would wait for that very reader.
///
/// Readers and writers go by turns, across processes, on every backend that keeps turns
/// ([`keeps_turns`](crate::backend::DistributedLock::keeps_turns)): while a writer waits, a new
/// reader waits behind it, so a steady stream of readers cannot keep a writer out; the readers
/// that waited behind a writer's hold go in before the next writer; and the writers take a
/// free lock in the order they were first refused, so writers cannot keep one another out. A
/// Redisson `RReadWriteLock` sharing the name does neither (its readers come in whenever no
/// writer holds the lock).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlocks::{LockClient, MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let service = |_| LockClient::new(backend.clone());    // one client per process
/// let (a, b, c): (LockClient, LockClient, LockClient) = (service(1), service(2), service(3));
/// let reading = a.read_write_lock("config").read_lock().lock()?;
/// let also_reading = b.read_write_lock("config").read_lock().try_lock()?;  // shared
/// assert!(also_reading.is_some());
/// let writer = c.read_write_lock("config").write_lock();
/// assert!(writer.try_lock_for(Duration::from_millis(5))?.is_none());     // readers inside
/// drop((reading, also_reading));
/// let writing = writer.lock()?;                                           // now alone
/// assert!(a.read_write_lock("config").read_lock().try_lock()?.is_none());
/// writing.unlock()?;
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    read: ReadLock,
    write: WriteLock,
}

impl ReadWriteLock {
    pub(crate) fn new(read: Handle, write: Handle) -> Self {
        ReadWriteLock {
            read: ReadLock { handle: read },
            write: WriteLock { handle: write },
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// The shared side.
    pub fn read_lock(&self) -> ReadLock {
        self.read.clone()
    }

    /// The exclusive side.
    pub fn write_lock(&self) -> WriteLock {
        self.write.clone()
    }
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// The shared side of a [`ReadWriteLock`]: held by any number of threads at once while no
/// writer holds the lock. `is_locked` tells whether anyone holds it for reading.
#[derive(Clone)]
pub struct ReadLock {
    pub(crate) handle: Handle,
}

impl ReadLock {
    lock_methods!();
}

impl fmt::Debug for ReadLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadLock")
            .field("name", &self.handle.name())
            .finish_non_exhaustive()
    }
}

/// The exclusive side of a [`ReadWriteLock`]: held by one thread at a time, and only while no
/// other thread reads. `is_locked` tells whether anyone holds it for writing.
#[derive(Clone)]
pub struct WriteLock {
    pub(crate) handle: Handle,
}

impl WriteLock {
    lock_methods!();
}

impl fmt::Debug for WriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteLock")
            .field("name", &self.handle.name())
            .finish_non_exhaustive()
    }
}
