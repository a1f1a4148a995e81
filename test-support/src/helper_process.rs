//! Other OS processes for multi-process tests: the test binary run again with `DLOCK_HELPER`
//! set, so the `helper` test of the module that started it plays the named role against a
//! server instead of returning.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The role a run of the test binary plays, and the server URL it plays it against, when it
/// was started as a helper; `None` in a normal test run.
pub fn helper_role() -> Option<(String, String)> {
    let role = std::env::var("DLOCK_HELPER").ok()?;
    let url = std::env::var("DLOCK_HELPER_URL").expect("DLOCK_HELPER_URL");
    Some((role, url))
}

/// A helper process, stopped by its own pid (if still running) and reaped when dropped.
pub struct Reaped(pub Child);

impl Reaped {
    /// Starts this binary as a helper process playing `role` against `url`: it runs the one
    /// test named `helper` in `module` (the module's `module_path!()`, whose first segment is the
    /// test binary's crate).
    pub fn spawn(module: &str, role: &str, url: &str) -> Reaped {
        let helper = match module.split_once("::") {
            Some((_crate, path)) => format!("{path}::helper"),
            None => "helper".to_owned(),
        };
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", &helper, "--nocapture", "--test-threads", "1"])
            .env("DLOCK_HELPER", role)
            .env("DLOCK_HELPER_URL", url)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a helper process");
        Reaped(child)
    }

    /// The helper's stdout lines, read until it exits (or until `until` matches one; then the
    /// helper must not write much more, or it fills the pipe).
    pub fn lines_until(&mut self, until: Option<&str>) -> Vec<String> {
        let stdout = self.0.stdout.take().expect("stdout");
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let done = until.is_some_and(|until| line.contains(until));
            lines.push(line);
            if done {
                break;
            }
        }
        lines
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
