//! Section 11: the etcd backend on a member of its own, against the same gateway by hand: a
//! range (the round trip), the bare pair (a create-if-absent `/v3/kv/txn` and a
//! `/v3/kv/deleterange` on one kept-alive connection), sampled alternately with dlock's pair;
//! a forced hand-off between two clients against a bare delete seen by a watch, and against
//! etcd's own `concurrency.Mutex` (its steps by hand, `etcd_mutex`); the watchdog's
//! renewal of 10,000 holds, counted in etcd's own request metrics.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use dlocks::backend::{AcquireRequest, DistributedLock, HoldRef, LockRef, OwnerId};
use dlocks::etcd::EtcdBackend;
use dlocks::LockClient;

use crate::etcd_gateway::{b64, Gateway};
use crate::etcd_mutex::EtcdMutex;
use crate::handoff::Kind;
use crate::report::Report;
use crate::stats::{interleaved, us, Summary};
use crate::support::etcd_server::EtcdCluster;

/// etcd's request counters by gRPC method (`grpc_server_started_total`), from `/metrics`.
fn started_calls(port: u16) -> HashMap<String, f64> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut text = String::new();
    tcp.read_to_string(&mut text).expect("metrics");
    text.lines()
        .filter(|line| line.starts_with("grpc_server_started_total{"))
        .filter_map(|line| {
            let method = line.split("grpc_method=\"").nth(1)?.split('"').next()?;
            let count: f64 = line.rsplit(' ').next()?.parse().ok()?;
            Some((method.to_owned(), count))
        })
        .fold(HashMap::new(), |mut sums, (method, count)| {
            *sums.entry(method).or_default() += count;
            sums
        })
}

pub fn section(report: &mut Report, samples: usize) {
    let cluster = EtcdCluster::single();
    let port = cluster.members()[0].client_port;
    report.note(&format!(
        "\netcd (Debian's etcd-server, one member, --unsafe-no-fsync) on 127.0.0.1:{port}, its own"
    ));
    let mut gateway = Gateway::new(port);
    let (key, end) = (b64("bench:bare/"), b64("bench:bare0"));
    let own = b64("bench:bare/1");
    let create = format!(
        "{{\"compare\":[{{\"key\":\"{key}\",\"range_end\":\"{end}\",\"target\":\"CREATE\",\
         \"result\":\"EQUAL\",\"create_revision\":\"0\"}}],\
         \"success\":[{{\"request_put\":{{\"key\":\"{own}\",\"value\":\"\"}}}}],\
         \"failure\":[{{\"request_range\":{{\"key\":\"{key}\",\"range_end\":\"{end}\",\"limit\":\"1\"}}}}]}}"
    );
    let delete = format!("{{\"key\":\"{own}\"}}");
    // The same pair with the key bound to a lease, as every contender's key is.
    let leased = gateway.post("/v3/lease/grant", "{\"TTL\":\"600\"}");
    let lease_id = leased
        .split("\"ID\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a lease")
        .to_owned();
    let create_leased = create.replace(
        "\"value\":\"\"}",
        &format!("\"value\":\"\",\"lease\":\"{lease_id}\"}}"),
    );
    let range = format!("{{\"key\":\"{}\"}}", b64("bench:nothing"));
    let client = LockClient::new(cluster.backend());
    let lock = client.lock("bench:dlock");
    let backend = cluster.backend();
    let owner = OwnerId::from_raw("bench-raw:1");
    let request = AcquireRequest::new(
        LockRef::reentrant("bench:raw"),
        &owner,
        Duration::from_secs(30),
    );
    let mut round_trip = || {
        gateway.post("/v3/kv/range", &range);
    };
    let mut gateway_pair = Gateway::new(port);
    let mut bare_pair = || {
        let answer = gateway_pair.post("/v3/kv/txn", &create);
        assert!(answer.contains("\"succeeded\":true"), "{answer}");
        gateway_pair.post("/v3/kv/deleterange", &delete);
    };
    let mut gateway_leased = Gateway::new(port);
    let mut leased_pair = || {
        let answer = gateway_leased.post("/v3/kv/txn", &create_leased);
        assert!(answer.contains("\"succeeded\":true"), "{answer}");
        gateway_leased.post("/v3/kv/deleterange", &delete);
    };
    let mut pair = || {
        lock.lock().expect("lock").unlock().expect("unlock");
    };
    let mut steps = || {
        assert!(backend
            .try_acquire(&request)
            .expect("acquire")
            .is_acquired());
        backend
            .release(LockRef::reentrant("bench:raw"), &owner)
            .expect("release");
    };
    let run = interleaved(
        samples / 10,
        samples,
        &mut [
            &mut round_trip,
            &mut bare_pair,
            &mut pair,
            &mut steps,
            &mut leased_pair,
        ],
    );
    let [rtt, bare, dlock_pair, raw, leased] = run.summaries::<5>();
    report.heading(
        "13a. etcd: a range, the bare pair by hand (create-if-absent txn + delete) and dlock's \
         pair, one kept-alive HTTP/1.1 connection each (sampled alternately)",
        &["call", "p50", "p99", "p50 / range", "p50 / bare pair"],
    );
    let row = |report: &mut Report, what: &str, summary: Summary| {
        report.row(&[
            what.into(),
            us(summary.p50_us),
            us(summary.p99_us),
            format!("{:.2}", summary.p50_us / rtt.p50_us),
            format!("{:.2}", summary.p50_us / bare.p50_us),
        ]);
    };
    row(report, "`/v3/kv/range` of one key", rtt);
    row(report, "bare create-if-absent txn + deleterange", bare);
    row(report, "the same, the key bound to a lease", leased);
    row(report, "dlock lock + unlock (watchdog lease)", dlock_pair);
    row(report, "the same two steps through the backend alone", raw);
    let ratio = run.ratio(2, 1);
    report.note(&format!(
        "  goal: pair <= 1.3 x the bare pair: {:.2} (per block {:.2}-{:.2}): {}",
        ratio.median,
        ratio.low,
        ratio.high,
        if ratio.median <= 1.3 {
            "met"
        } else {
            "not met"
        }
    ));

    handoff(report, &cluster, port, samples / 10, rtt.p50_us);
    renewal(report, &cluster, port, rtt.p50_us);
}

/// How long a hand-off's holder holds (and the floor's key lives) before it is released.
const HOLD: Duration = Duration::from_millis(20);

/// A forced hand-off between two clients (two processes' worth: separate backends), against a
/// bare delete seen by a watch on the same member.
fn handoff(report: &mut Report, cluster: &EtcdCluster, port: u16, rounds: usize, rtt: f64) {
    let rounds = rounds.max(50);
    // The floor: a watch on a key, the key deleted, the event read.
    let watched = b64("bench:floor/1");
    let mut floor = Vec::with_capacity(rounds);
    let mut writer = Gateway::new(port);
    let (tx, events) = mpsc::channel::<Instant>();
    let mut watch = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    watch.set_nodelay(true).expect("nodelay");
    let body = format!("{{\"create_request\":{{\"key\":\"{watched}\"}}}}");
    let request = format!(
        "POST /v3/watch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    watch.write_all(request.as_bytes()).expect("watch");
    let reader = watch.try_clone().expect("clone");
    thread::spawn(move || {
        for line in BufReader::new(reader).lines().map_while(Result::ok) {
            if line.contains("\"type\":\"DELETE\"") && tx.send(Instant::now()).is_err() {
                break;
            }
        }
    });
    thread::sleep(Duration::from_millis(200));
    for _ in 0..rounds {
        writer.post(
            "/v3/kv/put",
            &format!("{{\"key\":\"{watched}\",\"value\":\"\"}}"),
        );
        // As long as dlock's holder holds below: the machine idles alike before each.
        thread::sleep(HOLD);
        let sent = Instant::now();
        writer.post("/v3/kv/deleterange", &format!("{{\"key\":\"{watched}\"}}"));
        let seen = events.recv_timeout(Duration::from_secs(5)).expect("event");
        floor.push(seen.saturating_duration_since(sent));
    }
    let _ = watch.shutdown(std::net::Shutdown::Both);
    // dlock: two clients take turns (each release timed to the other's acquire returning),
    // on each kind of exclusive lock that waits, then two threads of one client.
    let clients = |kind: Kind| {
        let client = || {
            LockClient::builder(cluster.backend())
                .lock_hand_off(kind.hand_off())
                .build()
                .expect("client")
        };
        [client(), client()]
    };
    let between = |kind: Kind, name: &str| {
        let [holder, waiter] = clients(kind);
        Summary::of(&take_turns(&holder, &waiter, kind, name, rounds))
    };
    let pass = between(Kind::Plain, "bench:handoff");
    let queued = between(Kind::QueuedPlain, "bench:handoff-queued");
    let fair = between(Kind::Fair, "bench:handoff-fair");
    let [one, _] = clients(Kind::Plain);
    let local = Summary::of(&take_turns(
        &one,
        &one,
        Kind::Plain,
        "bench:handoff-threads",
        rounds,
    ));
    let mutex = Summary::of(&etcd_mutex_turns(port, rounds));
    let floor = Summary::of(&floor);
    report.heading(
        "13b. etcd forced hand-off between two clients, against a bare delete seen by a watch",
        &["what", "p50", "p99", "p50 / range", "p50 / floor"],
    );
    for (what, summary) in [
        ("bare deleterange -> watch event", floor),
        ("dlock release -> other client's lock returns", pass),
        ("the same, plain locks that queue (HandOff::Queue)", queued),
        ("the same, fair lock", fair),
        (
            "dlock release -> another thread of the client (handed over in the release)",
            local,
        ),
        (
            "etcd's own `concurrency.Mutex` by hand: Unlock -> the other session's Lock returns",
            mutex,
        ),
    ] {
        report.row(&[
            what.into(),
            us(summary.p50_us),
            us(summary.p99_us),
            format!("{:.2}", summary.p50_us / rtt),
            format!("{:.2}", summary.p50_us / floor.p50_us),
        ]);
    }
    for (between, summary) in [
        ("clients", pass),
        ("clients, queued", queued),
        ("clients, fair", fair),
        ("threads", local),
    ] {
        let ratio = summary.p50_us / floor.p50_us;
        report.note(&format!(
            "  goal: hand-off <= 1.5 x its floor, between {between}: {ratio:.2}: {}",
            if ratio <= 1.5 { "met" } else { "not met" }
        ));
    }
}

/// `rounds` hand-offs of one lock between two sessions of etcd's own `concurrency.Mutex`
/// (its steps by hand, [`EtcdMutex`]): how long from the holder's `Unlock` call to the
/// waiter's `Lock` returning.
fn etcd_mutex_turns(port: u16, rounds: usize) -> Vec<Duration> {
    let prefix = "bench:etcd-mutex";
    let (mut holder, mut waiter) = (EtcdMutex::new(port, prefix), EtcdMutex::new(port, prefix));
    timed_turns(
        rounds,
        |held| {
            holder.lock();
            held();
            holder.unlock();
        },
        move |taken| {
            waiter.lock();
            taken();
            waiter.unlock();
        },
    )
}

/// `rounds` hand-offs of the lock `name` of `kind` from a thread of `holder` to a thread of
/// `waiter` (clients made with `kind`'s hand-off): how long from the release call to the
/// waiter's lock returning.
fn take_turns(
    holder: &LockClient,
    waiter: &LockClient,
    kind: Kind,
    name: &str,
    rounds: usize,
) -> Vec<Duration> {
    timed_turns(
        rounds,
        |held| {
            let guard = kind.lock(holder, name).expect("lock");
            held();
            guard.unlock().expect("unlock");
        },
        |taken| {
            let guard = kind.lock(waiter, name).expect("lock");
            taken();
            drop(guard);
        },
    )
}

/// `rounds` hand-offs from a holder to a waiter on a thread of its own, each round: the holder
/// takes the lock and calls `held` holding it (which lets the waiter ask, waits [`HOLD`] and
/// notes the time), then releases it; the waiter takes it and calls `taken` (which notes the
/// time), then releases it. How long from each release call to the waiter's take returning.
fn timed_turns(
    rounds: usize,
    mut holder: impl FnMut(&mut dyn FnMut()),
    mut waiter: impl FnMut(&mut dyn FnMut()) + Send,
) -> Vec<Duration> {
    let (handed_tx, handed) = mpsc::channel::<Instant>();
    let mut passes = Vec::with_capacity(rounds);
    thread::scope(|s| {
        let (turn_tx, turn) = mpsc::channel::<()>();
        s.spawn(move || {
            for _ in 0..rounds {
                if turn.recv().is_err() {
                    return;
                }
                waiter(&mut || {
                    let _ = handed_tx.send(Instant::now());
                });
            }
        });
        for _ in 0..rounds {
            let mut released = Instant::now();
            holder(&mut || {
                turn_tx.send(()).expect("turn");
                // The waiter is parked (it found the lock held) well within this.
                thread::sleep(HOLD);
                released = Instant::now();
            });
            let taken = handed.recv_timeout(Duration::from_secs(10)).expect("taken");
            passes.push(taken.saturating_duration_since(released));
        }
    });
    passes
}

/// The watchdog's tick for 10,000 holds of one client: the calls etcd counted, and the time.
fn renewal(report: &mut Report, cluster: &EtcdCluster, port: u16, rtt: f64) {
    const HOLDS: usize = 10_000;
    let watchdog = Duration::from_secs(30);
    let backend: EtcdBackend = cluster
        .backend_builder()
        .watchdog_lease(watchdog)
        .build()
        .expect("backend");
    let client = uuid::Uuid::new_v4();
    let names: Vec<String> = (0..HOLDS).map(|i| format!("bench:renew:{i}")).collect();
    let owners: Vec<OwnerId> = (0..HOLDS)
        .map(|i| OwnerId::from_raw(format!("{client}:{i}")))
        .collect();
    for (name, owner) in names.iter().zip(&owners) {
        let request = AcquireRequest::new(LockRef::reentrant(name), owner, watchdog);
        assert!(backend
            .try_acquire(&request)
            .expect("acquire")
            .is_acquired());
    }
    let holds: Vec<HoldRef<'_>> = names
        .iter()
        .zip(&owners)
        .map(|(name, owner)| HoldRef {
            lock: LockRef::reentrant(name),
            owner,
        })
        .collect();
    let before = started_calls(port);
    let started = Instant::now();
    let renewed = backend.renew(&holds, watchdog).expect("renew");
    let took = started.elapsed();
    let after = started_calls(port);
    assert!(renewed
        .iter()
        .all(|r| *r == dlocks::backend::Renewal::Renewed));
    let calls: Vec<String> = after
        .iter()
        .filter_map(|(method, count)| {
            let new = count - before.get(method).copied().unwrap_or(0.0);
            (new > 0.0).then(|| format!("{method} {new}"))
        })
        .collect();
    let total: f64 = after
        .iter()
        .map(|(method, count)| count - before.get(method).copied().unwrap_or(0.0))
        .sum();
    report.heading(
        "13c. etcd: the watchdog's renewal of 10,000 holds of one client",
        &["holds", "time", "time / range", "etcd requests (by method)"],
    );
    report.row(&[
        HOLDS.to_string(),
        us(took.as_secs_f64() * 1e6),
        format!("{:.1}", took.as_secs_f64() * 1e6 / rtt),
        calls.join(", "),
    ]);
    report.note(&format!(
        "  goal: renewal one call: one keep-alive ({} requests in all, the other the read of \
         the lease's keys)",
        total
    ));
    for hold in &holds {
        backend.release(hold.lock, hold.owner).expect("release");
    }
}
