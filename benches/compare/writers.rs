//! Writers among continuous readers, and writers among one another, on every backend. Readers
//! that come and go without a pause must not keep a writer out (writer preference), nor may
//! writers keep one another out (writers in turn). Each row is one backend's run; the figure
//! that matters is the longest write wait against the hold.

use std::time::Duration;

use dlocks::{LockClient, MemoryBackend};

use crate::family::{read_write_mix_on, MixOutcome};
use crate::report::Report;
use crate::stats::us;

/// A mix of readers and writers on one lock, each its own client, holding `hold` each time.
struct Mix {
    heading: &'static str,
    readers: usize,
    writers: usize,
    hold: Duration,
}

/// 8c: one writer among six continuous readers, 2 ms holds.
const AMONG_READERS: Mix = Mix {
    heading: "8c. A writer among continuous readers (6 readers and 1 writer, each its own \
              client, 2 ms holds, no pause between), per backend",
    readers: 6,
    writers: 1,
    hold: Duration::from_millis(2),
};

/// 8d: seven writers and a reader, 200 µs holds.
const AMONG_WRITERS: Mix = Mix {
    heading: "8d. Writers among writers (7 writers and 1 reader, each its own client, 200 µs \
              holds, no pause between), per backend",
    readers: 1,
    writers: 7,
    hold: Duration::from_micros(200),
};

pub fn section(report: &mut Report, redis_url: &str, secs: &dyn Fn(f64) -> Duration) {
    let run = secs(3.0);
    let memory = MemoryBackend::new();
    let mut outcomes: Vec<(&str, [MixOutcome; 2])> = Vec::new();
    // Each backend runs both mixes, on clients that `connect` makes.
    let mut measure = |backend: &'static str, connect: &(dyn Fn() -> Option<LockClient> + Sync)| {
        let run_mix =
            |mix: &Mix| read_write_mix_on(connect, mix.readers, mix.writers, mix.hold, run);
        outcomes.push((backend, [run_mix(&AMONG_READERS), run_mix(&AMONG_WRITERS)]));
    };
    measure("memory", &|| Some(LockClient::new(memory.clone())));
    measure("Redis", &|| {
        dlocks::redis::RedisBackend::connect(redis_url)
            .ok()
            .map(LockClient::new)
    });
    #[cfg(feature = "postgres")]
    {
        let server = crate::support::postgres_server::PostgresServer::start();
        measure("PostgreSQL", &|| {
            server.backend_builder().build().ok().map(LockClient::new)
        });
    }
    #[cfg(feature = "etcd")]
    {
        let cluster = crate::support::etcd_server::EtcdCluster::single();
        measure("etcd", &|| {
            cluster.backend_builder().build().ok().map(LockClient::new)
        });
    }
    for (at, mix) in [AMONG_READERS, AMONG_WRITERS].iter().enumerate() {
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
            ],
        );
        for (backend, outcome) in &outcomes {
            let outcome = &outcome[at];
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
            ]);
        }
    }
}
