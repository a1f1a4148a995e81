//! Scenarios 1-4 and 6 on Redis: the round trip, the uncontended pair, reentrancy, throughput
//! and the watchdog with 10,000 holds.

use std::thread;
use std::time::{Duration, Instant};

use dlocks::redis::RedisBackend;
use dlocks::{LockClient, LockClientBuilder};
use redis::io::tcp::TcpSettings;
use redis::IntoConnectionInfo;

use crate::replayed_pair::ReplayedPair;
use crate::stats::{ops_per_second, time_each, Alternated, Summary};

/// A plain connection configured like the backend's command connections (TCP_NODELAY).
pub fn plain_connection(url: &str) -> redis::Connection {
    let info = url
        .into_connection_info()
        .expect("bench server URL")
        .set_tcp_settings(TcpSettings::default().set_nodelay(true));
    redis::Client::open(info)
        .and_then(|client| client.get_connection())
        .expect("connect to the bench server")
}

pub const TRIVIAL_SCRIPT: &str = "return 1";

/// Scenario 1: PING and EVALSHA of a trivial script, one thread.
pub fn round_trips(url: &str, iterations: usize) -> (Summary, Summary) {
    let mut con = plain_connection(url);
    let ping = time_each(500, iterations, || {
        let _: String = redis::cmd("PING").query(&mut con).expect("PING");
    });
    let script = redis::Script::new(TRIVIAL_SCRIPT);
    let evalsha = time_each(500, iterations, || {
        let _: i64 = script.invoke(&mut con).expect("EVALSHA");
    });
    (ping, evalsha)
}

/// The floor of any pub/sub hand-off on this machine: after 1 ms of idling (as a holder
/// does), how long from calling PUBLISH until a thread blocked on a subscribed connection has
/// the message, and the PUBLISH round trip itself.
pub fn publish_wakeup(url: &str, iterations: usize) -> (Summary, Summary) {
    let channel = format!("bench:wake:{}", uuid::Uuid::new_v4());
    let mut subscriber = plain_connection(url);
    let (sent_tx, sent_rx) = std::sync::mpsc::channel::<std::time::Instant>();
    let (seen_tx, seen_rx) = std::sync::mpsc::channel::<Duration>();
    let listener = {
        let channel = channel.clone();
        thread::spawn(move || {
            let mut pubsub = subscriber.as_pubsub();
            if pubsub.subscribe(&channel).is_err() {
                return;
            }
            let _ = seen_tx.send(Duration::ZERO); // subscribed
            while let Ok(message) = pubsub.get_message() {
                let received = std::time::Instant::now();
                if message.get_payload::<String>().is_ok_and(|p| p == "stop") {
                    return;
                }
                if let Ok(sent) = sent_rx.recv() {
                    let _ = seen_tx.send(received.saturating_duration_since(sent));
                }
            }
        })
    };
    let _ = seen_rx.recv_timeout(Duration::from_secs(5));
    let mut publisher = plain_connection(url);
    let mut publish = Vec::with_capacity(iterations);
    let mut wake = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        thread::sleep(Duration::from_millis(1));
        let start = std::time::Instant::now();
        let _ = sent_tx.send(start);
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("0")
            .query(&mut publisher)
            .unwrap_or(0);
        publish.push(start.elapsed());
        if let Ok(latency) = seen_rx.recv_timeout(Duration::from_secs(5)) {
            wake.push(latency);
        }
    }
    let _: i64 = redis::cmd("PUBLISH")
        .arg(&channel)
        .arg("stop")
        .query(&mut publisher)
        .unwrap_or(0);
    let _ = listener.join();
    (Summary::of(&publish), Summary::of(&wake))
}

/// The uncontended pair (watchdog, then 10 s lease) sampled alternately with a `PING` on a
/// plain connection to `url`, so that the ratio of the two saw the same machine: (ping,
/// watchdog pair, leased pair).
pub fn pair_with_ping(client: &LockClient, url: &str, iterations: usize) -> Alternated {
    let lock = client.lock(format!("bench:pair:{}", uuid::Uuid::new_v4()));
    let mut con = plain_connection(url);
    let mut ping = || {
        let _: String = redis::cmd("PING").query(&mut con).expect("PING");
    };
    let mut watchdog = || lock.lock().expect("lock").unlock().expect("unlock");
    let mut leased = || {
        lock.lock_with_lease(Duration::from_secs(10))
            .expect("lock")
            .unlock()
            .expect("unlock");
    };
    crate::stats::interleaved(
        500,
        iterations,
        &mut [&mut ping, &mut watchdog, &mut leased],
    )
}

/// Calls of one command since the server started, from `INFO commandstats`.
pub fn command_calls(con: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .unwrap_or_default();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

/// Scenario 3: a reentrant acquire on a held lock: its time and its Redis calls.
pub fn reentrant(client: &LockClient, url: &str, iterations: usize) -> (Summary, f64) {
    let mut admin = plain_connection(url);
    let lock = client.lock(format!("bench:reentrant:{}", uuid::Uuid::new_v4()));
    let outer = lock.lock().expect("outer");
    let before = command_calls(&mut admin, "evalsha");
    let summary = time_each(100, iterations, || {
        drop(lock.lock().expect("reentrant"));
    });
    let calls = command_calls(&mut admin, "evalsha").saturating_sub(before);
    drop(outer);
    (summary, calls as f64 / (iterations + 100) as f64)
}

/// Scenario 4: T threads on T names: lock+unlock pairs per second, the same pair's commands
/// replayed on T plain connections, and a trivial EVALSHA on T plain connections, run in
/// `turns` turns of `run_for` each (the three one after the other in every turn): one
/// `Throughput` per turn of each, in that order.
pub fn throughput(
    url: &str,
    server_pid: Option<u32>,
    threads: usize,
    turns: usize,
    run_for: Duration,
) -> [Vec<Throughput>; 3] {
    let backend = RedisBackend::builder(url)
        .pool_size(threads as u32)
        .build()
        .expect("backend");
    let client = LockClient::new(backend);
    let replay = ReplayedPair::capture(&client, address_of(url).as_str())
        .map_err(|error| eprintln!("could not capture the pair's commands: {error}"))
        .ok();
    let mut found: [Vec<Throughput>; 3] = Default::default();
    for _ in 0..turns {
        found[0].push(Throughput::measure(server_pid, || {
            ops_per_second(threads, run_for, |_| {
                let lock = client.lock(format!("bench:tp:{}", uuid::Uuid::new_v4()));
                move || lock.lock().expect("lock").unlock().expect("unlock")
            })
        }));
        found[1].push(replay.as_ref().map_or(Throughput::NONE, |pair| {
            Throughput::measure(server_pid, || {
                ops_per_second(threads, run_for, |slot| {
                    pair.replayer(plain_connection(url), slot)
                })
            })
        }));
        found[2].push(Throughput::measure(server_pid, || {
            ops_per_second(threads, run_for, |_| {
                let mut con = plain_connection(url);
                let script = redis::Script::new(TRIVIAL_SCRIPT);
                move || {
                    let _: i64 = script.invoke(&mut con).expect("EVALSHA");
                }
            })
        }));
    }
    found
}

/// `host:port` of a `redis://host:port/` URL.
fn address_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// Operations per second, and the CPU time the server and this process spent per operation.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    pub per_second: f64,
    pub server_cpu_us: f64,
    pub client_cpu_us: f64,
}

impl Throughput {
    const NONE: Throughput = Throughput {
        per_second: f64::NAN,
        server_cpu_us: f64::NAN,
        client_cpu_us: f64::NAN,
    };

    fn measure(server_pid: Option<u32>, run: impl FnOnce() -> f64) -> Throughput {
        let server = || server_pid.map_or(f64::NAN, cpu_seconds_of);
        let (server_before, client_before) = (server(), cpu_seconds_of(std::process::id()));
        let started = Instant::now();
        let per_second = run();
        let operations = per_second * started.elapsed().as_secs_f64();
        let (server_after, client_after) = (server(), cpu_seconds_of(std::process::id()));
        Throughput {
            per_second,
            server_cpu_us: (server_after - server_before) * 1e6 / operations,
            client_cpu_us: (client_after - client_before) * 1e6 / operations,
        }
    }
}

/// User and system CPU time of process `pid` so far, in seconds (from `/proc/<pid>/stat`).
fn cpu_seconds_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |index: usize| fields.get(index).and_then(|f| f.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / clock_ticks_per_second(),
        _ => f64::NAN,
    }
}

fn clock_ticks_per_second() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

/// What the watchdog costs with many holds.
#[derive(Debug, Default)]
pub struct WatchdogCost {
    pub holds: usize,
    pub ticks: u64,
    pub backend_calls_per_tick: f64,
    pub evalsha_per_tick: f64,
    pub cpu_per_tick: Duration,
    pub lost: u64,
}

/// Scenario 6: `holds` locks held by one client through several watchdog ticks.
pub fn watchdog(url: &str, holds: usize) -> WatchdogCost {
    let lease = Duration::from_millis(1500); // a tick every 500 ms
    let client = LockClientBuilder::new(std::sync::Arc::new(
        RedisBackend::builder(url)
            .pool_size(8)
            .build()
            .expect("backend"),
    ))
    .watchdog_lease(lease)
    .build()
    .expect("client");
    let prefix = uuid::Uuid::new_v4();
    thread::scope(|s| {
        for t in 0..4 {
            let client = &client;
            s.spawn(move || {
                for i in (t..holds).step_by(4) {
                    client
                        .lock(format!("bench:wd:{prefix}:{i}"))
                        .lock()
                        .expect("lock")
                        .leak();
                }
            });
        }
    });
    let mut admin = plain_connection(url);
    // Start measuring just after a tick, and stop just after another.
    let wait_tick = |from: u64| {
        let deadline = Instant::now() + lease * 2;
        while client.watchdog_stats().ticks == from && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(2));
        }
    };
    wait_tick(client.watchdog_stats().ticks);
    thread::sleep(Duration::from_millis(100));
    let start = client.watchdog_stats();
    let evalsha_before = command_calls(&mut admin, "evalsha");
    let cpu_before = watchdog_cpu();
    let mut ticks_seen = start.ticks;
    for _ in 0..4 {
        wait_tick(ticks_seen);
        ticks_seen = client.watchdog_stats().ticks;
    }
    thread::sleep(Duration::from_millis(100));
    let end = client.watchdog_stats();
    let ticks = end.ticks - start.ticks;
    let per_tick = |n: f64| n / ticks.max(1) as f64;
    let cost = WatchdogCost {
        holds,
        ticks,
        backend_calls_per_tick: per_tick((end.batches - start.batches) as f64),
        evalsha_per_tick: per_tick(
            command_calls(&mut admin, "evalsha").saturating_sub(evalsha_before) as f64,
        ),
        cpu_per_tick: Duration::from_nanos(
            per_tick(watchdog_cpu().saturating_sub(cpu_before) as f64) as u64,
        ),
        lost: end.lost,
    };
    let _: Result<(), _> = redis::cmd("FLUSHALL").query(&mut admin);
    cost
}

/// CPU time (ns) used so far by this process's `dlock-watchdog` threads (Linux schedstat).
fn watchdog_cpu() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim() == "dlock-watchdog")
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
