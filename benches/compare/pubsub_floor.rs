//! The floor of a hand-off between processes: a `PUBLISH` from this process reaching a thread
//! that waits in another process, woken there by the thread reading the subscribed
//! connection. A release's message cannot reach a waiter of another process faster; the
//! lock's own steps (the script, the grant, the hold's bookkeeping) come on top. Timed on the
//! wall clock in both processes, as the hand-offs are.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::handoff::now_ns;
use crate::redis_scenarios::plain_connection;
use crate::stats::Summary;

/// Set (to `url|channel`) in the subscriber process this binary starts.
pub const FLOOR_ENV: &str = "DLOCK_BENCH_PUBSUB_FLOOR";

/// The subscriber process: a reader thread hands each message to a waiting thread, which
/// notes how long after its `PUBLISH` was called it has it; prints those times, in µs, once
/// told to stop (message `0`).
pub fn subscriber_process(spec: &str) {
    let (url, channel) = url_and_channel(spec);
    let waiter = Waiter::start();
    let mut con = plain_connection(url);
    let mut pubsub = con.as_pubsub();
    if pubsub.subscribe(channel).is_err() {
        std::process::exit(1);
    }
    while let Ok(message) = pubsub.get_message() {
        let sent = message
            .get_payload::<String>()
            .ok()
            .and_then(|payload| payload.parse::<u64>().ok())
            .unwrap_or(0);
        if !waiter.hand(sent) {
            break;
        }
    }
    waiter.print();
}

/// This binary started again as a floor's listening process (`env` set to `url|channel`),
/// its output piped.
pub fn listening_process(env: &str, url: &str, channel: &str) -> Option<Child> {
    Command::new(std::env::current_exe().ok()?)
        .env(env, format!("{url}|{channel}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()
}

/// A floor's listening process that said it listens (`ready`), and the lines it prints after.
pub struct Listening {
    child: Child,
    lines: Box<dyn Iterator<Item = String>>,
}

impl Listening {
    /// Starts a floor's listening process ([`listening_process`]) and waits for its `ready`;
    /// `None` if it did not start or said something else.
    pub fn start(env: &str, url: &str, channel: &str) -> Option<Listening> {
        let mut child = listening_process(env, url, channel)?;
        let mut lines = child
            .stdout
            .take()
            .map(|out| BufReader::new(out).lines().map_while(Result::ok));
        if lines.as_mut().and_then(Iterator::next).as_deref() != Some("ready") {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        let lines = Box::new(lines?);
        Some(Listening { child, lines })
    }

    /// The latencies it printed once told to stop; it is then ended.
    pub fn finish(mut self) -> Vec<f64> {
        let latencies = latencies(&mut self.lines);
        let _ = self.child.kill();
        let _ = self.child.wait();
        latencies
    }
}

/// The `url|channel` a floor's listening process is given (it exits if it is not that).
pub fn url_and_channel(spec: &str) -> (&str, &str) {
    spec.split_once('|').unwrap_or_else(|| {
        eprintln!("bad floor spec {spec:?}");
        std::process::exit(2)
    })
}

/// The thread of a floor's listening process that waits for each message, as a lock's waiter
/// does, and notes how long after it was sent it had it.
pub struct Waiter {
    tx: mpsc::Sender<u64>,
    thread: thread::JoinHandle<Vec<f64>>,
}

impl Waiter {
    pub fn start() -> Waiter {
        let (tx, rx) = mpsc::channel::<u64>();
        let thread = thread::spawn(move || {
            let mut latencies = Vec::new();
            while let Ok(sent) = rx.recv() {
                if sent == 0 {
                    break;
                }
                latencies.push(now_ns().saturating_sub(sent) as f64 / 1000.0);
            }
            latencies
        });
        Waiter { tx, thread }
    }

    /// Hands it a message sent at `sent` (0: the last); false once it wants no more.
    pub fn hand(&self, sent: u64) -> bool {
        self.tx.send(sent).is_ok() && sent != 0
    }

    /// Prints the times it noted, in µs, one a line.
    pub fn print(self) {
        drop(self.tx);
        for latency in self.thread.join().unwrap_or_default() {
            println!("{latency}");
        }
    }
}

/// The latencies a floor's listening process printed, one a line.
pub fn latencies(lines: impl Iterator<Item = String>) -> Vec<f64> {
    lines.filter_map(|line| line.trim().parse().ok()).collect()
}

/// `messages` messages, each after 1 ms idle (as a holder idles), published to a subscriber
/// process: from the call of `PUBLISH` to the subscriber's waiting thread having it.
pub fn measure(url: &str, messages: usize) -> Summary {
    let channel = format!("bench:floor:{}", uuid::Uuid::new_v4());
    let Some(mut child) = listening_process(FLOOR_ENV, url, &channel) else {
        return Summary::default();
    };
    let mut con = plain_connection(url);
    let subscribed_by = Instant::now() + Duration::from_secs(10);
    let subscribed = loop {
        let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut con)
            .unwrap_or_default();
        if counts.first().is_some_and(|(_, count)| *count > 0) {
            break true;
        }
        if Instant::now() >= subscribed_by {
            break false;
        }
        thread::sleep(Duration::from_millis(5));
    };
    let mut publish = |payload: String| {
        let _: redis::RedisResult<i64> = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg(payload)
            .query(&mut con);
    };
    if subscribed {
        for _ in 0..messages {
            thread::sleep(Duration::from_millis(1));
            publish(now_ns().to_string());
        }
    }
    publish("0".into());
    let latencies = child
        .stdout
        .take()
        .map(|out| latencies(BufReader::new(out).lines().map_while(Result::ok)))
        .unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    Summary::of_us(latencies)
}
