//! What a reader costs etcd while a writer waits: a reader that leaves and asks again at once
//! (as a loop does) is refused by the writer's mark from the name's watch, with no call, and is
//! let in once the writer has been in, or has given up.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::{LockClient, LockError, LockGuard, OwnedLockGuard};

/// How long a test waits for what must come.
const PATIENCE: Duration = Duration::from_secs(30);

/// A writer waiting on `name` behind two readers: the reader's read (it waited on the name a
/// moment ago) and another's.
struct WriterWaiting {
    name: String,
    read: LockGuard,
    other_read: LockGuard,
    /// The writer's wait, ended (`Ok(None)`: it gave up after its patience).
    write: mpsc::Receiver<Result<Option<OwnedLockGuard>, LockError>>,
}

fn writer_waiting(
    cluster: &EtcdCluster,
    reader: &LockClient,
    writer: &LockClient,
    writer_patience: Duration,
) -> WriterWaiting {
    let name = crate::aligned_name("readers");
    let lock = |client: &LockClient| client.read_write_lock(name.clone());
    // The reader waits on the name for a moment, behind a write hold, and then reads.
    let held = lock(writer).write_lock().lock().expect("write");
    let waited = lock(reader)
        .read_lock()
        .try_lock_for(Duration::from_millis(50))
        .expect("try");
    assert!(waited.is_none(), "the reader waited behind the write hold");
    held.unlock().expect("unlock");
    let read = lock(reader).read_lock().lock().expect("read");
    let other = LockClient::new(cluster.backend());
    let other_read = lock(&other).read_lock().lock().expect("read");
    // The writer waits behind the two readers.
    let (sender, write) = mpsc::channel();
    let write_lock = lock(writer).write_lock();
    thread::spawn(move || {
        let _ = sender.send(write_lock.try_lock_owned_for(writer_patience));
    });
    // Once it waits, a new reader is refused.
    let probe = LockClient::new(cluster.backend());
    let deadline = Instant::now() + PATIENCE;
    while let Some(read) = lock(&probe).read_lock().try_lock().expect("try") {
        read.unlock().expect("unlock");
        assert!(Instant::now() < deadline, "the writer never waited");
        thread::sleep(Duration::from_millis(5));
    }
    WriterWaiting {
        name,
        read,
        other_read,
        write,
    }
}

/// A reader that leaves while a writer waits and asks again is refused, each time, with no
/// transaction (a refused try and its reads were one each); once the writer has been in and
/// gone, the reader reads.
#[test]
fn a_reader_back_while_a_writer_waits_is_refused_with_no_call() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let reader = LockClient::new(crate::backend_through(&proxy, Duration::from_secs(10)));
    let writer = LockClient::new(cluster.backend());
    let waiting = writer_waiting(&cluster, &reader, &writer, PATIENCE);
    let lock = reader.read_write_lock(waiting.name.clone());
    waiting.read.unlock().expect("unlock");
    proxy.record_requests(&STANDARD.encode(cluster.backend().key_prefix(&waiting.name)));
    for _ in 0..4 {
        let again = lock
            .read_lock()
            .try_lock_for(Duration::from_millis(100))
            .expect("try");
        assert!(again.is_none(), "refused while the writer waits");
    }
    let tries = proxy
        .recorded()
        .iter()
        .filter(|request| String::from_utf8_lossy(request).contains("request_put"))
        .count();
    // One at most: the watch may not have come to the writer's mark yet.
    assert!(tries <= 1, "{tries} refused transactions for four tries");

    waiting.other_read.unlock().expect("unlock");
    let write = waiting
        .write
        .recv_timeout(PATIENCE)
        .expect("the writer answered")
        .expect("write")
        .expect("the writer went in");
    write.unlock().expect("unlock");
    lock.read_lock()
        .try_lock_for(PATIENCE)
        .expect("read")
        .expect("the reader reads after the writer")
        .unlock()
        .expect("unlock");
}

/// A writer that gives up lets in the reader it held off, whose refusal came from the watch:
/// the writer's mark going wakes it.
#[test]
fn a_reader_refused_by_a_writer_that_gives_up_reads_at_once() {
    let cluster = EtcdCluster::single();
    let reader = LockClient::new(cluster.backend());
    let writer = LockClient::new(cluster.backend());
    let waiting = writer_waiting(&cluster, &reader, &writer, Duration::from_millis(300));
    let lock = reader.read_write_lock(waiting.name.clone()).read_lock();
    waiting.read.unlock().expect("unlock");
    let (sender, again) = mpsc::channel();
    thread::spawn(move || {
        let _ = sender.send(lock.lock_owned());
    });
    let gave_up = waiting
        .write
        .recv_timeout(PATIENCE)
        .expect("the writer answered")
        .expect("no error");
    assert!(
        gave_up.is_none(),
        "the writer gave up behind the other read"
    );
    again
        .recv_timeout(PATIENCE)
        .expect("the reader answered")
        .expect("the reader reads beside the other")
        .unlock()
        .expect("unlock");
    waiting.other_read.unlock().expect("unlock");
}

/// A waiting reader's watches carry only what can let it in: a writer's hold going, or a
/// writer's mark. The other readers' holds, which never refuse it, coming and going are not
/// sent to its process at all (with six readers looping, they were most of what etcd sent).
#[test]
fn a_waiting_readers_watch_hears_writers_not_readers() {
    use dlocks::backend::{DistributedLock, LockKind, LockRef};

    let cluster = EtcdCluster::single();
    let name = crate::aligned_name("reader-watch");
    let readers: Vec<LockClient> = (0..3).map(|_| LockClient::new(cluster.backend())).collect();
    let reads: Vec<LockGuard> = readers
        .iter()
        .map(|client| {
            let read = client.read_write_lock(name.clone()).read_lock();
            read.lock().expect("read")
        })
        .collect();
    // A reader of another process waits on the name, through its backend's own steps.
    let waiting = cluster.backend();
    let read = LockRef::new(&name, LockKind::Read);
    let waiter = crate::owner("waiting reader");
    let _subscription = waiting.subscribe(read, &waiter).expect("subscribe");
    // The count, once the watches can tell (a watch that may have started behind the store
    // cannot, until it speaks or etcd's sync round has run).
    let heard = || {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(heard) = waiting.releases_heard(read, &waiter) {
                return heard;
            }
            assert!(Instant::now() < deadline, "the watches never came in step");
            thread::sleep(Duration::from_millis(5));
        }
    };
    let before = heard();
    // The readers leave; then a writer comes and goes, which the waiting reader hears.
    for read in reads {
        read.unlock().expect("unlock");
    }
    let writer = LockClient::new(cluster.backend());
    let write = writer.read_write_lock(name.clone()).write_lock();
    write.lock().expect("write").unlock().expect("unlock");
    let deadline = Instant::now() + PATIENCE;
    while heard() == before {
        assert!(
            Instant::now() < deadline,
            "the writer's release was never heard"
        );
        thread::sleep(Duration::from_millis(5));
    }
    // Its stream has come to the writer's release, and heard nothing before it.
    assert_eq!(heard(), before + 1, "only the writer's release was heard");
}
