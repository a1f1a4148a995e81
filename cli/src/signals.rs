//! The termination signals `dlock run` receives while its command runs, with their senders,
//! so they can be passed on to the command.

use std::io;

use crossbeam_channel::Receiver;
use nix::sys::signal::Signal;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;

/// A received signal.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Which signal.
    pub signal: Signal,
    /// Whether a process sent it with `kill` (not the terminal, which sends its signals to the
    /// whole foreground process group, the command included).
    pub from_process: bool,
}

/// Catches SIGINT, SIGTERM, SIGHUP and SIGQUIT from now on (they no longer end `dlock`) and
/// delivers them on the returned channel.
pub fn catch_termination() -> io::Result<Receiver<Received>> {
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])?;
    let (sender, received) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("dlock-signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                let Ok(signal) = Signal::try_from(origin.signal) else {
                    continue;
                };
                let received = Received {
                    signal,
                    from_process: origin.process.is_some(),
                };
                if sender.send(received).is_err() {
                    break;
                }
            }
        })?;
    Ok(received)
}
