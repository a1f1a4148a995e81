//! The peer libraries, run by their drivers in `benches/peers/` against the same server.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::handoff::Outcome;
use crate::placement::Pinned;
use crate::stats::{in_turns, Alternated, Summary};

/// One peer driver: how to start it, and for which library.
pub struct Peer {
    pub label: &'static str,
    program: PathBuf,
    args: Vec<String>,
}

/// A peer's results, or why there are none.
pub struct PeerResult {
    pub library: String,
    pub pair: Option<Summary>,
    /// (workers, outcome) per forced hand-off run.
    pub handoff: Vec<(usize, Outcome)>,
    pub note: Option<String>,
}

fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// Installs the peers (a venv, node_modules, a cargo project) unless already there.
pub fn setup() -> Result<(), String> {
    let status = Command::new("bash")
        .arg(peers_dir().join("setup.sh"))
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("could not run benches/peers/setup.sh: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("benches/peers/setup.sh failed ({status})"))
    }
}

pub fn all() -> Vec<Peer> {
    let dir = peers_dir();
    let python = dir.join(".venv/bin/python");
    let py = |lib: &str| {
        vec![
            dir.join("py_peer.py").display().to_string(),
            "--lib".into(),
            lib.into(),
        ]
    };
    vec![
        Peer {
            label: "redis-py Lock",
            program: python.clone(),
            args: py("redis-py"),
        },
        Peer {
            label: "python-redis-lock",
            program: python,
            args: py("python-redis-lock"),
        },
        Peer {
            label: "node redlock",
            program: "node".into(),
            args: vec![
                dir.join("node_peer.js").display().to_string(),
                "--lib".into(),
                "redlock".into(),
            ],
        },
        Peer {
            label: "rslock",
            program: dir.join("rust/target/release/rslock-peer"),
            args: vec![],
        },
    ]
}

impl Peer {
    fn run(&self, url: &str, extra: &[String]) -> Result<Value, String> {
        let output = Command::new(&self.program)
            .args(&self.args)
            .args(["--url", url])
            .args(extra)
            .current_dir(peers_dir())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| {
                format!(
                    "{}: could not start {}: {e}",
                    self.label,
                    self.program.display()
                )
            })?;
        if !output.status.success() {
            return Err(format!("{} exited with {}", self.label, output.status));
        }
        let text = String::from_utf8_lossy(&output.stdout);
        let line = text
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .unwrap_or("");
        serde_json::from_str(line).map_err(|e| format!("{}: unreadable output ({e})", self.label))
    }

    /// Scenario 2: `pairs` uncontended pairs; the library's name (with its version) and the
    /// pairs' summary.
    pub fn pair(&self, url: &str, pairs: usize) -> Result<(String, Summary), String> {
        let json = self.run(
            url,
            &[
                "--scenario".into(),
                "pair".into(),
                "--iterations".into(),
                pairs.to_string(),
            ],
        )?;
        let library = json["library"].as_str().unwrap_or(self.label).to_string();
        Ok((library, Summary::of_us(numbers(&json["samples_us"]))))
    }

    /// Scenario 2 (uncontended pairs, none when `pairs` is 0) and the forced hand-off at each
    /// worker count.
    pub fn measure(&self, url: &str, pairs: usize, workers: &[usize], run_ms: u64) -> PeerResult {
        let mut result = PeerResult {
            library: self.label.to_string(),
            pair: None,
            handoff: Vec::new(),
            note: None,
        };
        if pairs > 0 {
            match self.pair(url, pairs) {
                Ok((library, pair)) => {
                    result.library = library;
                    result.pair = Some(pair);
                }
                Err(error) => result.note = Some(error),
            }
        }
        for &w in workers {
            let args = [
                "--scenario",
                "handoff",
                "--workers",
                &w.to_string(),
                "--duration-ms",
                &run_ms.to_string(),
                "--hold-ms",
                "1",
            ]
            .map(String::from);
            match self.run(url, &args) {
                Ok(json) => result.handoff.push((w, outcome(&json, run_ms))),
                Err(error) => result.note = Some(error),
            }
        }
        result
    }
}

fn numbers(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

fn outcome(json: &Value, run_ms: u64) -> Outcome {
    let latencies = numbers(&json["handoff_us"]);
    let per_worker = numbers(&json["acquisitions"]);
    let elapsed = json["elapsed_s"]
        .as_f64()
        .unwrap_or(run_ms as f64 / 1000.0)
        .max(1e-3);
    Outcome {
        handoffs_per_s: latencies.len() as f64 / elapsed,
        latency: Summary::of_us(latencies),
        longest_wait_us: json["max_wait_us"].as_f64().unwrap_or(0.0),
        per_worker_min: per_worker
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
            .max(0.0) as u64,
        per_worker_max: per_worker.iter().copied().fold(0.0, f64::max) as u64,
        retake_share: 0.0,
        // A peer's log gives its longest wait only.
        contending_longest_wait_us: f64::NAN,
    }
}

/// Peers' pairs measured in turns with operations of this process (see [`pairs_in_turns`]).
pub struct PeerTurns {
    /// This process's operations first, then one per peer, in order.
    pub turns: Alternated,
    /// Whether the client side and the server were pinned apart (see [`Pinned`]).
    pub pinned: bool,
    /// Per peer, the library's name (with its version) or the error of a failed block.
    pub libraries: Vec<Result<String, String>>,
}

/// Runs `ours` (operations of this process, each measuring one block and returning its
/// median in µs) and then each of `peers`' pair scenarios on `url` (`per_block` pairs), in
/// `blocks` turns, with this thread (and so the peers' processes started from it) on one CPU
/// and the server `server_pid`, when given, on another: all see the same placement.
pub fn pairs_in_turns(
    peers: &[Peer],
    url: &str,
    (blocks, per_block): (usize, usize),
    server_pid: Option<u32>,
    ours: Vec<&mut dyn FnMut() -> f64>,
) -> PeerTurns {
    let libraries: RefCell<Vec<Result<String, String>>> =
        RefCell::new(peers.iter().map(|peer| Ok(peer.label.to_owned())).collect());
    let mut all: Vec<Box<dyn FnMut() -> f64 + '_>> = ours
        .into_iter()
        .map(|op| Box::new(op) as Box<dyn FnMut() -> f64 + '_>)
        .collect();
    for (index, peer) in peers.iter().enumerate() {
        let libraries = &libraries;
        all.push(Box::new(move || {
            let (library, p50) = match peer.pair(url, per_block) {
                Ok((library, pair)) => (Ok(library), pair.p50_us),
                Err(error) => (Err(error), f64::NAN),
            };
            libraries.borrow_mut()[index] = library;
            p50
        }));
    }
    let mut ops: Vec<&mut dyn FnMut() -> f64> = all
        .iter_mut()
        .map(|op| op.as_mut() as &mut dyn FnMut() -> f64)
        .collect();
    let pinned = Pinned::apart(server_pid);
    let turns = in_turns(blocks, &mut ops);
    let pinned = pinned.is_some();
    drop(ops);
    drop(all);
    PeerTurns {
        turns,
        pinned,
        libraries: libraries.into_inner(),
    }
}
