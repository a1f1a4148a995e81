//! The job `dlock run` owns: the command and every process it starts, as one process group
//! (and, on Linux, every descendant of the keeper, those that left the group included),
//! started and watched by a keeper process (see [`crate::keeper`]).
//!
//! `dlock` cannot put a process in a group and watch it die with it without `unsafe` code
//! between `fork` and `exec`, so a small keeper does it: `dlock` runs itself again as the
//! keeper, connected to it by a Unix socket. The keeper starts the command as the leader of a
//! process group of its own, tells `dlock` the group, waits for the command, and tells
//! `dlock` once no process of the job is left. If `dlock` dies (its end of the socket
//! closes), the keeper kills the whole job at once; if `dlock` stops answering past the
//! instant it last said the job must be dead by, the keeper kills it then.
//!
//! The protocol is one line per message. Keeper to `dlock`: `group <pgid>`, `failed <code>
//! <message>`, `exited <code>`, `killed` (its kill instant passed), `empty`. `dlock` to
//! keeper: `kill-in <ms>` (the job must be dead within this long unless a newer `kill-in`
//! comes), `kill` (kill every process of the job now).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::exit_code::{Failure, CANNOT_RUN};

/// The first argument that makes `dlock` the keeper of a job (never typed by a user).
pub const KEEPER_ARG: &str = "__dlock-job-keeper";

/// How long the keeper may take to start and connect.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a group whose keeper is gone is checked for processes left.
pub const EMPTY_POLL: Duration = Duration::from_millis(20);

/// What happened to the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEvent {
    /// The command (the group's leader) ended with this code (128 + N for signal N).
    Exited(i32),
    /// The keeper killed the job: the instant `dlock` last gave it passed.
    KilledByKeeper,
    /// The keeper ended before the job did; the group was killed.
    KeeperLost,
    /// No process of the job is left.
    Empty,
}

/// A running job.
pub struct Job {
    group: Pid,
    control: UnixStream,
    events: Receiver<JobEvent>,
    /// The last instant the keeper was told, to tell it again only when it moved.
    told_kill_at: Option<Instant>,
}

impl Job {
    /// Starts `command` (program and arguments), with `env` added to `dlock`'s environment, as
    /// a process group of its own under a keeper. A command that is not found fails with 127,
    /// one that cannot be started with 126.
    pub fn start(command: &[OsString], env: &[(&str, String)]) -> Result<Job, Failure> {
        let cannot = |what: &str, error: &dyn std::fmt::Display| {
            Failure::new(CANNOT_RUN, format!("cannot {what}: {error}"))
        };
        let socket =
            SocketDir::new().map_err(|error| cannot("make the keeper's socket", &error))?;
        let listener = UnixListener::bind(socket.path())
            .map_err(|error| cannot("make the keeper's socket", &error))?;
        let mut keeper = Command::new(own_binary())
            .arg(KEEPER_ARG)
            .arg(socket.path())
            .arg("--")
            .args(command)
            .envs(env.iter().map(|(key, value)| (key, value)))
            .spawn()
            .map_err(|error| cannot("start the job's keeper", &error))?;
        let control = match accept(&listener, &mut keeper) {
            Ok(control) => control,
            Err(error) => {
                let _ = keeper.kill();
                let _ = keeper.wait();
                return Err(cannot("start the job's keeper", &error));
            }
        };
        drop(socket);
        let mut lines = BufReader::new(
            control
                .try_clone()
                .map_err(|error| cannot("read from the job's keeper", &error))?,
        );
        let first = read_line(&mut lines).unwrap_or_default();
        let group = match first.split_once(' ') {
            Some(("group", pgid)) => pgid.parse().ok().map(Pid::from_raw),
            Some(("failed", failure)) => {
                let _ = keeper.wait();
                let (code, message) = failure.split_once(' ').unwrap_or((failure, ""));
                return Err(Failure::new(code.parse().unwrap_or(CANNOT_RUN), message));
            }
            _ => None,
        };
        let Some(group) = group else {
            let _ = keeper.kill();
            let _ = keeper.wait();
            return Err(Failure::new(
                CANNOT_RUN,
                "the job's keeper did not start the command",
            ));
        };
        let (sender, events) = crossbeam_channel::unbounded();
        std::thread::Builder::new()
            .name("dlock-job".into())
            .spawn(move || follow(lines, keeper, group, &sender))
            .map_err(|error| {
                let _ = killpg(group, Signal::SIGKILL);
                cannot("start a thread to follow the job", &error)
            })?;
        Ok(Job {
            group,
            control,
            events,
            told_kill_at: None,
        })
    }

    /// What happens to the job, ending with [`JobEvent::Empty`].
    pub fn events(&self) -> &Receiver<JobEvent> {
        &self.events
    }

    /// Sends `signal` to the job's process group, as a shell's job control does: a process
    /// that left the group (`timeout` among them) chose to take signals its own way. A group
    /// already gone is not an error.
    pub fn signal(&self, signal: Signal) {
        if let Err(error) = killpg(self.group, signal) {
            if error != nix::errno::Errno::ESRCH {
                eprintln!("dlock: cannot send {signal} to the command's process group: {error}");
            }
        }
    }

    /// Kills every process of the job: the group at once, and through the keeper, which alone
    /// sees them, its descendants that left the group.
    pub fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        // A keeper that is gone has killed the job already (`KeeperLost` follows).
        let _ = writeln!(self.control, "kill");
    }

    /// Tells the keeper to kill the job `within` from now unless told otherwise first: what
    /// stops the job if `dlock` itself stops (a debugger, SIGSTOP, a machine swapping) while
    /// the lease runs out. Told again only when the instant moved, and not once it is due.
    pub fn kill_in(&mut self, within: Duration) {
        let now = Instant::now();
        let at = now + within;
        // A kill already due was told once: the keeper goes on killing until the job is gone.
        if within.is_zero() && self.told_kill_at.is_some_and(|told| told <= now) {
            return;
        }
        let moved = self
            .told_kill_at
            .is_none_or(|told| told.max(at) - told.min(at) >= Duration::from_millis(1));
        if !moved {
            return;
        }
        self.told_kill_at = Some(at);
        // A keeper that is gone has killed the group already (`KeeperLost` follows).
        let _ = writeln!(self.control, "kill-in {}", within.as_millis());
    }
}

/// Reads the keeper's messages into `events` until the group is empty; kills the group and
/// waits for it to empty when the keeper ends first.
fn follow(
    mut lines: BufReader<UnixStream>,
    mut keeper: Child,
    group: Pid,
    events: &crossbeam_channel::Sender<JobEvent>,
) {
    while let Some(line) = read_line(&mut lines) {
        let event = match line.split_once(' ') {
            Some(("exited", code)) => JobEvent::Exited(code.parse().unwrap_or(CANNOT_RUN)),
            None if line == "killed" => JobEvent::KilledByKeeper,
            None if line == "empty" => JobEvent::Empty,
            _ => continue,
        };
        let empty = event == JobEvent::Empty;
        let _ = events.send(event);
        if empty {
            let _ = keeper.wait();
            return;
        }
    }
    let _ = keeper.wait();
    let _ = killpg(group, Signal::SIGKILL);
    let _ = events.send(JobEvent::KeeperLost);
    while killpg(group, None).is_ok() {
        std::thread::sleep(EMPTY_POLL);
    }
    crate::terminal::take_back_from(group);
    let _ = events.send(JobEvent::Empty);
}

/// The next line, without its newline; `None` at the end (or on an error).
fn read_line(lines: &mut impl BufRead) -> Option<String> {
    let mut line = String::new();
    match lines.read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end().to_owned()),
    }
}

/// The keeper's connection, once it has made it (within [`START_TIMEOUT`], and while it runs).
fn accept(listener: &UnixListener, keeper: &mut Child) -> std::io::Result<UnixStream> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
        if let Some(status) = keeper.try_wait()? {
            return Err(std::io::Error::other(format!("it ended ({status})")));
        }
        if Instant::now() >= deadline {
            return Err(std::io::Error::other("it did not connect within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// This program, to run again as the keeper: its path, or `/proc/self/exe` (the running binary)
/// when that file is gone (replaced by an upgrade meanwhile).
fn own_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .filter(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"))
}

/// A directory only this user can enter, holding the keeper's socket until it connects.
struct SocketDir(PathBuf);

impl SocketDir {
    fn new() -> std::io::Result<SocketDir> {
        let random = uuid::Uuid::new_v4().simple().to_string();
        let dir =
            std::env::temp_dir().join(format!("dlock-{}-{}", std::process::id(), &random[..12]));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(SocketDir(dir))
    }

    fn path(&self) -> PathBuf {
        self.0.join("keeper")
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
