//! dlock's metrics exported for Prometheus: a recorder with histogram buckets installed at
//! start-up, a workload that makes every series docs/operations.md alerts on (contention, a
//! wait that times out, an acquire the store fails, a lease that runs out while held, a
//! renewal that fails), and the `/metrics` endpoint Prometheus scrapes.
//!
//! ```text
//! cargo run -p dlock-tests --example prometheus_metrics                          # prints what /metrics serves
//! cargo run -p dlock-tests --example prometheus_metrics -- --serve 127.0.0.1:9898  # serves it, the workload every 5 s
//! ```
//!
//! The exporter renders histograms as Prometheus summaries unless it is given buckets: the
//! alerts' `histogram_quantile(.., rate(.._bucket[..]))` need buckets, so they are set here
//! (a test scrapes this endpoint and evaluates the documented alerts against it).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use dlocks::testing::{Fault, FaultyBackend, Op};
use dlocks::{LeaseChange, LockClient, LockError, MemoryBackend};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The histograms' buckets, in seconds: from half a millisecond (a round trip) to five minutes
/// (a long wait or hold). Prometheus can add buckets up across instances, not quantiles.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0,
];

/// The watchdog lease of the example's client: short, so renewals happen while it runs.
pub const WATCHDOG_LEASE: Duration = Duration::from_millis(300);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = install_recorder()?;
    let (client, store) = client()?;
    let serve_at = std::env::args().skip_while(|arg| arg != "--serve").nth(1);
    let Some(address) = serve_at else {
        workload(&client, &store)?;
        print!("{}", prometheus.render());
        return Ok(());
    };
    let listener = TcpListener::bind(&address)?;
    println!("serving http://{}/metrics", listener.local_addr()?);
    thread::spawn(move || loop {
        if let Err(error) = workload(&client, &store) {
            eprintln!("the workload failed: {error}");
        }
        thread::sleep(Duration::from_secs(5));
    });
    serve(&listener, &prometheus)?;
    Ok(())
}

/// Installs the Prometheus recorder, with buckets for every `dlock_` histogram.
pub fn install_recorder() -> Result<PrometheusHandle, LockError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Prefix("dlock_".into()), &BUCKETS)
        .map_err(|error| LockError::config(format!("the buckets: {error}")))?
        .install_recorder()
        .map_err(|error| LockError::config(format!("installing the recorder: {error}")))
}

/// A client on an in-process store that can be made to fail (the workload's store errors), with
/// lock names reported under `name` by the part before the `:`.
pub fn client() -> Result<(LockClient, FaultyBackend), LockError> {
    let store = FaultyBackend::new(MemoryBackend::new());
    let client = LockClient::builder(store.clone())
        .watchdog_lease(WATCHDOG_LEASE)
        .metric_name(|name| name.split(':').next().unwrap_or(name).to_owned())
        .build()?;
    Ok((client, store))
}

/// One round of work that makes every series an alert of docs/operations.md reads.
pub fn workload(client: &LockClient, store: &FaultyBackend) -> Result<(), LockError> {
    // Contention: four threads taking turns on two locks (acquires, holds, waiting threads).
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

    // A wait that runs out: outcome="timed_out".
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

    // An acquire the store fails: outcome="error".
    store.inject(Fault::fail(Op::TryAcquire).times(1));
    assert!(client.lock("reports:weekly").try_lock().is_err());

    let events = client.lease_events();
    let next_change = |what: &str| -> Result<LeaseChange, LockError> {
        events
            .recv_timeout(Duration::from_secs(10))
            .map(|event| event.change)
            .map_err(|_| LockError::config(format!("no lease event for {what}")))
    };
    // A fixed lease that runs out while held: dlock_lease_lost_total{reason="expired"}.
    let short = client
        .lock("imports:nightly")
        .lock_with_lease(Duration::from_millis(50))?;
    let lost = next_change("a lease running out")?;
    assert!(matches!(lost, LeaseChange::Lost { .. }), "{lost:?}");
    drop(short);

    // A renewal that fails, then one that works: dlock_renewal_failures_total and
    // dlock_renewal_seconds.
    store.inject(Fault::fail(Op::Renew).times(1));
    let renewed = client.lock("imports:hourly").lock()?;
    let failed = next_change("a failed renewal")?;
    assert!(
        matches!(failed, LeaseChange::RenewalFailed { .. }),
        "{failed:?}"
    );
    let recovered = next_change("a renewal that works again")?;
    assert!(
        matches!(recovered, LeaseChange::RenewalRecovered { .. }),
        "{recovered:?}"
    );
    renewed.unlock()
}

/// Serves `/metrics` (Prometheus' text format) to each connection, one request at a time.
pub fn serve(listener: &TcpListener, prometheus: &PrometheusHandle) -> std::io::Result<()> {
    for stream in listener.incoming() {
        let mut stream = stream?;
        let mut request = String::new();
        BufReader::new(&stream).read_line(&mut request)?;
        let response = if request.starts_with("GET /metrics ") {
            let body = prometheus.render();
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        } else {
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned()
        };
        stream.write_all(response.as_bytes())?;
    }
    Ok(())
}
