//! The history: one record per operation a worker attempted, with wall-clock instants (the
//! same clock in every process of the machine), written as one JSON line each.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// Microseconds since the Unix epoch: comparable across the processes of one machine.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The write was accepted (the release may still have reported a lost lease).
    Done,
    /// The lock was held by others for the whole wait.
    Busy,
    /// A lock call failed (the error is recorded).
    Error,
    /// The register refused the read or the write: the token was stale.
    Refused,
    /// The worker saw `is_lost()` before writing and did not write.
    Abandoned,
    /// The operation panicked.
    Panic,
    /// The latch mode's latch was open after one of its two count-downs.
    OpenedEarly,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Busy => "busy",
            Outcome::Error => "error",
            Outcome::Refused => "refused",
            Outcome::Abandoned => "abandoned",
            Outcome::Panic => "panic",
            Outcome::OpenedEarly => "opened-early",
        }
    }

    fn parse(name: &str) -> Option<Outcome> {
        [
            Outcome::Done,
            Outcome::Busy,
            Outcome::Error,
            Outcome::Refused,
            Outcome::Abandoned,
            Outcome::Panic,
            Outcome::OpenedEarly,
        ]
        .into_iter()
        .find(|outcome| outcome.name() == name)
    }
}

/// One operation: acquire → read → write → release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `pid:thread:sequence`, also the hold's name at the register.
    pub hold: String,
    pub pid: u32,
    /// When the lock call started.
    pub start: u64,
    /// When the lock call returned with the lock.
    pub acquired: Option<u64>,
    /// When the write returned (accepted or not).
    pub written: Option<u64>,
    /// When the release returned (or the operation ended otherwise).
    pub end: u64,
    pub token: Option<u64>,
    pub outcome: Outcome,
    /// The release's error, if it reported one (a lost lease, say).
    pub release_error: Option<String>,
    /// The lock call's or register's error.
    pub error: Option<String>,
    /// The longest single call of the operation (lock, read, write, release), in µs.
    pub longest_call_us: u64,
}

impl Record {
    /// The record as one JSON line.
    pub fn to_line(&self) -> String {
        json!({
            "hold": self.hold,
            "pid": self.pid,
            "start": self.start,
            "acquired": self.acquired,
            "written": self.written,
            "end": self.end,
            "token": self.token,
            "outcome": self.outcome.name(),
            "release_error": self.release_error,
            "error": self.error,
            "longest_call_us": self.longest_call_us,
        })
        .to_string()
    }

    fn from_json(value: &Value) -> Option<Record> {
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        let number = |key: &str| value.get(key).and_then(Value::as_u64);
        Some(Record {
            hold: text("hold")?,
            pid: u32::try_from(number("pid")?).ok()?,
            start: number("start")?,
            acquired: number("acquired"),
            written: number("written"),
            end: number("end")?,
            token: number("token"),
            outcome: Outcome::parse(&text("outcome")?)?,
            release_error: text("release_error"),
            error: text("error"),
            longest_call_us: number("longest_call_us")?,
        })
    }
}

/// The records of one worker's log file. A process killed mid-line leaves a partial last line,
/// which is skipped.
pub fn read_records(path: &Path) -> std::io::Result<Vec<Record>> {
    let file = std::fs::File::open(path)?;
    Ok(BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
        .filter_map(|value| Record::from_json(&value))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_its_json_line() {
        let record = Record {
            hold: "7:1:42".into(),
            pid: 7,
            start: 10,
            acquired: Some(11),
            written: Some(12),
            end: 13,
            token: Some(1_795_329_184_530_308),
            outcome: Outcome::Done,
            release_error: Some("lost".into()),
            error: None,
            longest_call_us: 5,
        };
        let value: Value = serde_json::from_str(&record.to_line()).expect("json");
        assert_eq!(Record::from_json(&value), Some(record));
    }
}
