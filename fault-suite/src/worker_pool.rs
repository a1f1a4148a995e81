//! The worker processes of one run, started from this program and stopped by their own pids.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::worker::{WorkerSpec, WORKER_ENV};

pub struct WorkerPool {
    spec: WorkerSpec,
    dir: PathBuf,
    children: Vec<Child>,
    /// Pids the suite killed on purpose (their exit is not a crash).
    killed: Vec<u32>,
    logs: Vec<PathBuf>,
}

/// How the workers ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    /// Workers that had to be killed because they did not stop in time.
    pub hung: usize,
    /// Workers that exited with a panic (101) or another failure the suite did not cause.
    pub crashed: usize,
    /// How many of those were panics.
    pub panicked: usize,
}

impl WorkerPool {
    /// Starts `count` workers with `spec` (each with its own log file in `dir`).
    pub fn start(spec: WorkerSpec, dir: &Path, count: usize) -> std::io::Result<WorkerPool> {
        let mut pool = WorkerPool {
            spec,
            dir: dir.to_owned(),
            children: Vec::new(),
            killed: Vec::new(),
            logs: Vec::new(),
        };
        for _ in 0..count {
            pool.spawn()?;
        }
        Ok(pool)
    }

    /// Starts one more worker.
    pub fn spawn(&mut self) -> std::io::Result<u32> {
        let log = self
            .dir
            .join(format!("worker-{}.jsonl", self.children.len()));
        let mut spec = self.spec.clone();
        spec.log_path = log.display().to_string();
        let child = Command::new(std::env::current_exe()?)
            .env(WORKER_ENV, spec.to_json())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        let pid = child.id();
        self.children.push(child);
        self.logs.push(log);
        Ok(pid)
    }

    /// Whether `pid` is one of this run's live workers.
    pub fn owns(&self, pid: u32) -> bool {
        self.children.iter().any(|child| child.id() == pid) && !self.killed.contains(&pid)
    }

    /// Any live worker's pid.
    pub fn any(&self) -> Option<u32> {
        self.children
            .iter()
            .map(Child::id)
            .find(|pid| !self.killed.contains(pid))
    }

    /// Sends `signal` (`-STOP`, `-CONT`, `-KILL`) to worker `pid`.
    pub fn signal(&mut self, pid: u32, signal: &str) -> Result<(), String> {
        if !self.owns(pid) {
            return Err(format!("{pid} is not a live worker of this run"));
        }
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .map_err(|error| format!("kill {signal} {pid}: {error}"))?;
        if !status.success() {
            return Err(format!("kill {signal} {pid} failed"));
        }
        if signal == "-KILL" {
            self.killed.push(pid);
        }
        Ok(())
    }

    /// Waits for every worker to exit until `deadline`, then kills those left.
    pub fn finish(mut self, deadline: Instant) -> (Ending, Vec<PathBuf>) {
        let mut ending = Ending::default();
        for child in &mut self.children {
            let pid = child.id();
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => break None,
                }
            };
            match status {
                None => {
                    ending.hung += 1;
                    let _ = child.kill();
                    let _ = child.wait();
                }
                Some(_) if self.killed.contains(&pid) => {}
                Some(status) if status.success() => {}
                Some(status) => {
                    ending.crashed += 1;
                    if status.code() == Some(101) {
                        ending.panicked += 1;
                    }
                }
            }
        }
        (ending, std::mem::take(&mut self.logs))
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        for child in &mut self.children {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
