//! `dlock run`: take the lock, run the command while holding it, release it once every process
//! of the command's job has ended, whatever their end.
//!
//! The command runs as a process group of its own under a keeper ([`crate::job`]), which kills
//! the whole job (on Linux, every process below it) if `dlock` dies. While it runs,
//! [`crate::supervise`] passes signals on to the group and stops the job before the lease can
//! run out when renewals stop working.

use std::time::{Duration, Instant};

use dlocks::{FencedLockGuard, LockClient, LockError, LockGuard, Permit};

use crate::args::{KindArgs, RunArgs};
use crate::connect::{Access, Target};
use crate::exit_code::{Failure, NOT_ACQUIRED, UNAVAILABLE};
use crate::job::Job;
use crate::supervise::{supervise, Ended, Lease};

/// The environment variable holding the lock's name, for the command.
pub const NAME_VARIABLE: &str = "DLOCK_LOCK_NAME";
/// The environment variable holding the fencing token of the hold (`--fenced`).
pub const TOKEN_VARIABLE: &str = "DLOCK_FENCING_TOKEN";
/// The environment variable holding the permit's id (`--permits`).
pub const PERMIT_VARIABLE: &str = "DLOCK_PERMIT_ID";

/// Runs `dlock run`; the exit code, or why it failed.
pub fn run(target: &Target, args: &RunArgs) -> Result<i32, Failure> {
    if let Some(warning) = args
        .kill_after_flag
        .and_then(|given| kill_after_warning(args.lease, given))
    {
        eprintln!("dlock: warning: {warning}");
    }
    let store = crate::connect::backend(target, Access::Take)?.shared();
    // Leases are counted on the backend's clock (one that counts suspended time).
    let clock = store.clock();
    let client = crate::connect::client(store, args.lease)?;
    // Subscribed before the acquire, so no event of this hold can be missed.
    let events = client.lease_events();
    let Some(hold) = acquire(&client, args)? else {
        return Err(Failure::new(
            NOT_ACQUIRED,
            format!(
                "lock {} not acquired within {}",
                crate::escape::quoted(&args.name),
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
    let signals = crate::signals::catch_termination().map_err(|error| {
        Failure::new(
            UNAVAILABLE,
            format!("cannot catch signals to pass them to the command: {error}"),
        )
    })?;
    let job = match Job::start(&args.command, &env) {
        Ok(job) => job,
        Err(failure) => {
            let _ = release(hold.guard, &args.name);
            return Err(failure);
        }
    };
    let lease = Lease {
        deadline: &|| hold.guard.lease_deadline(),
        now: &|| clock.now(),
    };
    let ended = supervise(job, &lease, &signals, &events, args);
    let released = release(hold.guard, &args.name);
    outcome(&ended, released, &args.name)
}

/// `dlock run`'s exit: the command's code, unless the lock was lost or at risk while it ran.
fn outcome(ended: &Ended, released: Result<(), LockError>, name: &str) -> Result<i32, Failure> {
    let name = crate::escape::quoted(name);
    let code = ended.code;
    if ended.keeper_lost {
        return Err(Failure::new(
            UNAVAILABLE,
            format!(
                "the keeper of the command's job ended before the job did, so the job was \
                 killed while it held lock {name} (its own exit code was {code})"
            ),
        ));
    }
    match (&ended.lost, released) {
        (Some(reason), _) => Err(Failure::new(
            UNAVAILABLE,
            format!(
                "lost lock {name} while the command ran ({reason}); the command was stopped \
                 (its own exit code was {code})"
            ),
        )),
        (None, _) if ended.stopped => Err(Failure::new(
            UNAVAILABLE,
            format!(
                "renewing lock {name} kept failing, so the command was stopped before the lease \
                 could run out (its own exit code was {code})"
            ),
        )),
        (None, Err(error)) => Err(Failure::new(
            UNAVAILABLE,
            format!(
                "lock {name} was no longer held when the command ended ({error}); another holder \
                 may have run at the same time (the command's exit code was {code})"
            ),
        )),
        (None, Ok(())) => Ok(code),
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
    /// Until when the lease is known to last (renewals move it on).
    fn lease_deadline(&self) -> Instant {
        match self {
            Guard::Plain(guard) => guard.lease_deadline(),
            Guard::Fenced(guard) => guard.lease_deadline(),
            Guard::Permit(permit) => permit.lease_deadline(),
        }
    }

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

/// How long before its lease runs out the job gets SIGKILL when the lease cannot be renewed:
/// a twentieth of the lease, at most 0.5 s, for the processes to be gone (and the terminal
/// given back) before another holder can take the lock.
pub fn kill_margin(lease: Duration) -> Duration {
    (lease / 20).min(Duration::from_millis(500))
}

/// How much of the lease may be left when `run` finds out renewals are not working: the
/// renewal that fails first is sent a third of the lease after the last one that worked, and
/// fails at once or after the response timeout; and a renewal half a lease overdue counts as
/// failing whatever it is doing.
fn left_when_at_risk(lease: Duration) -> Duration {
    (lease * 2 / 3)
        .saturating_sub(crate::connect::RESPONSE_TIMEOUT)
        .max(lease / 2)
}

/// How long `--kill-after` may be with `lease`: what is left between finding out that renewals
/// are not working and the SIGKILL due before the lease runs out.
fn kill_after_room(lease: Duration) -> Duration {
    left_when_at_risk(lease).saturating_sub(kill_margin(lease))
}

/// The default `--kill-after`.
const DEFAULT_KILL_AFTER: Duration = Duration::from_secs(10);

impl RunArgs {
    /// `--kill-after` as given, else 10 s or what fits in the lease when that is less.
    pub fn kill_after(&self) -> Duration {
        self.kill_after_flag
            .unwrap_or_else(|| DEFAULT_KILL_AFTER.min(kill_after_room(self.lease)))
    }
}

/// The warning `run` prints at start when a `--kill-after` given does not fit in the lease (see
/// [`kill_after_room`]).
fn kill_after_warning(lease: Duration, kill_after: Duration) -> Option<String> {
    let left = kill_after_room(lease);
    (kill_after > left).then(|| {
        format!(
            "--kill-after {} does not fit in --lease {}: as little as {} may be left when \
             renewals stop working (see --help); use a longer --lease or a shorter --kill-after",
            human(kill_after),
            human(lease),
            human(left),
        )
    })
}

/// Releases the hold; a failure other than the lock being gone is reported and otherwise
/// ignored (the lock frees itself when its lease runs out).
fn release(guard: Guard, name: &str) -> Result<(), LockError> {
    match guard.unlock() {
        Ok(()) => Ok(()),
        Err(error) if error.is_not_held() => Err(error),
        Err(error) => {
            eprintln!(
                "dlock: could not release lock {} ({error}); it frees itself when its lease \
                 runs out",
                crate::escape::quoted(name)
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
