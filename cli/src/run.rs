//! `dlock run`: take the lock, run the command while holding it, release it when the command
//! ends, whatever its end.
//!
//! While the command runs, `dlock` waits for three things at once: the command's exit, a
//! termination signal (passed on to the command, which decides when to stop), and the lock's
//! lease events (a lost lease stops the command: SIGTERM, then SIGKILL after `--kill-after`).

use std::time::{Duration, Instant};

use crossbeam_channel::{never, select, Receiver};
use dlock::{FencedLockGuard, LeaseChange, LeaseEvent, LockClient, LockError, LockGuard};
use nix::sys::signal::Signal;

use crate::args::{KindArgs, RunArgs};
use crate::child::{exit_code, Child};
use crate::exit_code::{Failure, NOT_ACQUIRED, UNAVAILABLE};
use crate::signals::{self, Received};

/// The environment variable holding the lock's name, for the command.
pub const NAME_VARIABLE: &str = "DLOCK_LOCK_NAME";
/// The environment variable holding the fencing token of the hold (`--fenced`).
pub const TOKEN_VARIABLE: &str = "DLOCK_FENCING_TOKEN";

/// Runs `dlock run`; the exit code, or why it failed.
pub fn run(url: &str, args: &RunArgs) -> Result<i32, Failure> {
    let backend = crate::connect::backend(url)?;
    let client = crate::connect::client(backend, args.lease)?;
    // Subscribed before the acquire, so no event of this hold can be missed.
    let events = client.lease_events();
    let Some(hold) = acquire(&client, args)? else {
        return Err(Failure::new(
            NOT_ACQUIRED,
            format!(
                "lock {:?} not acquired within {}",
                args.name,
                human(args.wait.unwrap_or_default())
            ),
        ));
    };
    let mut env = vec![(NAME_VARIABLE, args.name.clone())];
    if let Some(token) = hold.token {
        env.push((TOKEN_VARIABLE, token.to_string()));
    }
    let signals = signals::catch_termination().map_err(|error| {
        Failure::new(
            UNAVAILABLE,
            format!("cannot catch signals to pass them to the command: {error}"),
        )
    })?;
    let child = match Child::spawn(&args.command, &env) {
        Ok(child) => child,
        Err(failure) => {
            let _ = release(hold.guard, &args.name);
            return Err(failure);
        }
    };
    let ended = supervise(&child, &signals, &events, args);
    let released = release(hold.guard, &args.name);
    match (ended.lost, released) {
        (Some(reason), _) => Err(Failure::new(
            UNAVAILABLE,
            format!(
                "lost lock {:?} while the command ran ({reason}); the command was stopped \
                 (its own exit code was {})",
                args.name, ended.code
            ),
        )),
        (None, Err(error)) => Err(Failure::new(
            UNAVAILABLE,
            format!(
                "lock {:?} was no longer held when the command ended ({error}); another holder \
                 may have run at the same time (the command's exit code was {})",
                args.name, ended.code
            ),
        )),
        (None, Ok(())) => Ok(ended.code),
    }
}

/// A hold of any kind, and its fencing token when fenced.
struct Hold {
    guard: Guard,
    token: Option<u64>,
}

/// The guard of a hold: every kind's guard is a `LockGuard` but the fenced lock's.
enum Guard {
    Plain(LockGuard),
    Fenced(FencedLockGuard),
}

impl Guard {
    fn unlock(self) -> Result<(), LockError> {
        match self {
            Guard::Plain(guard) => guard.unlock(),
            Guard::Fenced(guard) => guard.unlock(),
        }
    }
}

fn acquire(client: &LockClient, args: &RunArgs) -> Result<Option<Hold>, LockError> {
    let name = args.name.as_str();
    let KindArgs {
        fair,
        read,
        write,
        fenced,
    } = args.kind;
    if fenced {
        let lock = client.fenced_lock(name);
        let guard = match args.wait {
            None => Some(lock.lock()?),
            Some(wait) => lock.try_lock_for(wait)?,
        };
        return Ok(guard.map(|guard| Hold {
            token: Some(guard.token()),
            guard: Guard::Fenced(guard),
        }));
    }
    let guard = if fair {
        let lock = client.fair_lock(name);
        match args.wait {
            None => Some(lock.lock()?),
            Some(wait) => lock.try_lock_for(wait)?,
        }
    } else if read || write {
        let lock = client.read_write_lock(name);
        if read {
            let lock = lock.read_lock();
            match args.wait {
                None => Some(lock.lock()?),
                Some(wait) => lock.try_lock_for(wait)?,
            }
        } else {
            let lock = lock.write_lock();
            match args.wait {
                None => Some(lock.lock()?),
                Some(wait) => lock.try_lock_for(wait)?,
            }
        }
    } else {
        let lock = client.lock(name);
        match args.wait {
            None => Some(lock.lock()?),
            Some(wait) => lock.try_lock_for(wait)?,
        }
    };
    Ok(guard.map(|guard| Hold {
        guard: Guard::Plain(guard),
        token: None,
    }))
}

/// How the command ended: its exit code, and the lease loss that stopped it, if one did.
struct Ended {
    code: i32,
    lost: Option<String>,
}

fn supervise(
    child: &Child,
    signals: &Receiver<Received>,
    events: &Receiver<LeaseEvent>,
    args: &RunArgs,
) -> Ended {
    let mut lost: Option<String> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        let timeout = kill_at.map_or(never(), |at| crossbeam_channel::at(at.max(Instant::now())));
        select! {
            recv(child.exited()) -> status => {
                let code = match status {
                    Ok(Ok(status)) => exit_code(status),
                    Ok(Err(error)) => {
                        eprintln!("dlock: cannot wait for the command: {error}");
                        UNAVAILABLE
                    }
                    Err(_) => UNAVAILABLE,
                };
                return Ended { code, lost };
            }
            recv(signals) -> received => {
                if let Ok(received) = received {
                    // The terminal's signals reach the command directly (same process group).
                    if received.from_process {
                        child.signal(received.signal);
                    }
                }
            }
            recv(events) -> event => match event {
                Ok(event) if *event.name == *args.name => match event.change {
                    LeaseChange::Lost { reason } if lost.is_none() => {
                        eprintln!(
                            "dlock: lost lock {:?}: {reason}; sending SIGTERM to the command \
                             (SIGKILL in {})",
                            args.name,
                            human(args.kill_after)
                        );
                        lost = Some(reason.to_string());
                        child.signal(Signal::SIGTERM);
                        kill_at = Some(Instant::now() + args.kill_after);
                    }
                    LeaseChange::RenewalFailed { error, deadline } => eprintln!(
                        "dlock: renewing lock {:?} failed ({error}); retrying, the lease holds \
                         for {} more",
                        args.name,
                        human(deadline.saturating_duration_since(Instant::now()))
                    ),
                    LeaseChange::RenewalRecovered { failures } => eprintln!(
                        "dlock: renewing lock {:?} works again after {failures} failures",
                        args.name
                    ),
                    _ => {}
                },
                Ok(_) => {}
                Err(_) => {}
            },
            recv(timeout) -> _ => {
                eprintln!(
                    "dlock: the command did not stop within {} of SIGTERM; sending SIGKILL",
                    human(args.kill_after)
                );
                child.signal(Signal::SIGKILL);
                kill_at = None;
            }
        }
    }
}

/// Releases the hold; a failure other than the lock being gone is reported and otherwise
/// ignored (the lock frees itself when its lease runs out).
fn release(guard: Guard, name: &str) -> Result<(), LockError> {
    match guard.unlock() {
        Ok(()) => Ok(()),
        Err(error) if error.is_not_held() => Err(error),
        Err(error) => {
            eprintln!(
                "dlock: could not release lock {name:?} ({error}); it frees itself when its \
                 lease runs out"
            );
            Ok(())
        }
    }
}

/// `1.5s`, `250ms`, `2m 30s`: durations in messages.
pub fn human(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1000 {
        format!("{millis}ms")
    } else if millis < 60_000 {
        format!("{:.1}s", duration.as_secs_f64())
    } else {
        let seconds = duration.as_secs();
        format!("{}m {:02}s", seconds / 60, seconds % 60)
    }
}
