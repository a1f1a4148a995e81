//! PostgreSQL's floor of a hand-off between processes: a `NOTIFY` committed by this process
//! reaching a thread that waits in another process, woken there by the thread that reads the
//! listening connection (as the backend's listener wakes a waiter). A release's notice cannot
//! reach a waiter of another process faster. Timed on the wall clock in both processes, as
//! the hand-offs are.

use std::io::Write;
use std::thread;
use std::time::Duration;

use fallible_iterator::FallibleIterator;

use crate::handoff::now_ns;
use crate::pubsub_floor::{url_and_channel, Listening, Waiter};
use crate::stats::Summary;

/// Set (to `url|channel`) in the listener process this binary starts.
pub const FLOOR_ENV: &str = "DLOCK_BENCH_NOTIFY_FLOOR";

/// The listener process: says `ready` once it listens; a reader thread hands each notice to a
/// waiting thread, which notes how long after its `NOTIFY` was called it has it; prints those
/// times, in µs, once told to stop (payload `0`).
pub fn listener_process(spec: &str) {
    let (url, channel) = url_and_channel(spec);
    let waiter = Waiter::start();
    let Ok(mut con) = postgres::Client::connect(url, postgres::NoTls) else {
        std::process::exit(1);
    };
    if con.batch_execute(&format!("LISTEN \"{channel}\"")).is_err() {
        std::process::exit(1);
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut notifications = con.notifications();
    let mut notices = notifications.blocking_iter();
    while let Ok(Some(notice)) = notices.next() {
        let sent = notice.payload().parse::<u64>().unwrap_or(0);
        if !waiter.hand(sent) {
            break;
        }
    }
    waiter.print();
}

/// `messages` notices, each after 1 ms idle (as a holder idles), to a listener process: from
/// the call of `NOTIFY` (autocommit, `synchronous_commit` off, as the hand-offs run) to the
/// listener's waiting thread having it.
pub fn measure(url: &str, messages: usize) -> Summary {
    measure_among(url, messages, 1)
}

/// [`measure`], with `sessions - 1` more sessions of the database listening, each on a channel
/// of its own, idle, as the other processes' listeners of a lock are: PostgreSQL (up to 16 at
/// least) signals every session that listens in the database at each commit that notifies,
/// and each wakes to read the notification queue, whatever it listens to.
pub fn measure_among(url: &str, messages: usize, sessions: usize) -> Summary {
    let others: Vec<postgres::Client> = (1..sessions)
        .filter_map(|_| {
            let mut con = postgres::Client::connect(url, postgres::NoTls).ok()?;
            let channel = format!("bench_idle_{}", uuid::Uuid::new_v4().simple());
            con.batch_execute(&format!("LISTEN \"{channel}\"")).ok()?;
            Some(con)
        })
        .collect();
    if others.len() + 1 < sessions {
        return Summary::default();
    }
    let floor = measure_alone(url, messages);
    drop(others);
    floor
}

fn measure_alone(url: &str, messages: usize) -> Summary {
    let channel = format!("bench_floor_{}", uuid::Uuid::new_v4().simple());
    let Some(listening) = Listening::start(FLOOR_ENV, url, &channel) else {
        return Summary::default();
    };
    let Ok(mut con) = postgres::Client::connect(url, postgres::NoTls) else {
        listening.finish();
        return Summary::default();
    };
    let _ = con.batch_execute("SET synchronous_commit = off");
    let mut notify = |payload: String| {
        let _ = con.execute("SELECT pg_notify($1, $2)", &[&channel, &payload]);
    };
    for _ in 0..messages {
        thread::sleep(Duration::from_millis(1));
        notify(now_ns().to_string());
    }
    notify("0".into());
    let latencies = listening.finish();
    Summary::of_us(latencies)
}
