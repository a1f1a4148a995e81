//! The workspace's test harness (real `redis-server` processes, Redisson's scripts), and a
//! way to run the `dlock` binary against one server.

#![allow(dead_code)]

pub use dlock_test_support::{
    etcd_server, postgres_server, redis_server, redisson, sentinel, tcp_proxy,
};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use redis_server::RedisServer;

/// `dlock` with `REDIS_URL` pointing at `server`.
pub fn dlock(server: &RedisServer) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dlock"));
    command
        .env("REDIS_URL", server.url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `dlock` with `args` to its end.
pub fn run(server: &RedisServer, args: &[&str]) -> Output {
    dlock(server)
        .args(args)
        .output()
        .expect("the dlock binary runs")
}

/// The exit code of a finished `dlock`.
pub fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// Its stdout, as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Its stderr, as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The names of the entries of `dlock list --json`'s answer, in order.
pub fn listed_names(listed: &serde_json::Value) -> Vec<&str> {
    listed
        .as_array()
        .expect("an array")
        .iter()
        .map(|entry| entry["name"].as_str().expect("a name"))
        .collect()
}

/// Waits (at most `bound`) until `ready` holds; panics with `what` otherwise.
pub fn wait_until(what: &str, bound: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A fresh scratch directory for one test, removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A new empty directory under the target directory.
    pub fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "dlock-cli-{test}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Scratch(dir)
    }

    /// `name` inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sends `signal` (`TERM`, `KILL`, ...) to process `pid` with `kill`.
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Whether process `pid` is running (not gone, not a zombie waiting to be reaped).
pub fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// Reads a process id a command wrote to `file`, once it is there.
pub fn read_pid(file: &Path) -> u32 {
    wait_until("the command wrote its pid", Duration::from_secs(10), || {
        std::fs::read_to_string(file).is_ok_and(|text| text.trim().parse::<u32>().is_ok())
    });
    std::fs::read_to_string(file)
        .expect("the pid file")
        .trim()
        .parse()
        .expect("a pid")
}
