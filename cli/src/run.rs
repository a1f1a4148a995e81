//! `dlock run`: take the lock, run the command while holding it, release it when the command
//! ends, whatever its end.
//!
//! While the command runs, `dlock` waits for three things at once: the command's exit, a
//! termination signal (passed on to the command, which decides when to stop), and the lock's
//! lease events. Renewals that keep failing put the lease at risk: the command gets SIGTERM
//! once only `--kill-after` of the lease is left, and SIGKILL when it runs out, so it has
//! stopped before another holder can take the lock. A lease lost at once (force-unlocked,
//! taken over) stops the command with SIGTERM, then SIGKILL after `--kill-after`.

use std::time::{Duration, Instant};

use crossbeam_channel::{never, select, Receiver};
use dlocks::{FencedLockGuard, LeaseChange, LeaseEvent, LockClient, LockError, LockGuard, Permit};
use nix::sys::signal::Signal;

use crate::args::{KindArgs, RunArgs};
use crate::child::{exit_code, Child};
use crate::exit_code::{Failure, NOT_ACQUIRED, UNAVAILABLE};
use crate::signals::{self, Received};

/// The environment variable holding the lock's name, for the command.
pub const NAME_VARIABLE: &str = "DLOCK_LOCK_NAME";
/// The environment variable holding the fencing token of the hold (`--fenced`).
pub const TOKEN_VARIABLE: &str = "DLOCK_FENCING_TOKEN";
/// The environment variable holding the permit's id (`--permits`).
pub const PERMIT_VARIABLE: &str = "DLOCK_PERMIT_ID";

/// Runs `dlock run`; the exit code, or why it failed.
pub fn run(url: &str, args: &RunArgs) -> Result<i32, Failure> {
    if let Some(warning) = kill_after_warning(args.lease, args.kill_after) {
        eprintln!("dlock: warning: {warning}");
    }
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
    if let Guard::Permit(permit) = &hold.guard {
        env.push((PERMIT_VARIABLE, permit.id().to_owned()));
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
        (None, _) if ended.stopped => Err(Failure::new(
            UNAVAILABLE,
            format!(
                "renewing lock {:?} kept failing, so the command was stopped before the lease \
                 could run out (its own exit code was {})",
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

/// The guard of a hold: every lock kind's guard is a `LockGuard` but the fenced lock's; a
/// semaphore's is its permit.
enum Guard {
    Plain(LockGuard),
    Fenced(FencedLockGuard),
    Permit(Permit),
}

impl Guard {
    fn unlock(self) -> Result<(), LockError> {
        match self {
            Guard::Plain(guard) => guard.unlock(),
            Guard::Fenced(guard) => guard.unlock(),
            Guard::Permit(permit) => permit.release(),
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
        permits,
    } = args.kind;
    if let Some(permits) = permits {
        let semaphore = client.semaphore(name);
        semaphore.try_set_permits(permits)?;
        let permit = match args.wait {
            None => Some(semaphore.acquire()?),
            Some(wait) => semaphore.try_acquire_for(wait)?,
        };
        return Ok(permit.map(|permit| Hold {
            guard: Guard::Permit(permit),
            token: None,
        }));
    }
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

/// The warning `run` prints at start when `kill_after` does not fit in what is left of
/// `lease` once renewals are known to fail: the renewal that fails first is sent a third of
/// the lease after the last one that worked, and fails at once or after the response timeout.
pub fn kill_after_warning(lease: Duration, kill_after: Duration) -> Option<String> {
    let left = (lease * 2 / 3).saturating_sub(crate::connect::RESPONSE_TIMEOUT);
    (kill_after > left).then(|| {
        format!(
            "--kill-after {} does not fit in --lease {}: when renewals start failing, as \
             little as {} of the lease may be left (two thirds of it, less the {} response \
             timeout), so the command would get SIGTERM at once and SIGKILL when the lease runs \
             out, less than --kill-after later; use a longer --lease or a shorter --kill-after",
            human(kill_after),
            human(lease),
            human(left),
            human(crate::connect::RESPONSE_TIMEOUT)
        )
    })
}

/// How the command ended: its exit code, the lease loss that stopped it if one did, and
/// whether `dlock` stopped it because renewals kept failing.
struct Ended {
    code: i32,
    lost: Option<String>,
    stopped: bool,
}

/// Where stopping the command stands.
#[derive(Default)]
struct Stop {
    /// The lease's deadline while renewals are failing.
    at_risk: Option<Instant>,
    /// When `dlock` sent SIGTERM, if it did.
    term_sent: Option<Instant>,
    /// When SIGKILL is due.
    kill_at: Option<Instant>,
    /// Why the lease was lost, if it was.
    lost: Option<String>,
}

impl Stop {
    /// When SIGTERM is due: `kill_after` before the deadline of a lease at risk.
    fn term_at(&self, kill_after: Duration) -> Option<Instant> {
        match (self.term_sent, self.at_risk) {
            (None, Some(deadline)) => Some(deadline.checked_sub(kill_after).unwrap_or(deadline)),
            _ => None,
        }
    }
}

fn supervise(
    child: &Child,
    signals: &Receiver<Received>,
    events: &Receiver<LeaseEvent>,
    args: &RunArgs,
) -> Ended {
    let mut stop = Stop::default();
    loop {
        let next = stop
            .term_at(args.kill_after)
            .into_iter()
            .chain(stop.kill_at)
            .min();
        let timeout = next.map_or(never(), |at| crossbeam_channel::at(at.max(Instant::now())));
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
                let stopped = stop.term_sent.is_some();
                return Ended { code, lost: stop.lost, stopped };
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
                    LeaseChange::Lost { reason } if stop.lost.is_none() => {
                        let now = Instant::now();
                        stop.lost = Some(reason.to_string());
                        let kill_at = now + args.kill_after;
                        if stop.term_sent.is_none() {
                            eprintln!(
                                "dlock: lost lock {:?}: {reason}; sending SIGTERM to the \
                                 command (SIGKILL in {})",
                                args.name,
                                human(args.kill_after)
                            );
                            child.signal(Signal::SIGTERM);
                            stop.term_sent = Some(now);
                            stop.kill_at = Some(kill_at);
                        } else {
                            eprintln!("dlock: lost lock {:?}: {reason}", args.name);
                            stop.kill_at = Some(stop.kill_at.map_or(kill_at, |at| at.min(kill_at)));
                        }
                    }
                    LeaseChange::RenewalFailed { error, deadline } => {
                        eprintln!(
                            "dlock: renewing lock {:?} failed ({error}); retrying, the lease \
                             holds for {} more",
                            args.name,
                            human(deadline.saturating_duration_since(Instant::now()))
                        );
                        stop.at_risk = Some(deadline);
                        if stop.term_sent.is_some() && stop.lost.is_none() {
                            stop.kill_at = Some(deadline);
                        }
                    }
                    LeaseChange::RenewalRecovered { failures } => {
                        eprintln!(
                            "dlock: renewing lock {:?} works again after {failures} failures",
                            args.name
                        );
                        stop.at_risk = None;
                        // A command already told to stop gets its whole --kill-after.
                        if let (Some(sent), None) = (stop.term_sent, &stop.lost) {
                            stop.kill_at = Some(sent + args.kill_after);
                        }
                    }
                    _ => {}
                },
                Ok(_) => {}
                Err(_) => {}
            },
            recv(timeout) -> _ => {
                let now = Instant::now();
                match (stop.term_at(args.kill_after), stop.at_risk) {
                    (Some(term_at), Some(deadline)) if term_at <= now => {
                        eprintln!(
                            "dlock: renewing lock {:?} keeps failing and its lease runs out in \
                             {}; sending SIGTERM to the command (SIGKILL when the lease runs \
                             out), so that it has stopped before another holder can take the \
                             lock",
                            args.name,
                            human(deadline.saturating_duration_since(now))
                        );
                        child.signal(Signal::SIGTERM);
                        stop.term_sent = Some(now);
                        stop.kill_at = Some(deadline);
                    }
                    _ if stop.kill_at.is_some_and(|at| at <= now) => {
                        match stop.term_sent {
                            Some(sent) if stop.lost.is_none() => eprintln!(
                                "dlock: the command did not stop within {} of SIGTERM, and the \
                                 lease of lock {:?} runs out; sending SIGKILL",
                                human(now.saturating_duration_since(sent)),
                                args.name
                            ),
                            _ => eprintln!(
                                "dlock: the command did not stop within {} of SIGTERM; sending \
                                 SIGKILL",
                                human(args.kill_after)
                            ),
                        }
                        child.signal(Signal::SIGKILL);
                        stop.kill_at = None;
                    }
                    _ => {}
                }
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
