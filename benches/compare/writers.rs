//! Writers among continuous readers, and writers among one another, on every backend. Readers
//! that come and go without a pause must not keep a writer out (writer preference), nor may
//! writers keep one another out (writers in turn). Each row is one backend's run; the figure
//! that matters is the longest write wait against the hold.
//!
//! A writer that asks again as soon as it lets go waits, at the least, for the readers that
//! waited behind its hold: its release and the store's message to them, a reader's claim, the
//! read hold, that reader's release, the message back and the writer's claim. So each row is
//! set against that floor, built from the store's own figures sampled around the row: the hold
//! plus twice (the write lock's uncontended pair + the store's message between processes).

use std::time::Duration;

use dlocks::{LockClient, MemoryBackend};

use crate::family::{read_write_mix_on, MixOutcome};
use crate::report::Report;
use crate::stats::{time_each, us};

/// A mix of readers and writers on one lock, each its own client, holding `hold` each time.
struct Mix {
    heading: &'static str,
    readers: usize,
    writers: usize,
    hold: Duration,
}

impl Mix {
    /// Whether the mix has a floor of its own: one writer among readers. A mix of several
    /// writers has none, their turns depending on one another.
    fn has_floor(&self) -> bool {
        self.writers == 1 && self.readers > 0
    }
}

/// 8c: one writer among six continuous readers, 2 ms holds.
const AMONG_READERS: Mix = Mix {
    heading: "8c. A writer among continuous readers (6 readers and 1 writer, each its own \
              client, 2 ms holds, no pause between), per backend",
    readers: 6,
    writers: 1,
    hold: Duration::from_millis(2),
};

/// 8c': the same with 10 ms holds, where the store's two hand-offs are small beside a hold: the
/// longest write wait against the hold then reads the writer's turn rather than the store's
/// round trips.
const AMONG_READERS_LONG_HOLDS: Mix = Mix {
    heading: "8c'. A writer among continuous readers, 10 ms holds (6 readers and 1 writer, \
              each its own client, no pause between), per backend",
    readers: 6,
    writers: 1,
    hold: Duration::from_millis(10),
};

/// 8d: seven writers and a reader, 200 µs holds.
const AMONG_WRITERS: Mix = Mix {
    heading: "8d. Writers among writers (7 writers and 1 reader, each its own client, 200 µs \
              holds, no pause between), per backend",
    readers: 1,
    writers: 7,
    hold: Duration::from_micros(200),
};

/// The mixes, in the order they run and are reported.
const MIXES: [Mix; 3] = [AMONG_READERS, AMONG_READERS_LONG_HOLDS, AMONG_WRITERS];

/// Messages sampled for a message floor, and pairs for the write lock's pair.
const FLOOR_SAMPLES: usize = 200;

/// What a store's hand-off cannot go below, sampled around a backend's row (in µs).
#[derive(Debug, Clone, Copy)]
struct Floor {
    /// The write lock's uncontended `lock()` + `unlock()`: a release's and a claim's round trip.
    pair_us: f64,
    /// The store's message between processes (none for the in-process store).
    message_us: f64,
}

impl Floor {
    fn mean(self, other: Floor) -> Floor {
        Floor {
            pair_us: (self.pair_us + other.pair_us) / 2.0,
            message_us: (self.message_us + other.message_us) / 2.0,
        }
    }

    /// The least the one writer of `mix`, asking again at once, waits among its readers, in
    /// µs.
    fn of_write_wait(self, mix: &Mix) -> f64 {
        mix.hold.as_secs_f64() * 1e6 + 2.0 * (self.pair_us + self.message_us)
    }
}

/// A mix's outcome, and the floor sampled around it (for a mix that has one).
type Measured = (MixOutcome, Option<Floor>);

/// The write lock's uncontended pair on a client of its own, p50 in µs.
fn write_pair_us(client: &LockClient) -> f64 {
    let rw = client.read_write_lock(format!("bench:rw-pair:{}", uuid::Uuid::new_v4()));
    let write = rw.write_lock();
    time_each(FLOOR_SAMPLES / 10, FLOOR_SAMPLES, || {
        if let Ok(guard) = write.lock() {
            let _ = guard.unlock();
        }
    })
    .p50_us
}

pub fn section(report: &mut Report, redis_url: &str, secs: &dyn Fn(f64) -> Duration) {
    let run = secs(3.0);
    let memory = MemoryBackend::new();
    let mut outcomes: Vec<(&str, Vec<Measured>)> = Vec::new();
    // Each backend runs every mix, on clients that `connect` makes, with the floor sampled
    // before and after each (the two averaged: the loopback round trip moves within minutes).
    let mut measure = |backend: &'static str,
                       connect: &(dyn Fn() -> Option<LockClient> + Sync),
                       message_floor: &dyn Fn() -> f64| {
        let floor = |mix: &Mix| {
            mix.has_floor().then(|| Floor {
                pair_us: connect().map_or(0.0, |client| write_pair_us(&client)),
                message_us: message_floor(),
            })
        };
        let run_mix = |mix: &Mix| {
            let before = floor(mix);
            let outcome = read_write_mix_on(connect, mix.readers, mix.writers, mix.hold, run);
            (outcome, before.zip(floor(mix)).map(|(b, a)| b.mean(a)))
        };
        outcomes.push((backend, MIXES.iter().map(run_mix).collect()));
    };
    measure("memory", &|| Some(LockClient::new(memory.clone())), &|| 0.0);
    measure(
        "Redis",
        &|| {
            dlocks::redis::RedisBackend::connect(redis_url)
                .ok()
                .map(LockClient::new)
        },
        &|| crate::pubsub_floor::measure(redis_url, FLOOR_SAMPLES).p50_us,
    );
    #[cfg(feature = "postgres")]
    {
        let server = crate::support::postgres_server::PostgresServer::start();
        let url = server.url();
        measure(
            "PostgreSQL",
            &|| server.backend_builder().build().ok().map(LockClient::new),
            &|| crate::notify_floor::measure(&url, FLOOR_SAMPLES).p50_us,
        );
    }
    #[cfg(feature = "etcd")]
    {
        let cluster = crate::support::etcd_server::EtcdCluster::single();
        let url = format!("http://127.0.0.1:{}", cluster.members()[0].client_port);
        measure(
            "etcd",
            &|| cluster.backend_builder().build().ok().map(LockClient::new),
            &|| crate::watch_floor::measure(&url, FLOOR_SAMPLES).p50_us,
        );
    }
    for (at, mix) in MIXES.iter().enumerate() {
        report.heading(
            mix.heading,
            &[
                "backend",
                "reads/s",
                "writes/s",
                "write wait p50",
                "write wait p99",
                "longest write wait",
                "longest write wait / hold",
                "floor: hold + 2 × (write pair + message)",
                "write wait p50 / floor",
                "longest write wait / floor",
            ],
        );
        for (backend, outcome) in &outcomes {
            let (outcome, floor) = &outcome[at];
            let floor = floor.map(|floor| floor.of_write_wait(mix));
            report.row(&[
                (*backend).into(),
                format!("{:.0}", outcome.reads_per_s),
                format!("{:.0}", outcome.writes_per_s),
                us(outcome.write_wait.p50_us),
                us(outcome.write_wait.p99_us),
                us(outcome.longest_write_wait_us),
                format!(
                    "{:.1}",
                    outcome.longest_write_wait_us / (mix.hold.as_secs_f64() * 1e6)
                ),
                floor.map_or("-".into(), us),
                floor.map_or("-".into(), |f| {
                    format!("{:.2}", outcome.write_wait.p50_us / f)
                }),
                floor.map_or("-".into(), |f| {
                    format!("{:.2}", outcome.longest_write_wait_us / f)
                }),
            ]);
        }
    }
}
