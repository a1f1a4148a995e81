//! dlock's metrics exported for Prometheus: a recorder installed at start-up, a few threads
//! contending for a lock, one of them timing out, and the text a `/metrics` endpoint would
//! serve.
//!
//! ```text
//! cargo run --example prometheus_metrics
//! ```
//!
//! A service serves [`PrometheusHandle::render`]'s text on its `/metrics` route (or enables the
//! exporter's `http-listener` feature); docs/operations.md says what to alert on.

use std::thread;
use std::time::Duration;

use dlocks::{LockClient, LockError, MemoryBackend};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

fn main() -> Result<(), LockError> {
    // Histograms with buckets (Prometheus can add them up across instances), from half a
    // millisecond (a round trip) to five minutes (a long wait or hold).
    let buckets = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0,
    ];
    let prometheus: PrometheusHandle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Prefix("dlock_".into()), &buckets)
        .map_err(|error| LockError::config(format!("the buckets: {error}")))?
        .install_recorder()
        .map_err(|error| LockError::config(format!("installing the recorder: {error}")))?;

    // Lock names are labels only when the program says how: here, the part before the ':'.
    let client = LockClient::builder(MemoryBackend::new())
        .metric_name(|name| name.split(':').next().unwrap_or(name).to_owned())
        .build()?;

    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let client = client.clone();
            thread::spawn(move || -> Result<(), LockError> {
                let order = client.lock(format!("orders:{}", worker % 2));
                for _ in 0..25 {
                    let _guard = order.lock()?;
                    thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker thread")?;
    }

    // A wait that runs out is counted with outcome="timed_out".
    let held = client.lock("reports:daily").lock()?;
    let waiter = client.clone();
    let taken = thread::spawn(move || {
        let report = waiter.lock("reports:daily");
        report
            .try_lock_for(Duration::from_millis(20))
            .map(|guard| guard.is_some())
    })
    .join()
    .expect("the waiting thread")?;
    assert!(!taken, "the lock was held all along");
    drop(held);

    // The buckets are left out here to keep the output short; a /metrics route serves it all.
    for line in prometheus.render().lines() {
        let dlock = line.starts_with("dlock_") || line.contains(" dlock_") && line.starts_with('#');
        if dlock && !line.contains("_bucket{") {
            println!("{line}");
        }
    }
    Ok(())
}
