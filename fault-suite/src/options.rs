//! The command line: which faults, which lock modes, how many processes and threads, the lease.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::register::RegisterKind;
use crate::seeded_bug::SeededBug;
use crate::service::{Backend, Topology, BACKENDS};

/// A fault the suite injects while the workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The process holding the lock is stopped (`SIGSTOP`) for 3 leases, then continued.
    HolderPause,
    /// The process holding the lock is killed (`SIGKILL`); a new worker takes its place.
    HolderKill,
    /// The lock server is killed and started again with an empty dataset.
    ServerRestart,
    /// The lock server is stopped (`SIGSTOP`) for 2 leases, then continued.
    ServerPause,
    /// The server drops every pub/sub connection (`CLIENT KILL TYPE pubsub`), several times.
    PubsubKill,
    /// Replies to acquires, releases and renewals come a quarter lease late, for 2 leases.
    SlowReplies,
    /// Every 100 ms one reply to an acquire, release or renewal is lost, for 2 leases.
    LostReplies,
    /// The replica lags (stopped for 2 leases), the master is killed, the replica is promoted and the
    /// service address moves to it; the workers wait for the replica's acknowledgement.
    Failover,
    /// The same failover, with the workers' replica acknowledgement turned off.
    FailoverUnsynced,
    /// Holder pause, pub/sub kill, server pause, lost replies and server restart, one after
    /// another in one run.
    Mixed,
    /// For 2 leases the network holds requests back past the workers' response timeout and
    /// delivers them late, newest first: steps that arrive after their caller gave up on them
    /// (and retried them: a release is sent again, so the server gets it twice).
    LateSteps,
    /// For 2 leases every byte between the workers and the server is a quarter lease late.
    SlowNetwork,
    /// The member taking the locks (etcd's leader) is cut off from the other members for 3
    /// leases, its clients still reaching it, then the partition heals (each member in a
    /// network namespace of its own, packets dropped silently). On backends with several
    /// members in their own namespaces only. On `sentinel`: the master's node (with its
    /// sentinel) cut off from the other two until they promote a replica. On `cluster`: the
    /// master of the lock's slot cut off from every other node until its replica is promoted. On
    /// `postgres-standby`: the primary cut off from the standby and every client, the standby
    /// promoted, the old primary stopped before the partition heals.
    Partition,
    /// For 3 leases what the member taking the locks sends the other members is dropped,
    /// what they send it still arrives (Jepsen's one-way "grudge"); clients reach every
    /// member.
    PartitionOneWay,
    /// The wall clock of the server taking the locks steps 3 leases forward (`libfaketime`
    /// preloaded into it, as NTP or an operator steps a real clock): the leases it counts on
    /// that clock run out at once. On Redis and PostgreSQL servers (single, Sentinel,
    /// Cluster); etcd counts leases on its leader's monotonic clock.
    ClockJump,
}

impl FaultKind {
    /// Every fault, in the order the report lists them.
    pub const ALL: [FaultKind; 15] = [
        FaultKind::HolderPause,
        FaultKind::HolderKill,
        FaultKind::ServerRestart,
        FaultKind::ServerPause,
        FaultKind::PubsubKill,
        FaultKind::SlowReplies,
        FaultKind::LostReplies,
        FaultKind::Failover,
        FaultKind::FailoverUnsynced,
        FaultKind::Mixed,
        FaultKind::LateSteps,
        FaultKind::SlowNetwork,
        FaultKind::Partition,
        FaultKind::PartitionOneWay,
        FaultKind::ClockJump,
    ];

    /// The name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::HolderPause => "holder-pause",
            FaultKind::HolderKill => "holder-kill",
            FaultKind::ServerRestart => "server-restart",
            FaultKind::ServerPause => "server-pause",
            FaultKind::PubsubKill => "pubsub-kill",
            FaultKind::SlowReplies => "slow-replies",
            FaultKind::LostReplies => "lost-replies",
            FaultKind::Failover => "failover",
            FaultKind::FailoverUnsynced => "failover-unsynced",
            FaultKind::Mixed => "mixed",
            FaultKind::LateSteps => "late-steps",
            FaultKind::SlowNetwork => "slow-network",
            FaultKind::Partition => "partition",
            FaultKind::PartitionOneWay => "partition-one-way",
            FaultKind::ClockJump => "clock-jump",
        }
    }

    /// Whether the lock service is a master with a replica behind a movable address.
    pub fn needs_replica(self) -> bool {
        matches!(self, FaultKind::Failover | FaultKind::FailoverUnsynced)
    }

    /// Whether the workers reach the lock service through a network the suite can fault.
    pub fn needs_network(self) -> bool {
        matches!(self, FaultKind::LateSteps | FaultKind::SlowNetwork)
    }

    /// Whether the lock service's members must be in network namespaces of their own.
    pub fn needs_partitions(self) -> bool {
        matches!(self, FaultKind::Partition | FaultKind::PartitionOneWay)
    }

    /// Whether the lock servers must run on clocks the suite can step.
    pub fn needs_fake_clock(self) -> bool {
        self == FaultKind::ClockJump
    }
}

/// How the workers use the lock and the register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A plain lock; the register accepts every write.
    Plain,
    /// A plain lock, and the worker checks `guard.is_lost()` right before writing.
    Checked,
    /// A fenced lock; the register refuses reads and writes with a token older than one it
    /// has seen.
    Fenced,
    /// A semaphore of [`PERMITS`](crate::worker::PERMITS) permits; the worker checks
    /// `permit.is_lost()` at the end of its work, and the checker counts the moments more
    /// workers than permits believed they held one. The register is not used.
    Semaphore,
    /// A leader election; the worker campaigns, leads for its work, checks
    /// `leadership.is_lost()` at its end and resigns, and the checker counts the moments two
    /// workers believed they led. Leadership tokens are checked to increase. The register is
    /// not used.
    Election,
    /// A count-down latch of its own per operation: the worker sets its count to 2, counts
    /// down once, reads the count, works, counts down again and waits for it to open; the
    /// checker counts the latches found open after one count-down (in the overlaps column).
    /// The register is not used.
    Latch,
}

impl Mode {
    /// Every mode, in report order.
    pub const ALL: [Mode; 6] = [
        Mode::Plain,
        Mode::Checked,
        Mode::Fenced,
        Mode::Semaphore,
        Mode::Election,
        Mode::Latch,
    ];

    /// The name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Checked => "checked",
            Mode::Fenced => "fenced",
            Mode::Semaphore => "semaphore",
            Mode::Election => "election",
            Mode::Latch => "latch",
        }
    }

    /// Whether the workers read and write the register (the lock modes), or only record how
    /// long they believed they held (the semaphore and the election) or how their latch went.
    pub fn uses_register(self) -> bool {
        !matches!(self, Mode::Semaphore | Mode::Election | Mode::Latch)
    }

    /// Whether each hold carries a token that must increase (the fenced lock, the election).
    pub fn has_tokens(self) -> bool {
        matches!(self, Mode::Fenced | Mode::Election)
    }

    /// The mode called `name`.
    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| mode.name() == name)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A run of the suite, as the command line asked for it.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which lock service the workers use.
    pub backend: &'static Backend,
    /// The deployment of several servers it runs on; `None`: a single server (members or a
    /// replica added where a fault needs them).
    pub topology: Option<&'static Topology>,
    pub processes: usize,
    pub threads: usize,
    pub lease: Duration,
    /// How many times each fault is injected in its run.
    pub rounds: usize,
    pub faults: Vec<FaultKind>,
    pub modes: Vec<Mode>,
    pub json: Option<PathBuf>,
    /// Where the register the workers protect lives.
    pub register: RegisterKind,
    /// A defect the workers run with on purpose, to see which rows catch it.
    pub seeded_bug: Option<SeededBug>,
}

/// The command line was wrong; the message says how.
#[derive(Debug)]
pub struct UsageError(pub String);

pub const USAGE: &str = "\
usage: dlock-fault-suite [options]

Runs K worker processes x T threads doing acquire -> read register -> write register -> release
against real redis-server (or PostgreSQL, or etcd) processes while faults are injected, then
checks the history.

options:
  --backend NAME    the lock service: redis (default), postgres, etcd or redlock (three
                    Redis servers, a lock held on a majority; plain and checked modes)
  --topology NAME   the deployment, which names the backend: single (default), sentinel
                    (a Redis master, two replicas, three sentinels), cluster (a Redis
                    Cluster of three masters with a replica each), redlock (three Redis
                    servers in namespaces of their own), postgres-standby (a
                    primary and a synchronous standby, promoted when the primary is cut off)
                    or etcd (three members)
  --faults LIST     comma-separated faults, or `all` (default: every fault the backend or
                    topology takes): holder-pause, holder-kill, server-restart, server-pause,
                    pubsub-kill, slow-replies, lost-replies, failover, failover-unsynced,
                    mixed, late-steps, slow-network, partition, partition-one-way (these
                    two on a topology or --backend etcd: each server in a network namespace of
                    its own, links cut by nftables; needs root), clock-jump (Redis and
                    PostgreSQL servers; needs Debian's faketime)
  --modes LIST      comma-separated lock modes, or `all` (default): plain, checked, fenced,
                    semaphore (2 permits; overlaps: more believing holders than permits),
                    election (overlaps: two believing leaders), latch (overlaps: latches
                    open after one of two count-downs)
  --processes K     worker processes (1-64; default 4, 2 with --quick)
  --threads T       threads per worker (1-64; default 2)
  --lease-ms N      watchdog lease in ms (100-60000; default 1000, 400 with --quick)
  --rounds N        times each fault is injected in its run (1-20; default 3, 1 with --quick)
  --quick           the short run (CI)
  --register NAME   where the register lives: redis or postgres (default: postgres with
                    --backend postgres, else redis); fenced accesses go through dlocks::fence
  --seeded-bug NAME run the workers with a defect on purpose, to see which rows catch it:
                    skip-replica-ack (grants not waiting for a replica),
                    renew-without-owner-check (a renewal of a hold that is gone answers
                    renewed), client-clock (a renewal of a hold that is gone is taken for one
                    not answered: the client's clock decides)
  --json PATH       also write the results as JSON
  --help            this text";

impl Options {
    /// Parses the arguments after the program name.
    pub fn parse(args: &[String]) -> Result<Options, UsageError> {
        let mut quick = false;
        let mut processes = None;
        let mut threads = None;
        let mut lease_ms = None;
        let mut rounds = None;
        let mut faults = FaultKind::ALL.to_vec();
        let mut faults_were_all = true;
        let mut modes = Mode::ALL.to_vec();
        let mut modes_were_all = true;
        let mut json = None;
        let mut backend = None;
        let mut topology = None;
        let mut register = None;
        let mut seeded_bug = None;
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |flag: &str| {
                args.next()
                    .cloned()
                    .ok_or_else(|| UsageError(format!("{flag} needs a value")))
            };
            match arg.as_str() {
                "--quick" => quick = true,
                "--backend" => {
                    let name = value(arg)?;
                    backend = Some(Backend::named(&name).ok_or_else(|| {
                        UsageError(format!("unknown backend {name:?} ({})", Backend::names()))
                    })?);
                }
                "--topology" => {
                    let name = value(arg)?;
                    topology = match name.as_str() {
                        "single" => None,
                        _ => Some(Topology::named(&name).ok_or_else(|| {
                            UsageError(format!("unknown topology {name:?} ({})", Topology::names()))
                        })?),
                    };
                }
                "--processes" => {
                    processes = Some(number(&value(arg)?, "--processes", 1, 64)? as usize)
                }
                "--threads" => threads = Some(number(&value(arg)?, "--threads", 1, 64)? as usize),
                "--lease-ms" => lease_ms = Some(number(&value(arg)?, "--lease-ms", 100, 60_000)?),
                "--rounds" => rounds = Some(number(&value(arg)?, "--rounds", 1, 20)? as usize),
                "--json" => json = Some(PathBuf::from(value(arg)?)),
                "--register" => {
                    let name = value(arg)?;
                    register = Some(
                        RegisterKind::ALL
                            .into_iter()
                            .find(|kind| kind.name() == name)
                            .ok_or_else(|| {
                                UsageError(format!("unknown register {name:?} (redis or postgres)"))
                            })?,
                    );
                }
                "--seeded-bug" => {
                    let name = value(arg)?;
                    seeded_bug = Some(SeededBug::parse(&name).ok_or_else(|| {
                        UsageError(format!(
                            "unknown seeded bug {name:?} ({})",
                            SeededBug::names()
                        ))
                    })?);
                }
                "--faults" => {
                    let text = value(arg)?;
                    faults_were_all = text == "all";
                    faults = list(&text, "fault", &FaultKind::ALL, parse_fault)?;
                }
                "--modes" => {
                    let text = value(arg)?;
                    modes_were_all = text == "all";
                    modes = list(&text, "mode", &Mode::ALL, Mode::parse)?;
                }
                "--help" | "-h" => return Err(UsageError(String::new())),
                other => return Err(UsageError(format!("unknown argument {other:?}"))),
            }
        }
        let backend = match (backend, topology) {
            (Some(backend), Some(topology)) if !std::ptr::eq(backend, topology.backend) => {
                return Err(UsageError(format!(
                    "the {} topology runs the {} backend, not {}",
                    topology.name,
                    topology.backend.name(),
                    backend.name()
                )))
            }
            (_, Some(topology)) => topology.backend,
            (Some(backend), None) => backend,
            (None, None) => BACKENDS[0],
        };
        let takes = |fault: FaultKind| match topology {
            Some(topology) => (topology.takes)(fault),
            None => backend.takes(fault),
        };
        match faults.iter().find(|fault| !takes(**fault)) {
            // `all` is every fault the backend or topology can take.
            Some(_) if faults_were_all => faults.retain(|fault| takes(*fault)),
            Some(fault) => {
                let what = match topology {
                    Some(topology) => format!("the {} topology", topology.name),
                    None => format!("the {} backend", backend.name()),
                };
                let why = if fault.needs_fake_clock() {
                    "a clock jump needs Redis or PostgreSQL servers, and one server taking the \
                     locks on PostgreSQL"
                } else if fault.needs_network() {
                    "it reaches its servers without the suite's proxy"
                } else if fault.needs_replica() {
                    "it has no replica to fail over to"
                } else {
                    "it needs servers in network namespaces of their own: --topology"
                };
                return Err(UsageError(format!(
                    "{what} cannot take the {} fault ({why})",
                    fault.name()
                )));
            }
            None => {}
        }
        match modes.iter().find(|mode| !(backend.runs)(**mode)) {
            // `all` is every mode the backend can run.
            Some(_) if modes_were_all => modes.retain(|mode| (backend.runs)(*mode)),
            Some(mode) => {
                return Err(UsageError(format!(
                    "the {} backend cannot run the {mode} mode (it keeps no such lock)",
                    backend.name()
                )))
            }
            None => {}
        }
        let default_lease = if quick { 400 } else { 1000 };
        Ok(Options {
            backend,
            topology,
            processes: processes.unwrap_or(if quick { 2 } else { 4 }),
            threads: threads.unwrap_or(2),
            lease: Duration::from_millis(lease_ms.unwrap_or(default_lease)),
            rounds: rounds.unwrap_or(if quick { 1 } else { 3 }),
            faults,
            modes,
            json,
            // A user's data most often lives beside their locks: PostgreSQL's with PostgreSQL.
            register: register.unwrap_or(if backend.name() == "postgres" {
                RegisterKind::Postgres
            } else {
                RegisterKind::Redis
            }),
            seeded_bug,
        })
    }
}

fn parse_fault(name: &str) -> Option<FaultKind> {
    FaultKind::ALL
        .into_iter()
        .find(|fault| fault.name() == name)
}

fn number(text: &str, flag: &str, min: u64, max: u64) -> Result<u64, UsageError> {
    match text.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        Ok(n) => Err(UsageError(format!(
            "{flag} must be between {min} and {max}, got {n}"
        ))),
        Err(_) => Err(UsageError(format!(
            "{flag} must be a whole number, got {text:?}"
        ))),
    }
}

fn list<T: Copy + PartialEq>(
    text: &str,
    what: &str,
    all: &[T],
    parse: fn(&str) -> Option<T>,
) -> Result<Vec<T>, UsageError> {
    if text == "all" {
        return Ok(all.to_vec());
    }
    let mut items = Vec::new();
    for name in text.split(',').map(str::trim) {
        match parse(name) {
            Some(item) if !items.contains(&item) => items.push(item),
            Some(_) => {}
            None => return Err(UsageError(format!("unknown {what} {name:?}"))),
        }
    }
    if items.is_empty() {
        return Err(UsageError(format!("no {what} given")));
    }
    Ok(items)
}
