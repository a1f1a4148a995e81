//! Signals to the servers the tests start, by process id, and what /proc tells of them.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Sends `signal` (`-STOP`, `-KILL`, ...) to process `pid`; a process that has just exited is
/// not an error here.
pub(crate) fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(signal)
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// Stops process `pid` (`SIGSTOP`) and returns once it is stopped, or has exited: a signal
/// takes effect when the process next runs, and a call made before that could still be
/// answered. A process that was exiting (a server's session whose client left) answers
/// nothing either way; under a stopped parent it stays a zombie.
pub(crate) fn stop(pid: u32) {
    signal(pid, "-STOP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !is_stopped(pid) && is_running(pid) {
        assert!(Instant::now() < deadline, "process {pid} did not stop");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The state letter of process `pid` in /proc (`R`, `S`, `T`, `Z`, ...), if it exists.
fn state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let at = stat.rfind(')')?;
    stat[at + 1..].split_whitespace().next().map(str::to_owned)
}

/// Whether process `pid` exists and has not exited (a zombie has: it holds nothing).
pub(crate) fn is_running(pid: u32) -> bool {
    state(pid).is_some_and(|state| state != "Z" && state != "X")
}

/// Whether process `pid` is stopped by a signal (state `T` in /proc).
pub(crate) fn is_stopped(pid: u32) -> bool {
    state(pid).is_some_and(|state| state == "T")
}
