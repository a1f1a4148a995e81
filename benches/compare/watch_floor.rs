//! etcd's floor of a hand-off between processes: a put made by this process reaching a thread
//! that waits in another process, woken there by the thread that reads the watch (as the
//! backend's watch thread wakes a waiter). A release's event cannot reach a waiter of another
//! process faster. Timed on the wall clock in both processes, as the hand-offs are.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use crate::etcd_gateway::{b64, port_of, unb64, Gateway};
use crate::handoff::now_ns;
use crate::pubsub_floor::{url_and_channel, Listening, Waiter};
use crate::stats::Summary;

/// Set (to `url|key`) in the watching process this binary starts.
pub const FLOOR_ENV: &str = "DLOCK_BENCH_WATCH_FLOOR";

/// The watching process: says `ready` once its watch is in place; a reader thread hands each
/// event's value (when it was put) to a waiting thread, which notes how long after the put was
/// sent it has it; prints those times, in µs, once told to stop (value `0`).
pub fn watcher_process(spec: &str) {
    let (url, key) = url_and_channel(spec);
    let waiter = Waiter::start();
    let Ok(mut watch) = TcpStream::connect(("127.0.0.1", port_of(url))) else {
        std::process::exit(1);
    };
    let _ = watch.set_nodelay(true);
    let body = format!("{{\"create_request\":{{\"key\":\"{}\"}}}}", b64(key));
    let request = format!(
        "POST /v3/watch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if watch.write_all(request.as_bytes()).is_err() {
        std::process::exit(1);
    }
    // The stream's chunks are one JSON message a line; the first says the watch is made.
    for line in BufReader::new(watch).lines().map_while(Result::ok) {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let result = &message["result"];
        if result["created"].as_bool() == Some(true) {
            println!("ready");
            let _ = std::io::stdout().flush();
        }
        let events = result["events"].as_array().cloned().unwrap_or_default();
        for event in events {
            let sent = event["kv"]["value"]
                .as_str()
                .and_then(unb64)
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or(0);
            if !waiter.hand(sent) {
                waiter.print();
                return;
            }
        }
    }
    waiter.print();
}

/// `messages` puts, each after 1 ms idle (as a holder idles), of a key a process watches: from
/// the put's sending to the watcher's waiting thread having its event.
pub fn measure(url: &str, messages: usize) -> Summary {
    let key = format!("bench:floor:{}", uuid::Uuid::new_v4());
    let Some(listening) = Listening::start(FLOOR_ENV, url, &key) else {
        return Summary::default();
    };
    let mut gateway = Gateway::to_url(url);
    for _ in 0..messages {
        thread::sleep(Duration::from_millis(1));
        gateway.put(&key, &now_ns().to_string());
    }
    gateway.put(&key, "0");
    let latencies = listening.finish();
    Summary::of_us(latencies)
}
