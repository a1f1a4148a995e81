//! Writers among continuous readers, on every backend: readers that come and go without a pause
//! must not keep a writer out (writer preference). Each row is one backend's run; the figure
//! that matters is the longest write wait against the read hold.

use std::time::Duration;

use dlocks::{LockClient, MemoryBackend};

use crate::family::read_write_mix_on;
use crate::report::Report;
use crate::stats::us;

/// Readers and writers of the mix.
const READERS: usize = 6;
const WRITERS: usize = 1;

/// How long each side holds, each time.
const HOLD: Duration = Duration::from_millis(2);

pub fn section(report: &mut Report, redis_url: &str, secs: &dyn Fn(f64) -> Duration) {
    report.heading(
        "8c. A writer among continuous readers (6 readers and 1 writer, each its own client, \
         2 ms holds, no pause between), per backend",
        &[
            "backend",
            "reads/s",
            "writes/s",
            "write wait p50",
            "write wait p99",
            "longest write wait",
            "longest write wait / read hold",
        ],
    );
    let run = secs(3.0);
    // One row per backend: the mix on clients that `connect` makes.
    let mut measure = |backend: &str, connect: &(dyn Fn() -> Option<LockClient> + Sync)| {
        let mix = read_write_mix_on(connect, READERS, WRITERS, HOLD, run);
        report.row(&[
            backend.into(),
            format!("{:.0}", mix.reads_per_s),
            format!("{:.0}", mix.writes_per_s),
            us(mix.write_wait.p50_us),
            us(mix.write_wait.p99_us),
            us(mix.longest_write_wait_us),
            format!(
                "{:.1}",
                mix.longest_write_wait_us / (HOLD.as_secs_f64() * 1e6)
            ),
        ]);
    };

    let memory = MemoryBackend::new();
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
}
