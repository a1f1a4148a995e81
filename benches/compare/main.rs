//! `cargo bench -p dlock-bench --bench compare`: dlock against the Redis round trip and against its peers, in
//! one run on one `redis-server` that this program starts and stops.
//!
//! Flags: `--quick` (shorter runs), `--no-peers` (dlock only), `--publish` (also write the table
//! and chart into `docs/`). Every figure printed is measured in this run; ratios compare figures
//! of the same run, so machine noise largely cancels.

use dlock_test_support as support;

#[cfg(feature = "async")]
mod async_surface;
mod cluster;
#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "etcd")]
mod etcd_gateway;
#[cfg(feature = "etcd")]
mod etcd_mutex;
mod family;
mod handoff;
mod memory_scenarios;
mod metrics_cost;
mod notify_floor;
mod peers;
mod placement;
mod postgres;
mod pubsub_floor;
mod quorum;
mod redis_scenarios;
mod replayed_pair;
mod report;
mod safety;
mod stats;
mod synchronizers;
#[cfg(feature = "etcd")]
mod watch_floor;
mod writers;

use std::path::PathBuf;
use std::time::Duration;

use dlocks::redis::RedisBackend;
use dlocks::LockClient;

use handoff::{Outcome, Plan};
use peers::PeerTurns;
use report::{Bars, Report};
use stats::us;
use support::postgres_server::PostgresServer;
use support::redis_server::RedisServer;

struct Options {
    quick: bool,
    peers: bool,
    publish: bool,
    /// Run only this section (and the round trip): `core`, `placement`, `family` (`writers`:
    /// its 8c, 8c' and 8d alone), `quorum`,
    /// `safety`, `cluster`, `synchronizers`, `postgres`, `async`, `etcd` (with the `etcd`
    /// feature), or `throughput` (section 4 alone).
    only: Option<String>,
}

impl Options {
    fn runs(&self, section: &str) -> bool {
        self.only.as_deref().is_none_or(|only| only == section)
    }
}

fn main() {
    if let Ok(spec) = std::env::var(handoff::WORKER_ENV) {
        handoff::worker_process(&spec);
        return;
    }
    if let Ok(spec) = std::env::var(pubsub_floor::FLOOR_ENV) {
        pubsub_floor::subscriber_process(&spec);
        return;
    }
    if let Ok(spec) = std::env::var(notify_floor::FLOOR_ENV) {
        notify_floor::listener_process(&spec);
        return;
    }
    #[cfg(feature = "etcd")]
    if let Ok(spec) = std::env::var(watch_floor::FLOOR_ENV) {
        watch_floor::watcher_process(&spec);
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|at| args.get(at + 1).cloned());
    let options = Options {
        quick: has("--quick"),
        peers: !has("--no-peers"),
        publish: has("--publish") && only.is_none(),
        only,
    };
    run(&options);
}

fn run(options: &Options) {
    let scale = if options.quick { 0.3 } else { 1.0 };
    let secs = |s: f64| Duration::from_secs_f64(s * scale);
    let samples = (5000.0 * scale) as usize;

    let server = RedisServer::start();
    let url = server.url();
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query::<String>(&mut redis_scenarios::plain_connection(&url))
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        })
        .unwrap_or_default();
    let mut report = Report::default();
    report.note(&format!(
        "dlock benchmark: Redis {version} on 127.0.0.1:{}, {} CPUs, {}",
        server.port(),
        std::thread::available_parallelism().map_or(0, usize::from),
        if options.quick {
            "quick run"
        } else {
            "full run"
        }
    ));

    // 1. The round trip.
    let (ping, evalsha) = redis_scenarios::round_trips(&url, samples);
    let rtt = ping.p50_us;
    report.heading(
        "1. Round trip (one thread, one connection)",
        &["call", "p50", "p99"],
    );
    report.row(&["PING".into(), us(ping.p50_us), us(ping.p99_us)]);
    report.row(&[
        "EVALSHA `return 1`".into(),
        us(evalsha.p50_us),
        us(evalsha.p99_us),
    ]);
    let (publish, wakeup) = redis_scenarios::publish_wakeup(&url, samples / 10);
    report.row(&[
        "PUBLISH after 1 ms idle".into(),
        us(publish.p50_us),
        us(publish.p99_us),
    ]);
    report.row(&[
        "PUBLISH after 1 ms idle → a thread blocked on a subscribed connection has it".into(),
        us(wakeup.p50_us),
        us(wakeup.p99_us),
    ]);

    let client = LockClient::new(RedisBackend::connect(&url).expect("backend"));
    let mut dlock_bars = Vec::new();
    if options.runs("core") {
        core_sections(
            &mut report,
            &url,
            &client,
            rtt,
            options,
            samples,
            &secs,
            &mut dlock_bars,
            server.pid(),
        );
    }
    if options.only.as_deref() == Some("throughput") {
        throughput_section(&mut report, &url, server.pid(), &secs);
    }
    if options.only.as_deref() == Some("handoff") {
        handoff_section(&mut report, &url, &client, rtt, &secs, &mut dlock_bars);
    }

    if options.runs("core") || options.runs("placement") {
        let blocks = if options.quick { 4 } else { 10 };
        placement::section(
            &mut report,
            &client,
            &url,
            server.pid(),
            blocks,
            samples / 10,
        );
    }

    if options.runs("core") || options.runs("metrics") {
        let blocks = if options.quick { 4 } else { 10 };
        metrics_cost::section(&mut report, &client, &url, blocks, samples / 10);
    }

    // 8. The lock family across processes, each run against the pub/sub floor measured just
    // before it, and 9. RedLock and MultiLock against round trips sampled with them.
    if options.runs("family") {
        family_section(&mut report, &url, options, &secs);
    }
    if options.runs("family") || options.runs("writers") {
        writers::section(&mut report, &url, &secs);
    }
    if options.runs("quorum") {
        quorum_section(&mut report, &client, &url, options, samples, &secs);
    }
    if options.runs("safety") {
        safety_section(&mut report, &client, &url, samples);
    }
    if options.runs("cluster") {
        cluster::section(&mut report, samples, &secs);
    }
    if options.runs("synchronizers") {
        synchronizers_section(&mut report, &client, &url, samples, server.pid());
    }
    if options.runs("postgres") {
        postgres::section(&mut report, samples, &secs);
    }
    if options.runs("async") {
        #[cfg(feature = "async")]
        async_surface::section(&mut report, &url, samples, &secs);
        #[cfg(not(feature = "async"))]
        report.note(
            "\n11. The async surface: not measured (built without the `async` feature; \
             `cargo bench -p dlock-bench --features async --bench compare -- --only async`).",
        );
    }
    #[cfg(feature = "etcd")]
    if options.runs("etcd") {
        etcd::section(&mut report, samples);
    }

    // Peers.
    let mut bars = vec![Bars {
        library: "dlock".into(),
        p50_us: dlock_bars,
    }];
    if options.peers && options.runs("core") {
        peer_section(
            &mut report,
            &client,
            (&url, server.pid()),
            rtt,
            options,
            &mut bars,
        );
    }

    // How much the round trip moved while the sections ran: a run whose end differs much from
    // its start compares figures taken on different machines, in effect.
    let (ping_end, _) = redis_scenarios::round_trips(&url, samples / 5);
    report.note(&format!(
        "The round trip moved during this run: PING p50 {} at the start, {} at the end ({:.2} ×). \
         Ratios in a table whose rows were sampled alternately are not affected; single figures \
         compared across sections are.",
        us(rtt),
        us(ping_end.p50_us),
        ping_end.p50_us / rtt
    ));

    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/dlock-bench");
    let _ = std::fs::create_dir_all(&out);
    let _ = std::fs::write(out.join("report.md"), report.markdown());
    let chart = out.join("handoff.svg");
    if let Err(error) = report::chart(&chart, &bars, rtt) {
        eprintln!("could not draw the chart: {error}");
    }
    println!(
        "\nwritten: {} and {}",
        out.join("report.md").display(),
        chart.display()
    );
    if options.publish {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs");
        let _ = std::fs::write(docs.join("benchmark-results.md"), report.markdown());
        let _ = std::fs::copy(&chart, docs.join("handoff.svg"));
        println!("published into docs/benchmark-results.md and docs/handoff.svg");
    }
}

fn peer_section(
    report: &mut Report,
    client: &LockClient,
    (url, server_pid): (&str, Option<u32>),
    rtt: f64,
    options: &Options,
    bars: &mut Vec<Bars>,
) {
    if let Err(error) = peers::setup() {
        report.note(&format!("\nPeers not run: {error}"));
        return;
    }
    let run_ms = if options.quick { 1500 } else { 3000 };
    let all = peers::all();
    // The pairs in turns: PING, dlock's pair, then each peer's, block after block, so that
    // every block's ratio compares figures taken within seconds of each other.
    let (blocks, per_block) = if options.quick { (4, 300) } else { (8, 500) };
    let mut con = redis_scenarios::plain_connection(url);
    let lock = client.lock(format!("bench:peers:{}", uuid::Uuid::new_v4()));
    let mut ping = || {
        stats::time_each(50, per_block, || {
            let _: String = redis::cmd("PING").query(&mut con).expect("PING");
        })
        .p50_us
    };
    let mut dlock_pair = || {
        stats::time_each(50, per_block, || {
            lock.lock().expect("lock").unlock().expect("unlock")
        })
        .p50_us
    };
    let PeerTurns {
        turns,
        pinned,
        libraries,
    } = peers::pairs_in_turns(
        &all,
        url,
        (blocks, per_block),
        server_pid,
        vec![&mut ping, &mut dlock_pair],
    );
    let placement = if pinned {
        "client (this thread, and the peers' processes) on one CPU, the server on the other"
    } else {
        "not pinned: the CPU affinity could not be set; the placements may differ"
    };
    let dlock_pair_us = turns.summary(1).p50_us;
    let results: Vec<_> = all
        .iter()
        .map(|peer| peer.measure(url, 0, &[2, 8], run_ms))
        .collect();
    report.heading(
        "Peers, same server, same run (default settings; forced hand-off with 1 ms hold)",
        &[
            "library",
            "pair p50 (median of blocks)",
            "pair / dlock pair: median of blocks (low–high)",
            "hand-off p50, 2 workers",
            "hand-off p50, 8 workers",
            "dlock faster at 2 / 8 workers",
            "acquisitions per worker at 8",
        ],
    );
    let dlock_p50 = |w: usize| {
        bars[0]
            .p50_us
            .iter()
            .find(|(n, _)| *n == w)
            .map_or(f64::NAN, |(_, v)| *v)
    };
    let (d2, d8) = (dlock_p50(2), dlock_p50(8));
    report.row(&[
        "dlock (`lock()` + `unlock()`)".into(),
        us(dlock_pair_us),
        "1.00".into(),
        format!("{} ({:.1} RTT)", us(d2), d2 / rtt),
        format!("{} ({:.1} RTT)", us(d8), d8 / rtt),
        "-".into(),
        "see 5.".into(),
    ]);
    for (op, (mut result, library)) in results.into_iter().zip(libraries).enumerate() {
        let op = op + 2;
        match library {
            Ok(name) => result.library = name,
            Err(error) => result.note = result.note.or(Some(error)),
        }
        let pair = turns.summary(op).p50_us;
        let at = |w: usize| {
            result
                .handoff
                .iter()
                .find(|(n, _)| *n == w)
                .map(|(_, o)| o.clone())
        };
        let (h2, h8) = (at(2), at(8));
        let p50 = |o: &Option<Outcome>| o.as_ref().map_or(f64::NAN, |o| o.latency.p50_us);
        report.row(&[
            result.library.clone(),
            us(pair),
            turns.ratio(op, 1).to_string(),
            h2.as_ref().map_or("-".into(), |o| us(o.latency.p50_us)),
            h8.as_ref().map_or("-".into(), |o| us(o.latency.p50_us)),
            format!("{:.1}× / {:.1}×", p50(&h2) / d2, p50(&h8) / d8),
            h8.as_ref().map_or("-".into(), |o| {
                format!("{}-{}", o.per_worker_min, o.per_worker_max)
            }),
        ]);
        if let Some(note) = &result.note {
            report.note(&format!("  note ({}): {note}", result.library));
        }
        bars.push(Bars {
            library: result.library,
            p50_us: result
                .handoff
                .iter()
                .map(|(w, o)| (*w, o.latency.p50_us))
                .collect(),
        });
    }
    report.note(&format!(
        "Pairs sampled in {blocks} turns of {per_block} pairs (PING, dlock, each peer), {placement}; \
         PING's block medians ranged {} to {} ({:.2} ×) during the turns.",
        us(turns.low(0)),
        us(turns.high(0)),
        turns.drift(0)
    ));
}

/// Section 8a's PostgreSQL queues at 8 processes against `NOTIFY`'s floor among 8 listening
/// sessions, one per process, as the hand-offs have it: PostgreSQL signals every listening
/// session of the database at each notifying commit, so the floor of a message between
/// processes grows with the processes that listen. Both floors sampled around each run.
fn postgres_among_listeners(
    report: &mut Report,
    url: &str,
    messages: usize,
    secs: &dyn Fn(f64) -> Duration,
) {
    const PROCESSES: usize = 8;
    report.heading(
        "8a'. PostgreSQL, 8 processes: the queues' hand-off against NOTIFY's floor with one \
         listening session and with eight (one per process, as the hand-offs run)",
        &[
            "lock",
            "hand-off p50",
            "uncontended pair p50",
            "floor, 1 session",
            "floor, 8 sessions",
            "hand-off / (pair + floor, 1 session)",
            "hand-off / (pair + floor, 8 sessions)",
        ],
    );
    for (label, kind) in [
        ("plain, queued", handoff::Kind::QueuedPlain),
        ("fair", handoff::Kind::Fair),
    ] {
        let floors = || {
            (
                family::uncontended_pair(url, kind, messages).p50_us,
                notify_floor::measure(url, messages).p50_us,
                notify_floor::measure_among(url, messages, PROCESSES).p50_us,
            )
        };
        let before = floors();
        let outcome = family::processes(url, kind, PROCESSES, secs(3.0));
        let after = floors();
        let (pair, alone, among) = (
            (before.0 + after.0) / 2.0,
            (before.1 + after.1) / 2.0,
            (before.2 + after.2) / 2.0,
        );
        let hand_off = outcome.latency.p50_us;
        report.row(&[
            label.into(),
            us(hand_off),
            us(pair),
            us(alone),
            us(among),
            format!("{:.2}", hand_off / (pair + alone)),
            format!("{:.2}", hand_off / (pair + among)),
        ]);
    }
}

/// Section 8: the fair lock against the plain one across processes, the long fairness run,
/// and read-write mixes.
fn family_section(
    report: &mut Report,
    url: &str,
    options: &Options,
    secs: &dyn Fn(f64) -> Duration,
) {
    report.heading(
        "8a. Plain, queued plain and fair lock, forced hand-off (1 ms hold) across processes, \
         on Redis, on PostgreSQL and (with the `etcd` feature) on etcd, against the store's \
         message floor between processes (a Redis PUBLISH, a PostgreSQL NOTIFY, an etcd put \
         seen by a watch, reaching a thread waiting in another process) and \
         against the whole floor (that, plus the release's and the claim's round trips: the \
         kind's uncontended pair), both measured just before and just after each run (the \
         mean of the two)",
        &[
            "store",
            "lock",
            "processes",
            "run",
            "hand-off p50",
            "message floor p50",
            "hand-off / message floor",
            "uncontended pair p50",
            "hand-off / (pair + message floor)",
            "p99",
            "longest wait",
            "longest wait, all contending",
            "acquisitions per process (min-max)",
            "spread (max/min - 1)",
        ],
    );
    let floor_messages = if options.quick { 200 } else { 500 };
    // PostgreSQL's own server.
    let postgres = PostgresServer::start();
    let postgres_url = postgres.url();
    type MessageFloor = fn(&str, usize) -> stats::Summary;
    #[allow(unused_mut)]
    let mut stores: Vec<(&str, String, MessageFloor)> = vec![
        ("Redis", url.to_owned(), pubsub_floor::measure),
        ("PostgreSQL", postgres_url.clone(), notify_floor::measure),
    ];
    // etcd's own member; the workers note who holds in a key of their own.
    #[cfg(feature = "etcd")]
    let etcd = support::etcd_server::EtcdCluster::single();
    #[cfg(feature = "etcd")]
    stores.push((
        "etcd",
        format!("http://127.0.0.1:{}", etcd.members()[0].client_port),
        watch_floor::measure,
    ));
    for (store, url, message_floor) in &stores {
        let (store, url) = (*store, url.as_str());
        // The message's floor, and the kind's release and claim (its uncontended pair).
        let floor = |kind| {
            (
                message_floor(url, floor_messages).p50_us,
                family::uncontended_pair(url, kind, floor_messages).p50_us,
            )
        };
        // Sampled before and after the run, and the two averaged: the loopback round trip
        // moves within minutes.
        let around = |kind, run: &dyn Fn() -> Outcome| {
            let before = floor(kind);
            let outcome = run();
            let after = floor(kind);
            (
                outcome,
                ((before.0 + after.0) / 2.0, (before.1 + after.1) / 2.0),
            )
        };
        let row = |report: &mut Report,
                   lock: &str,
                   workers: usize,
                   run: Duration,
                   o: &Outcome,
                   (floor, pair): (f64, f64)| {
            let spread = o.per_worker_max as f64 / o.per_worker_min.max(1) as f64 - 1.0;
            report.row(&[
                store.into(),
                lock.into(),
                workers.to_string(),
                format!("{:.0} s", run.as_secs_f64()),
                us(o.latency.p50_us),
                us(floor),
                format!("{:.2}", o.latency.p50_us / floor),
                us(pair),
                format!("{:.2}", o.latency.p50_us / (pair + floor)),
                us(o.latency.p99_us),
                us(o.longest_wait_us),
                us(o.contending_longest_wait_us),
                format!("{}-{}", o.per_worker_min, o.per_worker_max),
                format!("{:.1} %", spread * 100.0),
            ]);
        };
        for workers in [2, 8] {
            for (label, kind) in [
                ("plain", handoff::Kind::Plain),
                ("plain, queued", handoff::Kind::QueuedPlain),
                ("fair", handoff::Kind::Fair),
            ] {
                let run = secs(3.0);
                let (outcome, floor) = around(kind, &|| family::processes(url, kind, workers, run));
                row(report, label, workers, run, &outcome, floor);
            }
        }
        if store != "Redis" {
            continue;
        }
        // The long run: 8 processes, one thread each, forcing owner changes.
        let long = if options.quick {
            Duration::from_secs(8)
        } else {
            Duration::from_secs(30)
        };
        let fair = handoff::Kind::Fair;
        let (outcome, long_floor) = around(fair, &|| family::processes(url, fair, 8, long));
        row(report, "fair", 8, long, &outcome, long_floor);
    }
    postgres_among_listeners(report, &postgres_url, floor_messages, secs);
    drop(postgres);

    report.heading(
        "8b. Read-write lock mixes (each worker its own client, 200 µs holds, no pause between)",
        &[
            "mix",
            "reads/s",
            "writes/s",
            "read wait p50",
            "read wait p99",
            "write wait p50",
            "write wait p99",
            "longest write wait",
        ],
    );
    for (label, readers, writers) in [
        ("read-heavy: 7 readers, 1 writer", 7, 1),
        ("write-heavy: 1 reader, 7 writers", 1, 7),
    ] {
        let mix =
            family::read_write_mix(url, readers, writers, Duration::from_micros(200), secs(3.0));
        report.row(&[
            label.into(),
            format!("{:.0}", mix.reads_per_s),
            format!("{:.0}", mix.writes_per_s),
            us(mix.read_wait.p50_us),
            us(mix.read_wait.p99_us),
            us(mix.write_wait.p50_us),
            us(mix.write_wait.p99_us),
            us(mix.longest_write_wait_us),
        ]);
    }
}

/// Section 9: RedLock on 3 and 5 local servers beside rslock and node-redlock on the same
/// servers, and MultiLock of 2 and 10 members on one server, as ratios to one round trip.
fn quorum_section(
    report: &mut Report,
    client: &LockClient,
    main_url: &str,
    options: &Options,
    samples: usize,
    secs: &dyn Fn(f64) -> Duration,
) {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    report.heading(
        "9a. RedLock on N local servers: its pair against PING and a plain lock pair on each \
         server, sampled alternately; ratios are medians of blocks (low–high)",
        &[
            "library",
            "servers",
            "PING p50",
            "1-server pair p50",
            "pair p50",
            "pair / 1-server pair",
            "pair / slowest node's 1-server pair",
            "pair / (2 × raw fan-out of EVALSHA)",
            "forced hand-off p50, 2 workers",
            "in RTTs",
        ],
    );
    let pairs = samples / 5;
    let single = LockClient::new(servers[0].backend());
    for n in [3usize, 5] {
        let nodes = &servers[..n];
        let red = quorum::red_lock_client(nodes);
        let sampled = quorum::red_lock_pair(&red, nodes, pairs);
        let [ping, pair, fan_out, one] = sampled.summaries();
        let rtt = ping.p50_us;
        let handoff = quorum::handoff(&red, 2, secs(2.0));
        report.row(&[
            "dlock RedLockBackend".into(),
            n.to_string(),
            us(rtt),
            us(one.p50_us),
            us(pair.p50_us),
            sampled.ratio(1, 3).to_string(),
            sampled.ratio_to_slowest(1, 3..3 + n).to_string(),
            format!(
                "{} (fan-out {})",
                sampled.ratio(1, 2).over(2.0),
                us(fan_out.p50_us)
            ),
            us(handoff.latency.p50_us),
            format!("{:.1}", handoff.latency.p50_us / rtt),
        ]);
        if options.peers && peers::setup().is_ok() {
            let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
            let urls = urls.join(",");
            let run_ms = if options.quick { 1500 } else { 3000 };
            let quorum_peers: Vec<_> = peers::all()
                .into_iter()
                .filter(|peer| matches!(peer.label, "rslock" | "node redlock"))
                .collect();
            // In turns: one server's pair, dlock's RedLock pair, then each peer's, block
            // after block.
            let (blocks, per_block) = if options.quick { (4, 200) } else { (8, 400) };
            let block = |lock: &dlocks::Lock| {
                stats::time_each(20, per_block, || {
                    lock.lock().expect("lock").unlock().expect("unlock")
                })
                .p50_us
            };
            let (one_lock, red_lock) = (
                single.lock(format!("bench:one:{}", uuid::Uuid::new_v4())),
                red.lock(format!("bench:red:{}", uuid::Uuid::new_v4())),
            );
            let mut one_pair = || block(&one_lock);
            let mut red_pair = || block(&red_lock);
            let PeerTurns { turns, pinned, .. } = peers::pairs_in_turns(
                &quorum_peers,
                &urls,
                (blocks, per_block),
                None,
                vec![&mut one_pair, &mut red_pair],
            );
            let label = if pinned {
                "dlock RedLockBackend, in turns with the peers (clients on one CPU)"
            } else {
                "dlock RedLockBackend, in turns with the peers (not pinned)"
            };
            report.row(&[
                label.into(),
                n.to_string(),
                "-".into(),
                us(turns.summary(0).p50_us),
                us(turns.summary(1).p50_us),
                turns.ratio(1, 0).to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
            for (op, peer) in quorum_peers.iter().enumerate() {
                let op = op + 2;
                let result = peer.measure(&urls, 0, &[2], run_ms);
                let handoff = result
                    .handoff
                    .first()
                    .map_or(f64::NAN, |(_, o)| o.latency.p50_us);
                report.row(&[
                    format!(
                        "{} (pair / dlock's RedLock pair: {})",
                        result.library,
                        turns.ratio(op, 1)
                    ),
                    n.to_string(),
                    "-".into(),
                    us(turns.summary(0).p50_us),
                    us(turns.summary(op).p50_us),
                    turns.ratio(op, 0).to_string(),
                    "-".into(),
                    "-".into(),
                    us(handoff),
                    format!("{:.1}", handoff / rtt),
                ]);
                if let Some(note) = &result.note {
                    report.note(&format!("  note ({}): {note}", result.library));
                }
            }
        }
    }
    report.heading(
        "9b. MultiLock on one server: lock + unlock of the whole set, against PING and a plain \
         lock pair sampled alternately",
        &[
            "members",
            "PING p50",
            "1-lock pair p50",
            "set pair p50",
            "set pair / 1-lock pair",
            "set pair / (2 × RTT)",
        ],
    );
    for members in [2usize, 10] {
        let sampled = quorum::multi_pair(client, main_url, members, pairs);
        let [ping, one, set] = sampled.summaries();
        report.row(&[
            members.to_string(),
            us(ping.p50_us),
            us(one.p50_us),
            us(set.p50_us),
            sampled.ratio(2, 1).to_string(),
            sampled.ratio(2, 0).over(2.0).to_string(),
        ]);
    }
}

/// 10. What fencing tokens and replica acknowledgement cost.
fn safety_section(report: &mut Report, client: &LockClient, url: &str, samples: usize) {
    let pairs = samples / 5;
    report.heading(
        "10. Safety: a fenced pair and a pair acknowledged by a replica, each against its \
         plain pair and PING, sampled alternately",
        &[
            "pair",
            "PING p50",
            "plain pair p50",
            "pair p50",
            "pair / plain pair",
            "(pair − plain pair) / RTT",
        ],
    );
    let sampled = safety::fenced_pair(client, url, pairs);
    let [ping, plain, fenced] = sampled.summaries();
    report.row(&[
        "fenced lock (token counter)".into(),
        us(ping.p50_us),
        us(plain.p50_us),
        us(fenced.p50_us),
        sampled.ratio(2, 1).to_string(),
        format!("{:.2}", (fenced.p50_us - plain.p50_us) / ping.p50_us),
    ]);
    let sampled = safety::replicated_pair(pairs);
    let [ping, off, on] = sampled.summaries();
    report.row(&[
        "master + 1 replica: WAIT 1 after each step, against replica_sync(false)".into(),
        us(ping.p50_us),
        us(off.p50_us),
        us(on.p50_us),
        sampled.ratio(2, 1).to_string(),
        format!("{:.2}", (on.p50_us - off.p50_us) / ping.p50_us),
    ]);
}

/// Section 12: a permit's pair, and permits and leaderships passed to a waiter.
fn synchronizers_section(
    report: &mut Report,
    client: &LockClient,
    url: &str,
    samples: usize,
    server_pid: Option<u32>,
) {
    report.heading(
        "12. Synchronizers: a permit pair against a lock pair and PING sampled alternately; \
         forced hand-off of a permit and of a leadership (1 ms hold), in round trips: blocks of \
         hand-offs alternated with blocks of PING, client and server pinned to different CPUs, \
         median of per-block ratios (low–high)",
        &["what", "PING p50", "p50", "p99", "in RTTs", "goal"],
    );
    let sampled = synchronizers::permit_pair(client, url, samples / 5);
    let [ping, lock_pair, permit_pair] = sampled.summaries();
    let rtt = ping.p50_us;
    report.row(&[
        "lock() + unlock() (for comparison)".into(),
        us(rtt),
        us(lock_pair.p50_us),
        us(lock_pair.p99_us),
        sampled.ratio(1, 0).to_string(),
        String::new(),
    ]);
    report.row(&[
        "permit acquire() + release()".into(),
        us(rtt),
        us(permit_pair.p50_us),
        us(permit_pair.p99_us),
        sampled.ratio(2, 0).to_string(),
        "≤ 4.4 (2.2 × 2 RTT)".into(),
    ]);
    // The hand-offs and the PINGs they are set against with the client's threads on one CPU
    // and the server on the other (threads started meanwhile inherit the CPU): a hand-off
    // always crosses CPUs, so a PING that shared the server's CPU would be no measure of it.
    let _pinned = placement::Pinned::apart(server_pid);
    let blocks = 5;
    let rounds = ((samples / 25).max(20) / blocks).max(4);
    let name = format!("bench:handoff-semaphore:{}", uuid::Uuid::new_v4());
    let semaphore = client.semaphore(name.clone());
    semaphore.try_set_permits(1).expect("set permits");
    let take = || semaphore.acquire().expect("permit");
    let release = |permit: dlocks::Permit| permit.release().expect("release");
    let threads =
        synchronizers::forced_handoff_in_rtts(url, blocks, rounds, [&take, &take], &release);
    let other = LockClient::new(RedisBackend::connect(url).expect("backend"));
    let theirs = other.semaphore(name);
    let take_theirs = || theirs.acquire().expect("permit");
    let clients =
        synchronizers::forced_handoff_in_rtts(url, blocks, rounds, [&take, &take_theirs], &release);
    // The lock through the same harness, for comparison.
    let lock_name = format!("bench:handoff-lock:{}", uuid::Uuid::new_v4());
    let lock = client.lock(lock_name.clone());
    let their_lock = other.lock(lock_name);
    let take_lock = || lock.lock().expect("lock");
    let take_their_lock = || their_lock.lock().expect("lock");
    let unlock = |guard: dlocks::LockGuard| guard.unlock().expect("unlock");
    let lock_threads = synchronizers::forced_handoff_in_rtts(
        url,
        blocks,
        rounds,
        [&take_lock, &take_lock],
        &unlock,
    );
    let lock_clients = synchronizers::forced_handoff_in_rtts(
        url,
        blocks,
        rounds,
        [&take_lock, &take_their_lock],
        &unlock,
    );
    let election_name = format!("bench:election:{}", uuid::Uuid::new_v4());
    let (a, b) = (
        client.leader_election(election_name.clone()),
        other.leader_election(election_name),
    );
    let lead_a = || a.campaign("a").expect("campaign");
    let lead_b = || b.campaign("b").expect("campaign");
    let resign = |leadership: dlocks::Leadership| leadership.resign().expect("resign");
    let leaders =
        synchronizers::forced_handoff_in_rtts(url, blocks, rounds, [&lead_a, &lead_b], &resign);
    for (what, (found, ping, ratio), goal) in [
        (
            "lock to a waiting thread of the same client (for comparison)",
            lock_threads,
            "",
        ),
        (
            "permit to a waiting thread of the same client (handed over)",
            threads,
            "≤ 3",
        ),
        (
            "lock to a waiting client (for comparison)",
            lock_clients,
            "",
        ),
        (
            "permit to a waiting client (woken by the release message)",
            clients,
            "≤ 3",
        ),
        (
            "leadership to a campaigning client, after resign",
            leaders,
            "≤ 3",
        ),
    ] {
        report.row(&[
            what.into(),
            us(ping),
            us(found.p50_us),
            us(found.p99_us),
            ratio.to_string(),
            goal.into(),
        ]);
    }
}

/// Section 4: throughput on distinct names against a trivial script's, with CPU per operation.
fn throughput_section(
    report: &mut Report,
    url: &str,
    server_pid: Option<u32>,
    secs: &dyn Fn(f64) -> Duration,
) {
    report.heading(
        "4. Throughput: T threads on T names; the same pair's commands replayed on T plain \
         connections (captured with MONITOR); a trivial EVALSHA; CPU time per operation of the \
         server and of this process. Three turns of the three; medians, ratios per turn \
         (low–high)",
        &[
            "T",
            "lock+unlock pairs/s",
            "replayed pairs/s",
            "EVALSHA/s",
            "pairs / replayed",
            "2 × pairs / EVALSHA",
            "server CPU per pair / replayed / EVALSHA",
            "client CPU per pair / replayed / EVALSHA",
        ],
    );
    for threads in [1, 4, 16, 64] {
        let [pairs, replayed, evalsha] =
            redis_scenarios::throughput(url, server_pid, threads, 3, secs(0.6));
        let median = |runs: &[redis_scenarios::Throughput],
                      of: fn(&redis_scenarios::Throughput) -> f64| {
            stats::Ratio::of(runs.iter().map(of).collect()).median
        };
        let rate = |runs: &[redis_scenarios::Throughput]| median(runs, |t| t.per_second);
        let server = |runs: &[redis_scenarios::Throughput]| us(median(runs, |t| t.server_cpu_us));
        let client = |runs: &[redis_scenarios::Throughput]| us(median(runs, |t| t.client_cpu_us));
        let per_turn = |factor: f64, over: &[redis_scenarios::Throughput]| {
            stats::Ratio::of(
                pairs
                    .iter()
                    .zip(over)
                    .map(|(pair, other)| factor * pair.per_second / other.per_second)
                    .collect(),
            )
        };
        report.row(&[
            threads.to_string(),
            format!("{:.0}", rate(&pairs)),
            format!("{:.0}", rate(&replayed)),
            format!("{:.0}", rate(&evalsha)),
            per_turn(1.0, &replayed).to_string(),
            per_turn(2.0, &evalsha).to_string(),
            format!(
                "{} / {} / {}",
                server(&pairs),
                server(&replayed),
                server(&evalsha)
            ),
            format!(
                "{} / {} / {}",
                client(&pairs),
                client(&replayed),
                client(&evalsha)
            ),
        ]);
    }
}

/// Sections 2 to 7: the uncontended pair, throughput, hand-off, the watchdog, the memory
/// backend.
#[allow(clippy::too_many_arguments)]
fn core_sections(
    report: &mut Report,
    url: &str,
    client: &LockClient,
    rtt: f64,
    options: &Options,
    samples: usize,
    secs: &dyn Fn(f64) -> Duration,
    dlock_bars: &mut Vec<(usize, f64)>,
    server_pid: Option<u32>,
) {
    let url = url.to_owned();
    // 2-3. Uncontended pair and reentrancy, against a PING sampled alternately with it.
    let pairs = redis_scenarios::pair_with_ping(client, &url, samples);
    let [ping, watchdog_pair, leased_pair] = pairs.summaries();
    let (reentrant, calls) = redis_scenarios::reentrant(client, &url, samples);
    report.heading(
        "2-3. Uncontended lock + unlock, one thread, sampled alternately with PING",
        &[
            "call",
            "p50",
            "p99",
            "p50 / (2 × PING p50): median of 10 blocks (low–high)",
        ],
    );
    report.row(&[
        "PING (sampled with the pairs)".into(),
        us(ping.p50_us),
        us(ping.p99_us),
        "-".into(),
    ]);
    for (label, op, s) in [
        ("lock() + unlock() (watchdog)", 1, watchdog_pair),
        ("lock_with_lease(10 s) + unlock()", 2, leased_pair),
    ] {
        report.row(&[
            label.into(),
            us(s.p50_us),
            us(s.p99_us),
            pairs.ratio(op, 0).over(2.0).to_string(),
        ]);
    }
    report.row(&[
        format!("reentrant lock() + drop on a held lock: {calls:.2} Redis calls each"),
        us(reentrant.p50_us),
        us(reentrant.p99_us),
        "-".into(),
    ]);

    throughput_section(report, &url, server_pid, secs);

    handoff_section(report, &url, client, rtt, secs, dlock_bars);
    // 6. Watchdog.
    let holds = if options.quick { 2_000 } else { 10_000 };
    let wd = redis_scenarios::watchdog(&url, holds);
    report.heading(
        "6. Watchdog",
        &[
            "holds",
            "ticks measured",
            "backend calls per tick",
            "EVALSHA per tick (pipelined: 1 round trip)",
            "renewal CPU per tick",
            "lost",
        ],
    );
    report.row(&[
        wd.holds.to_string(),
        wd.ticks.to_string(),
        format!("{:.1}", wd.backend_calls_per_tick),
        format!("{:.1}", wd.evalsha_per_tick),
        format!("{:.1?}", wd.cpu_per_tick),
        wd.lost.to_string(),
    ]);

    // 7. Memory backend.
    let (memory_pair, mutex_pair) = memory_scenarios::uncontended(samples * 20);
    let (memory_rate, mutex_rate) = memory_scenarios::contended(8, secs(1.0));
    report.heading(
        "7. Memory backend vs parking_lot::ReentrantMutex",
        &["case", "dlock MemoryBackend", "ReentrantMutex", "ratio"],
    );
    report.row(&[
        "uncontended lock + unlock, p50".into(),
        format!("{:.2} µs", memory_pair.p50_us),
        format!("{:.3} µs", mutex_pair.p50_us),
        format!("{:.0}×", memory_pair.p50_us / mutex_pair.p50_us.max(1e-3)),
    ]);
    report.row(&[
        "8 threads, one lock: pairs/s".into(),
        format!("{memory_rate:.0}"),
        format!("{mutex_rate:.0}"),
        format!("{:.2}", memory_rate / mutex_rate),
    ]);
}

/// Section 5, hand-off on one name: threads of one client and processes, with no hold and
/// with a forced 1 ms hold (`--only handoff` runs it alone).
fn handoff_section(
    report: &mut Report,
    url: &str,
    client: &LockClient,
    rtt: f64,
    secs: &dyn Fn(f64) -> Duration,
    dlock_bars: &mut Vec<(usize, f64)>,
) {
    let in_rtt = |v: f64| format!("{:.1}", v / rtt);
    report.heading(
        "5. Hand-off on one name",
        &[
            "workers",
            "mode",
            "hand-offs/s",
            "latency p50",
            "p50 in RTTs",
            "p99",
            "longest wait",
            "acquisitions per worker (min-max)",
            "re-takes",
        ],
    );
    let handoff_row = |report: &mut Report, label: String, mode: &str, o: &Outcome| {
        report.row(&[
            label,
            mode.into(),
            format!("{:.0}", o.handoffs_per_s),
            us(o.latency.p50_us),
            in_rtt(o.latency.p50_us),
            us(o.latency.p99_us),
            us(o.longest_wait_us),
            format!("{}-{}", o.per_worker_min, o.per_worker_max),
            format!("{:.0} %", o.retake_share * 100.0),
        ]);
    };
    let modes = [
        ("zero hold", Duration::ZERO, false),
        ("forced, 1 ms hold", Duration::from_millis(1), true),
    ];
    for (kind, counts) in [("threads", &[2, 8, 32][..]), ("processes", &[2, 4, 8][..])] {
        for &workers in counts {
            for (mode, hold, forced) in modes {
                let plan = Plan {
                    workers,
                    run_for: secs(2.0),
                    hold,
                    forced,
                    kind: handoff::Kind::Plain,
                };
                let name = format!("bench:handoff:{}", uuid::Uuid::new_v4());
                let outcome = if kind == "threads" {
                    handoff::run_threads(client, &name, plan)
                } else {
                    handoff::run_processes(url, &name, plan)
                };
                handoff_row(report, format!("{workers} {kind}"), mode, &outcome);
                if kind == "threads" && forced && workers <= 8 {
                    dlock_bars.push((workers, outcome.latency.p50_us));
                }
            }
        }
    }
    {
        // The same forced hand-off on the memory backend: the client's own share (thread
        // wake-ups, bookkeeping) without any network.
        let memory = LockClient::new(dlocks::MemoryBackend::new());
        let plan = Plan {
            workers: 2,
            run_for: secs(1.0),
            hold: Duration::from_millis(1),
            forced: true,
            kind: handoff::Kind::Plain,
        };
        let outcome = handoff::run_threads(&memory, "bench:handoff:memory", plan);
        handoff_row(
            report,
            "2 threads, memory backend".into(),
            "forced, 1 ms hold",
            &outcome,
        );
    }
}
