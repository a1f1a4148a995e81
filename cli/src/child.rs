//! The command `dlock run` starts: spawned with the lock's details in its environment, waited
//! for on a thread of its own (so the lock's events and signals are handled meanwhile), and
//! signalled by its process id.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};

use crossbeam_channel::Receiver;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::exit_code::{Failure, CANNOT_RUN, NOT_FOUND};

/// A running command.
pub struct Child {
    pid: Pid,
    exited: Receiver<io::Result<ExitStatus>>,
}

impl Child {
    /// Starts `command` (program and arguments) with `env` added to `dlock`'s environment. A
    /// command that is not found exits with 127, one that cannot be started with 126.
    pub fn spawn(command: &[OsString], env: &[(&str, String)]) -> Result<Child, Failure> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| Failure::new(crate::exit_code::USAGE, "no command to run"))?;
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().map(|(key, value)| (key, value)))
            .spawn()
            .map_err(|error| {
                let code = if error.kind() == io::ErrorKind::NotFound {
                    NOT_FOUND
                } else {
                    CANNOT_RUN
                };
                Failure::new(code, format!("cannot run {program:?}: {error}"))
            })?;
        let pid = Pid::from_raw(child.id() as i32);
        let (sender, exited) = crossbeam_channel::bounded(1);
        let waiter = std::thread::Builder::new()
            .name("dlock-child".into())
            .spawn(move || {
                let _ = sender.send(child.wait());
            });
        if let Err(error) = waiter {
            let _ = kill(pid, Signal::SIGKILL);
            return Err(Failure::new(
                CANNOT_RUN,
                format!("cannot start a thread to wait for the command: {error}"),
            ));
        }
        Ok(Child { pid, exited })
    }

    /// Receives the command's exit status once it has ended.
    pub fn exited(&self) -> &Receiver<io::Result<ExitStatus>> {
        &self.exited
    }

    /// Sends `signal` to the command. A command that has already ended is not an error.
    pub fn signal(&self, signal: Signal) {
        if let Err(error) = kill(self.pid, signal) {
            if error != nix::errno::Errno::ESRCH {
                eprintln!("dlock: cannot send {signal} to the command: {error}");
            }
        }
    }
}

/// The code a shell reports for `status`: the exit code, or 128 + the number of the signal
/// that ended the command.
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => CANNOT_RUN,
    }
}
