//! What the client's metrics cost on the uncontended Redis pair: the pair with no recorder (the
//! facade's no-op) and with a Prometheus recorder, sampled alternately in blocks, each block's
//! ratio taken on its own so that both sides saw the same moment of a noisy round trip.

use dlocks::LockClient;
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::redis_scenarios::plain_connection;
use crate::report::Report;
use crate::stats::{interleaved, us, Ratio};

/// Section 2c: `blocks` blocks of `per_block` pairs each way, with `PING` beside them.
pub fn section(
    report: &mut Report,
    client: &LockClient,
    url: &str,
    blocks: usize,
    per_block: usize,
) {
    report.heading(
        "2c. What the metrics cost: the uncontended pair with no recorder and with a Prometheus \
         recorder, sampled alternately (median of per-block figures, lowest–highest block)",
        &[
            "PING p50",
            "pair p50, no recorder",
            "pair p50, Prometheus recorder",
            "with / without",
        ],
    );
    let recorder = PrometheusBuilder::new().build_recorder();
    let lock = client.lock(format!("bench:metrics:{}", uuid::Uuid::new_v4()));
    let mut con = plain_connection(url);
    let (mut pings, mut bare, mut recorded, mut ratios) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..blocks {
        let mut ping = || {
            let _: String = redis::cmd("PING").query(&mut con).expect("PING");
        };
        let mut pair = || lock.lock().expect("lock").unlock().expect("unlock");
        let mut pair_recorded = || {
            metrics::with_local_recorder(&recorder, || {
                lock.lock().expect("lock").unlock().expect("unlock")
            })
        };
        let found = interleaved(
            per_block / 10,
            per_block,
            &mut [&mut ping, &mut pair, &mut pair_recorded],
        );
        let (ping, without, with) = (
            found.summary(0).p50_us,
            found.summary(1).p50_us,
            found.summary(2).p50_us,
        );
        pings.push(ping);
        bare.push(without);
        recorded.push(with);
        ratios.push(with / without);
    }
    let spread = |values: Vec<f64>| {
        let spread = Ratio::of(values);
        format!(
            "{} ({}–{})",
            us(spread.median),
            us(spread.low),
            us(spread.high)
        )
    };
    report.row(&[
        spread(pings),
        spread(bare),
        spread(recorded),
        Ratio::of(ratios).to_string(),
    ]);
    report.note(
        "The recorder is installed for the measuring thread alone (the pair's steps run on it); \
         it keeps every series the pair reports: the acquire's time and outcome, the hold's time \
         and gauge, and each store step's time.",
    );
}
