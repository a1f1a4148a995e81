//! What `dlock run` does while its job runs: it waits for the job, the signals it gets and the
//! lock's lease events at once, and keeps the job from outliving the lease.
//!
//! - Signals sent to `dlock` (SIGINT, SIGTERM, SIGHUP, SIGQUIT) go to the job's whole group;
//!   the job decides when to stop.
//! - When renewals stop working (a renewal failed, or one is half a lease overdue whatever it
//!   is doing), the group gets SIGTERM once only `--kill-after` of the lease is left, and
//!   every process of the job SIGKILL [`kill_margin`] before the lease runs out.
//! - A lease lost while it still ran (force-unlocked, taken over) gets SIGTERM at once and
//!   SIGKILL `--kill-after` later; one lost because it ran out gets SIGKILL at once.
//! - The keeper is told, each time it moves, the instant by which the job must be dead (a
//!   little after `dlock`'s own, still before the lease runs out), so the job dies then even
//!   if `dlock` itself has stopped.
//! - The lock is kept until no process of the job is left, those that left the group
//!   included.

use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};
use dlocks::{LeaseChange, LeaseEvent, LossReason};
use nix::sys::signal::Signal;

use crate::args::RunArgs;
use crate::escape::quoted;
use crate::job::{Job, JobEvent};
use crate::run::{human, kill_margin};

/// The hold's lease, on the backend's clock.
pub struct Lease<'a> {
    /// Until when the lease is known to last (renewals move it on).
    pub deadline: &'a dyn Fn() -> Instant,
    /// The backend's clock (it counts the time the machine was suspended).
    pub now: &'a dyn Fn() -> Instant,
}

/// How the job ended.
pub struct Ended {
    /// The command's exit code (128 + N when signal N ended it).
    pub code: i32,
    /// Why the lease was lost, if it was.
    pub lost: Option<String>,
    /// Whether `dlock` stopped the job because renewals stopped working.
    pub stopped: bool,
    /// Whether the keeper ended before the job (which was then killed).
    pub keeper_lost: bool,
}

/// A lease lost while the job ran.
struct Lost {
    reason: String,
    at: Instant,
    /// Whether the lease had run out (the store may have given the lock to another holder).
    ran_out: bool,
}

/// Where stopping the job stands.
#[derive(Default)]
struct Stop {
    /// A renewal failed, and none has worked since.
    renewal_failing: bool,
    /// The latest lease deadline seen, and since when it has not moved.
    deadline_seen: Option<(Instant, Instant)>,
    term_sent: Option<Instant>,
    kill_sent: bool,
    lost: Option<Lost>,
}

impl Stop {
    /// When the group gets SIGKILL: `margin` before the lease's `deadline`; `--kill-after`
    /// after SIGTERM when that comes first; `--kill-after` after a loss of a lease that still
    /// ran; at once after a loss of one that ran out.
    fn kill_at(&self, deadline: Instant, margin: Duration, kill_after: Duration) -> Instant {
        let lease_end = deadline.checked_sub(margin).unwrap_or(deadline);
        match (&self.lost, self.term_sent) {
            (Some(lost), _) if lost.ran_out => lost.at,
            (Some(lost), _) => lost.at + kill_after,
            (None, Some(sent)) => lease_end.min(sent + kill_after),
            (None, None) => lease_end,
        }
    }

    /// Notes the lease's `deadline` as seen at `now`.
    fn see(&mut self, deadline: Instant, now: Instant) {
        match self.deadline_seen {
            Some((seen, _)) if seen >= deadline => {}
            _ => self.deadline_seen = Some((deadline, now)),
        }
    }

    /// When the group gets SIGTERM, if it is due to: `--kill-after` before the deadline of a
    /// lease whose renewals stopped working.
    fn term_at(
        &self,
        deadline: Instant,
        now: Instant,
        lease: Duration,
        kill_after: Duration,
    ) -> Option<Instant> {
        if self.term_sent.is_some() || self.lost.is_some() {
            return None;
        }
        // The watchdog renews every third of the lease: a deadline that has not moved for half
        // of it means the renewal is overdue, failing or hanging on a server that does not
        // answer. (Not "less than half of the lease left": a fair lock handed over starts on
        // a short lease that the watchdog's first renewal lengthens a round trip later.)
        let overdue = self
            .deadline_seen
            .is_some_and(|(_, since)| now.saturating_duration_since(since) >= lease / 2);
        (self.renewal_failing || overdue)
            .then(|| deadline.checked_sub(kill_after).unwrap_or(deadline))
    }
}

/// Supervises `job` until no process of it is left.
pub fn supervise(
    mut job: Job,
    lease: &Lease<'_>,
    signals: &Receiver<Signal>,
    events: &Receiver<LeaseEvent>,
    args: &RunArgs,
) -> Ended {
    let name = quoted(&args.name);
    let margin = kill_margin(args.lease);
    // Often enough to see each renewal's new deadline well before the old one is near.
    let tick = (args.lease / 6).min(Duration::from_secs(1));
    let mut stop = Stop::default();
    let mut code = None;
    let mut exited_at: Option<Instant> = None;
    let mut told_lingering = false;
    let mut keeper_lost = false;
    loop {
        let now = (lease.now)();
        let lease_deadline = (lease.deadline)();
        stop.see(lease_deadline, now);
        let kill_at = stop.kill_at(lease_deadline, margin, args.kill_after());
        // The keeper's instant is the backstop, for a `dlock` that stopped: a little later
        // than `dlock`'s own, still before the lease runs out.
        job.kill_in((kill_at + margin / 2).saturating_duration_since(now));
        if let Some(term_at) = stop.term_at(lease_deadline, now, args.lease, args.kill_after()) {
            if term_at <= now {
                eprintln!(
                    "dlock: renewing lock {name} is not working and its lease runs out in {}; \
                     sending SIGTERM to the command's process group (SIGKILL {} before the \
                     lease runs out), so that it has stopped before another holder can take the \
                     lock",
                    human(lease_deadline.saturating_duration_since(now)),
                    human(margin),
                );
                job.signal(Signal::SIGTERM);
                stop.term_sent = Some(now);
                continue;
            }
        }
        if !stop.kill_sent && kill_at <= now {
            match (&stop.lost, stop.term_sent) {
                (Some(lost), _) if lost.ran_out => {}
                (Some(_), _) => eprintln!(
                    "dlock: the command did not stop within {} of SIGTERM; sending SIGKILL",
                    human(args.kill_after())
                ),
                (None, Some(sent)) => eprintln!(
                    "dlock: the command did not stop within {} of SIGTERM, and the lease of lock \
                     {name} runs out; sending SIGKILL to every process of its job",
                    human(now.saturating_duration_since(sent)),
                ),
                (None, None) => eprintln!(
                    "dlock: the lease of lock {name} runs out without a renewal; sending SIGKILL \
                     to every process of the command's job"
                ),
            }
            job.kill();
            stop.kill_sent = true;
        }
        if let (Some(exited), false) = (exited_at, told_lingering) {
            if now.saturating_duration_since(exited) >= Duration::from_secs(1) {
                eprintln!(
                    "dlock: the command exited, and processes of its job still run: lock {name} \
                     is kept until they end"
                );
                told_lingering = true;
            }
        }
        // Awake for what falls due next: SIGKILL, SIGTERM, the renewal becoming overdue.
        let overdue_at = stop.deadline_seen.map(|(_, since)| since + args.lease / 2);
        let due = [Some(kill_at), overdue_at]
            .into_iter()
            .flatten()
            .chain(stop.term_at(lease_deadline, now, args.lease, args.kill_after()))
            .filter(|at| *at > now && !(stop.kill_sent && *at == kill_at))
            .map(|at| at.saturating_duration_since(now))
            .min()
            .unwrap_or(tick);
        let wake = crossbeam_channel::after(tick.min(due));
        select! {
            recv(job.events()) -> event => match event {
                Ok(JobEvent::Exited(exited)) => {
                    code = Some(exited);
                    exited_at = Some((lease.now)());
                }
                Ok(JobEvent::KilledByKeeper) if !stop.kill_sent => {
                    eprintln!(
                        "dlock: dlock fell behind, and the command's keeper killed its job when \
                         the lease of lock {name} was about to run out"
                    );
                    stop.kill_sent = true;
                }
                Ok(JobEvent::KilledByKeeper) => {}
                Ok(JobEvent::KeeperLost) => {
                    eprintln!("dlock: the command's keeper ended; its process group was killed");
                    keeper_lost = true;
                }
                Ok(JobEvent::Empty) | Err(_) => {
                    let stopped = stop.lost.is_none()
                        && (stop.term_sent.is_some() || stop.kill_sent);
                    return Ended {
                        code: code.unwrap_or(128 + Signal::SIGKILL as i32),
                        lost: stop.lost.map(|lost| lost.reason),
                        stopped,
                        keeper_lost,
                    };
                }
            },
            recv(signals) -> received => {
                if let Ok(signal) = received {
                    job.signal(signal);
                }
            },
            recv(events) -> event => {
                if let Ok(event) = event {
                    if *event.name == *args.name {
                        let (now, deadline) = ((lease.now)(), (lease.deadline)());
                        lease_event(&mut stop, &mut job, event.change, &name, args, now, deadline);
                    }
                }
            },
            recv(wake) -> _ => {}
        }
    }
}

/// What a lease event does to the job.
fn lease_event(
    stop: &mut Stop,
    job: &mut Job,
    change: LeaseChange,
    name: &str,
    args: &RunArgs,
    now: Instant,
    deadline: Instant,
) {
    match change {
        LeaseChange::Lost { reason } if stop.lost.is_none() => {
            let ran_out = matches!(reason, LossReason::Expired | LossReason::Unreachable)
                || now + kill_margin(args.lease) >= deadline;
            stop.lost = Some(Lost {
                reason: reason.to_string(),
                at: now,
                ran_out,
            });
            if ran_out {
                eprintln!(
                    "dlock: lost lock {name}: {reason}; sending SIGKILL to every process of the \
                     command's job"
                );
                job.kill();
                stop.kill_sent = true;
            } else if stop.term_sent.is_none() {
                eprintln!(
                    "dlock: lost lock {name}: {reason}; sending SIGTERM to the command's process \
                     group (SIGKILL in {})",
                    human(args.kill_after())
                );
                job.signal(Signal::SIGTERM);
                stop.term_sent = Some(now);
            } else {
                eprintln!("dlock: lost lock {name}: {reason}");
            }
        }
        LeaseChange::RenewalFailed { error, deadline } => {
            eprintln!(
                "dlock: renewing lock {name} failed ({error}); retrying, the lease holds for {} \
                 more",
                human(deadline.saturating_duration_since(now))
            );
            stop.renewal_failing = true;
        }
        LeaseChange::RenewalRecovered { failures } => {
            eprintln!("dlock: renewing lock {name} works again after {failures} failures");
            stop.renewal_failing = false;
        }
        _ => {}
    }
}
