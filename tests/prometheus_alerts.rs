//! The alerts docs/operations.md documents fire on what the `prometheus_metrics` example
//! exports: the example's `/metrics` endpoint is scraped twice, around a round of its workload,
//! and each alert's expression (read from the document) is evaluated on the two scrapes as
//! Prometheus evaluates it, with its `<...>` thresholds at 0. An expression that reads a series
//! the exporter does not render (`_bucket` series of a histogram rendered as a summary) comes
//! out empty, and the test fails.
//!
//! A small evaluator for the PromQL the document uses: selectors, `rate`, `increase`,
//! `histogram_quantile`, `sum by`, `*` and `>`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "examples/prometheus_metrics.rs"]
mod example;

type Labels = BTreeMap<String, String>;

/// One scrape: every sample, and when it was taken.
struct Scrape {
    at: Instant,
    samples: Vec<(String, Labels, f64)>,
}

fn scrape(address: SocketAddr) -> Scrape {
    let mut stream = TcpStream::connect(address).expect("the example's endpoint");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    let (head, body) = response.split_once("\r\n\r\n").expect("headers");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let samples = body
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| parse_sample(line).unwrap_or_else(|| panic!("a sample: {line}")))
        .collect();
    Scrape {
        at: Instant::now(),
        samples,
    }
}

/// `name{a="b",...} value` (Prometheus' text format).
fn parse_sample(line: &str) -> Option<(String, Labels, f64)> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let Some((name, labels)) = series.split_once('{') else {
        return Some((series.to_owned(), Labels::new(), value));
    };
    let mut parsed = Labels::new();
    let mut rest = labels.strip_suffix('}')?;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => value.push(chars.next()?.1),
                (at, '"') => break at,
                (_, c) => value.push(c),
            }
        };
        parsed.insert(key.trim_start_matches(',').to_owned(), value);
        rest = &after[end + 1..];
    }
    Some((name.to_owned(), parsed, value))
}

/// What an expression evaluates to.
#[derive(Debug, Clone)]
enum Value {
    Scalar(f64),
    Vector(Vec<(Labels, f64)>),
}

/// Evaluates PromQL's subset on the scrapes `before` and `after` (a range covers both).
struct Evaluator<'a> {
    text: &'a str,
    at: usize,
    before: &'a Scrape,
    after: &'a Scrape,
}

impl Evaluator<'_> {
    fn eval(mut self) -> Value {
        let value = self.comparison();
        self.skip_space();
        assert_eq!(
            self.at,
            self.text.len(),
            "unread: {}",
            &self.text[self.at..]
        );
        value
    }

    fn comparison(&mut self) -> Value {
        let left = self.product();
        if !self.eat(">") {
            return left;
        }
        let Value::Scalar(threshold) = self.product() else {
            panic!("a threshold");
        };
        match left {
            Value::Vector(samples) => Value::Vector(
                samples
                    .into_iter()
                    .filter(|(_, value)| *value > threshold)
                    .collect(),
            ),
            Value::Scalar(value) => Value::Scalar(f64::from(u8::from(value > threshold))),
        }
    }

    fn product(&mut self) -> Value {
        let mut value = self.term();
        while self.eat("*") {
            match (value, self.term()) {
                (Value::Scalar(a), Value::Scalar(b)) => value = Value::Scalar(a * b),
                other => panic!("only scalars are multiplied here: {other:?}"),
            }
        }
        value
    }

    fn term(&mut self) -> Value {
        self.skip_space();
        if self.eat("(") {
            let value = self.comparison();
            self.expect(")");
            return value;
        }
        let word = self.word();
        if let Ok(number) = word.parse::<f64>() {
            return Value::Scalar(number);
        }
        match word.as_str() {
            "rate" | "increase" => {
                self.expect("(");
                let (name, matchers) = self.selector();
                self.expect("[");
                self.word();
                self.expect("]");
                self.expect(")");
                let seconds = self.after.at.duration_since(self.before.at).as_secs_f64();
                let mut samples = Vec::new();
                for (labels, now) in select(self.after, &name, &matchers) {
                    let then = select(self.before, &name, &matchers)
                        .into_iter()
                        .find(|(earlier, _)| *earlier == labels);
                    // As Prometheus: a series needs two samples in the range.
                    if let Some((_, then)) = then {
                        let increase = now - then;
                        samples.push((
                            labels,
                            if word == "rate" {
                                increase / seconds
                            } else {
                                increase
                            },
                        ));
                    }
                }
                Value::Vector(samples)
            }
            "histogram_quantile" => {
                self.expect("(");
                let Value::Scalar(quantile) = self.term() else {
                    panic!("a quantile");
                };
                self.expect(",");
                let Value::Vector(buckets) = self.comparison() else {
                    panic!("buckets");
                };
                self.expect(")");
                Value::Vector(histogram_quantile(quantile, buckets))
            }
            "sum" => {
                self.expect("by");
                self.expect("(");
                let by = self.word();
                self.expect(")");
                let Value::Vector(samples) = self.term() else {
                    panic!("a vector to sum");
                };
                let mut sums: BTreeMap<Labels, f64> = BTreeMap::new();
                for (labels, value) in samples {
                    let key = labels
                        .into_iter()
                        .filter(|(label, _)| *label == by)
                        .collect();
                    *sums.entry(key).or_default() += value;
                }
                Value::Vector(sums.into_iter().collect())
            }
            _ => {
                self.at -= word.len();
                let (name, matchers) = self.selector();
                Value::Vector(select(self.after, &name, &matchers))
            }
        }
    }

    /// `name` or `name{label="value",...}`.
    fn selector(&mut self) -> (String, Vec<(String, String)>) {
        let name = self.word();
        let mut matchers = Vec::new();
        if self.eat("{") {
            while !self.eat("}") {
                let label = self.word();
                self.expect("=\"");
                let end = self.text[self.at..].find('"').expect("a closing quote");
                matchers.push((label, self.text[self.at..self.at + end].to_owned()));
                self.at += end + 1;
                self.eat(",");
            }
        }
        (name, matchers)
    }

    fn word(&mut self) -> String {
        self.skip_space();
        let rest = &self.text[self.at..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        self.at += len;
        rest[..len].to_owned()
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        let found = self.text[self.at..].starts_with(token);
        if found {
            self.at += token.len();
        }
        found
    }

    fn expect(&mut self, token: &str) {
        assert!(
            self.eat(token),
            "expected {token:?} at {:?}",
            &self.text[self.at..]
        );
    }

    fn skip_space(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }
}

/// The samples of `scrape` named `name` whose labels match every matcher.
fn select(scrape: &Scrape, name: &str, matchers: &[(String, String)]) -> Vec<(Labels, f64)> {
    scrape
        .samples
        .iter()
        .filter(|(sample, labels, _)| {
            sample == name
                && matchers
                    .iter()
                    .all(|(label, value)| labels.get(label) == Some(value))
        })
        .map(|(_, labels, value)| (labels.clone(), *value))
        .collect()
}

/// Prometheus' `histogram_quantile`: per series (its labels but `le`), the bucket the rank falls
/// in, interpolated linearly; the `+Inf` bucket answers the largest finite bound.
fn histogram_quantile(quantile: f64, buckets: Vec<(Labels, f64)>) -> Vec<(Labels, f64)> {
    let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
    for (mut labels, count) in buckets {
        let bound = labels.remove("le").expect("a bucket's le");
        let bound = if bound == "+Inf" {
            f64::INFINITY
        } else {
            bound.parse().expect("le")
        };
        series.entry(labels).or_default().push((bound, count));
    }
    series
        .into_iter()
        .filter_map(|(labels, mut buckets)| {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            let total = buckets.last()?.1;
            if total <= 0.0 {
                return None;
            }
            let rank = quantile * total;
            let (mut lower, mut below) = (0.0, 0.0);
            for (bound, count) in &buckets {
                if *count >= rank {
                    if bound.is_infinite() {
                        return Some((labels, lower));
                    }
                    let share = (rank - below) / (count - below);
                    return Some((labels, lower + (bound - lower) * share));
                }
                (lower, below) = (*bound, *count);
            }
            None
        })
        .collect()
}

/// The alerts of docs/operations.md: the section's table, each row's first code span in its
/// expression column, with `<...>` placeholders set to 0.
fn documented_alerts() -> Vec<(String, String)> {
    let document = include_str!("../docs/operations.md");
    let section = document
        .split("## What to alert on")
        .nth(1)
        .expect("the alerts section");
    section
        .lines()
        .filter(|line| {
            line.starts_with("| ") && !line.starts_with("| alert") && !line.starts_with("|---")
        })
        .map(|row| {
            let columns: Vec<&str> = row.split(" | ").collect();
            let expression = columns[1]
                .split('`')
                .nth(1)
                .expect("an expression in backticks");
            let mut filled = String::new();
            let mut rest = expression;
            while let Some((before, after)) = rest.split_once('<') {
                filled.push_str(before);
                filled.push('0');
                rest = after.split_once('>').expect("a placeholder's end").1;
            }
            filled.push_str(rest);
            (columns[0].trim_start_matches("| ").to_owned(), filled)
        })
        .collect()
}

#[test]
fn the_documented_alerts_fire_on_what_the_example_exports() {
    let prometheus = example::install_recorder().expect("the recorder");
    let (client, store) = example::client().expect("the client");
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = listener.local_addr().expect("its address");
    std::thread::spawn(move || example::serve(&listener, &prometheus));

    example::workload(&client, &store).expect("the first round");
    let before = scrape(address);
    example::workload(&client, &store).expect("the second round");
    // A thread waiting for a held lock, as the waiters' alert is about.
    let held = client.lock("orders:held").lock().expect("lock");
    let waiter = client.clone();
    let waiting = std::thread::spawn(move || {
        waiter
            .lock("orders:held")
            .try_lock_for(Duration::from_secs(30))
            .map(|guard| guard.is_some())
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let now = scrape(address);
        let waiting_now = select(&now, "dlock_waiting", &[("name".into(), "orders".into())]);
        if waiting_now.iter().any(|(_, value)| *value >= 1.0) {
            break now;
        }
        assert!(Instant::now() < deadline, "the waiting thread never showed");
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(held);
    assert!(waiting
        .join()
        .expect("the waiting thread")
        .expect("its wait"));

    let alerts = documented_alerts();
    assert!(alerts.len() >= 7, "{alerts:?}");
    for (alert, expression) in alerts {
        let value = Evaluator {
            text: &expression,
            at: 0,
            before: &before,
            after: &after,
        }
        .eval();
        match value {
            Value::Vector(samples) => assert!(
                !samples.is_empty(),
                "the alert {alert:?} ({expression}) does not fire on what the example exports"
            ),
            Value::Scalar(value) => panic!("{alert:?} is a scalar ({value}), not an alert"),
        }
    }
    // The histograms are rendered with buckets, not as summaries.
    assert!(!select(&after, "dlock_renewal_seconds_bucket", &[]).is_empty());
    assert!(select(
        &after,
        "dlock_renewal_seconds",
        &[("quantile".into(), "0.99".into())]
    )
    .is_empty());
}
