//! The termination signals `dlock run` receives while its job runs, so they can be passed on
//! to the job's process group.

use std::io;

use crossbeam_channel::Receiver;
use nix::sys::signal::Signal;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

/// Catches SIGINT, SIGTERM, SIGHUP and SIGQUIT from now on (they no longer end `dlock`),
/// whoever sends them (a process, or the terminal when the job is not its foreground job), and
/// delivers them on the returned channel.
pub fn catch_termination() -> io::Result<Receiver<Signal>> {
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])?;
    let (sender, received) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("dlock-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let Ok(signal) = Signal::try_from(signal) else {
                    continue;
                };
                if sender.send(signal).is_err() {
                    break;
                }
            }
        })?;
    Ok(received)
}
