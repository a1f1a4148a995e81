//! The commands of one uncontended `lock()` + `unlock()`, captured from the server with
//! `MONITOR` and replayed on plain connections: what the pair's scripts cost without dlock's
//! client around them (pool, engine, watchdog, wake-ups). Throughput against this replay says
//! how much the client adds; against a trivial `EVALSHA` it says what the scripts cost.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use dlocks::LockClient;

/// The name the captured pair locks; replays put their own name in its place.
const CAPTURED_NAME: &str = "bench:capture";
/// The unlock latch's key prefix: what follows its last `:` is the release's request id.
const LATCH_PREFIX: &str = "redisson_unlock_latch:";

/// The steady-state pair as dlock sends it: the previous release's latch `DEL` written with the
/// acquire, then the release.
#[derive(Debug, Clone)]
pub struct ReplayedPair {
    acquire: Vec<String>,
    release: Vec<String>,
    /// The captured release's latch key, and the request id it ends with.
    latch: String,
    request_id: String,
}

impl ReplayedPair {
    /// Captures two pairs of a lock of `client` on the server at `address` (`host:port`) and
    /// keeps the second's commands (the first has no latch to delete yet).
    pub fn capture(client: &LockClient, address: &str) -> Result<ReplayedPair, String> {
        let stream = TcpStream::connect(address).map_err(|e| format!("connect: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        (&stream)
            .write_all(b"MONITOR\r\n")
            .map_err(|e| format!("MONITOR: {e}"))?;
        let mut lines = BufReader::new(&stream).lines();
        match lines.next() {
            Some(Ok(line)) if line.trim_end() == "+OK" => {}
            other => return Err(format!("MONITOR answered {other:?}")),
        }
        let lock = client.lock(CAPTURED_NAME);
        for _ in 0..2 {
            lock.lock()
                .map_err(|e| e.to_string())?
                .unlock()
                .map_err(|e| e.to_string())?;
        }
        // A command after the pairs marks the end of what to read.
        let mut marker = crate::redis_scenarios::plain_connection(&format!("redis://{address}/"));
        let _: () = redis::cmd("ECHO")
            .arg("bench:capture:end")
            .query(&mut marker)
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut commands: Vec<Vec<String>> = Vec::new();
        while Instant::now() < deadline {
            let Some(Ok(line)) = lines.next() else {
                break;
            };
            // `+<time> [<db> <client>] "CMD" "arg" ...`; commands run by scripts say `lua`.
            let Some((source, quoted)) = line.split_once("] ") else {
                continue;
            };
            if source.ends_with("lua") {
                continue;
            }
            let words = unquote(quoted);
            if words
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case("ECHO"))
                && words.get(1).is_some_and(|w| w == "bench:capture:end")
            {
                break;
            }
            if words.iter().any(|w| w.contains(CAPTURED_NAME)) {
                commands.push(words);
            }
        }
        // The second pair: DEL of the first release's latch, acquire, release.
        let at = commands
            .iter()
            .position(|c| c[0].eq_ignore_ascii_case("DEL"))
            .ok_or("no latch DEL among the captured commands")?;
        let [acquire, release]: [Vec<String>; 2] = commands
            .get(at + 1..at + 3)
            .ok_or("fewer commands than a pair's after the latch DEL")?
            .to_vec()
            .try_into()
            .map_err(|_| "a pair is two scripts")?;
        let latch = release
            .iter()
            .find(|w| w.starts_with(LATCH_PREFIX))
            .ok_or("the release names no latch")?
            .clone();
        let request_id = latch
            .rsplit(':')
            .next()
            .ok_or("the latch key has no request id")?
            .to_owned();
        Ok(ReplayedPair {
            acquire,
            release,
            latch,
            request_id,
        })
    }

    /// A closure that runs one pair per call on `con`, on a name of its own (`slot`), with a
    /// fresh request id per release: one write of the latch `DEL` and the acquire, two replies,
    /// then the release and its reply.
    pub fn replayer(&self, mut con: redis::Connection, slot: usize) -> impl FnMut() {
        let name = format!("bench:replay:{slot}:{}", uuid::Uuid::new_v4().simple());
        let on_name = |words: &[String]| -> Vec<String> {
            words
                .iter()
                .map(|word| word.replace(CAPTURED_NAME, &name))
                .collect()
        };
        let (acquire, release) = (on_name(&self.acquire), on_name(&self.release));
        let latch = self.latch.replace(CAPTURED_NAME, &name);
        let request_id = self.request_id.clone();
        let command = move |words: &[String], id: &str| -> redis::Cmd {
            let mut cmd = redis::cmd(&words[0]);
            for word in &words[1..] {
                cmd.arg(word.replace(&request_id, id));
            }
            cmd
        };
        let mut count: u64 = 0;
        move || {
            let previous = format!("{count:032x}");
            count += 1;
            let id = format!("{count:032x}");
            let mut pipe = redis::pipe();
            if count > 1 {
                pipe.add_command(command(&[String::from("DEL"), latch.clone()], &previous))
                    .ignore();
            }
            pipe.add_command(command(&acquire, &id)).ignore();
            let () = pipe.query(&mut con).expect("replayed acquire");
            let _: redis::Value = command(&release, &id)
                .query(&mut con)
                .expect("replayed release");
        }
    }
}

/// The words of a `MONITOR` line's command: `"EVALSHA" "abc" "2" ...`, with `\"`, `\\` and
/// `\xNN` escapes.
fn unquote(quoted: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = quoted.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut word = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('x') => {
                        let hex: String = chars.by_ref().take(2).collect();
                        if let Ok(byte) = u8::from_str_radix(&hex, 16) {
                            word.push(byte as char);
                        }
                    }
                    Some('n') => word.push('\n'),
                    Some('r') => word.push('\r'),
                    Some('t') => word.push('\t'),
                    Some(other) => word.push(other),
                    None => {}
                },
                other => word.push(other),
            }
        }
        words.push(word);
    }
    words
}
