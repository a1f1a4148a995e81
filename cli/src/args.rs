//! The command line: subcommands, options and their help.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::connect::Target;
use crate::duration_arg::{parse_duration, parse_lease};

/// The server used when neither `--backend`, `--redis`, `DLOCK_URL` nor `REDIS_URL` names one.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// The environment variable naming the server when `--redis` does not.
pub const REDIS_URL_VARIABLE: &str = "REDIS_URL";
/// The environment variable naming the backend (any scheme) when no option does; it comes
/// before `REDIS_URL`.
pub const DLOCK_URL_VARIABLE: &str = "DLOCK_URL";
/// The environment variable naming the PostgreSQL schema when `--schema` does not.
pub const SCHEMA_VARIABLE: &str = "DLOCK_PG_SCHEMA";

const EXAMPLES: &str = "\
Examples:
  dlock run nightly-report -- ./report.sh --full
  dlock run deploy --wait 30s --lease 2m -- make deploy
  dlock run --fenced ledger -- sh -c 'write-ledger --token \"$DLOCK_FENCING_TOKEN\"'
  dlock run --permits 4 api-quota -- ./call-the-api.sh
  dlock status nightly-report --json
  dlock status --check deploy && echo 'a deploy is running'
  dlock leader scheduler
  dlock list 'deploy*'
  dlock top 'deploy*'
  dlock watch nightly-report --json
  dlock force-unlock nightly-report
  dlock force-unlock nightly-report --if-holder dlock-web1-4242-5f0c2a9b1e7d:1099511627901
  dlock --backend postgres://app@db:5432/app run nightly-report -- ./report.sh
  dlock --backend postgres://ops@db:5432/app --schema app_locks list
  dlock --backend etcd://10.0.0.1:2379,10.0.0.2:2379 run nightly-report -- ./report.sh
  dlock --backend etcds://locker:secret@etcd.internal:2379 status deploy
  dlock postgres-schema --grant-to app | psql postgres://admin@db:5432/app

Lock names are the store's keys (on Redis, the key of Redisson's layout): a name
already used by other data is refused (exit 65), never overwritten.

Exit codes:
  run exits with the command's code (128 + N when signal N ended it), or
  1    status --check: the name is free; force-unlock --if-holder: not held by that hold
  2    usage error (also: a PostgreSQL database without dlock's schema, for commands
       other than run)
  65   the name is in use by another kind of lock (or by a key that is no lock)
  69   backend unavailable, or the lock was lost (or at risk) while the command ran
  75   not acquired within --wait
  126  the command cannot be run
  127  the command was not found";

const RUN_DETAILS: &str = "\
The command runs as a process group of its own. Its job is every process it starts: on
Linux every descendant of dlock's keeper, those that leave the group included (timeout,
setsid, a daemon's double fork); elsewhere, the group. SIGINT, SIGTERM, SIGHUP and SIGQUIT
sent to dlock go to the job's group only, and the lock is released only once no process of
the job is left (a background process the command leaves behind keeps the lock until it
ends). At a terminal, the job is the foreground job while it runs: it reads the terminal,
and Ctrl-C reaches it.

A keeper process of dlock's own, in a session (at a terminal, a process group) of its own,
watches over the job: if dlock dies (kill -9, a crash, a supervisor that kills dlock's
process group such as timeout -s KILL; a lost machine aside), the keeper kills every process
of the job at once, long before the lease can run out; and if dlock stops (SIGSTOP, a
debugger) the keeper kills the job when the lease is about to run out.

While the job runs, its lease is renewed every third of --lease. If renewals stop working
(a renewal failed, or one is half a lease overdue: the server unreachable or not answering),
the group gets SIGTERM once only --kill-after of the lease is left, and the job SIGKILL
shortly before the lease runs out (a twentieth of it, at most 0.5s): it has stopped before
another holder can take the lock. A lease lost while it still ran (force-unlocked, taken
over) gets SIGTERM at once and SIGKILL --kill-after later: another holder may run meanwhile.
A failed renewal is known at once or after the 3s response timeout, an overdue one at half
the lease: --kill-after should fit in what is left then (dlock warns otherwise; the default
shrinks to fit a short --lease).

What escapes the job: a process another program starts on its behalf (systemd-run, at,
docker run, ssh), and elsewhere than on Linux a process that leaves its process group. It
can run on after the lock has passed to another holder.";

/// Distributed locks from the shell, on Redis (shared with Redisson (Java) and dlock services) or
/// PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "dlock", version, after_help = EXAMPLES)]
pub struct Cli {
    /// The Redis server: redis://host:port (user:password@ before the host and /db after are
    /// optional); rediss:// for TLS; redis-sentinel://[user:password@]host:port,host:port/MASTER
    /// for a master behind Redis Sentinel (the credentials are the master's);
    /// redis-cluster://[user:password@]host:port,host:port for some nodes of a Redis Cluster.
    /// Without it,
    /// $REDIS_URL, else redis://127.0.0.1:6379.
    // The variable is read in `target()`, not by clap: clap counts a value from the
    // environment as given, and its usage lines then show `--redis <URL>` as if it were needed.
    #[arg(long = "redis", global = true, value_name = "URL")]
    pub redis: Option<String>,

    /// The backend, by its URL's scheme: redis://, rediss://, redis-sentinel:// or
    /// redis-cluster:// (as --redis);
    /// postgres://[user[:password]@]host[:port][,host[:port]...]/database for PostgreSQL (or
    /// libpq's `host=... dbname=...` form); etcd://[user:password@]host:port[,host:port...]
    /// for etcd (etcds:// for TLS, with etcdctl's $ETCDCTL_CACERT, $ETCDCTL_CERT and
    /// $ETCDCTL_KEY). Without it (and without --redis), $DLOCK_URL, else $REDIS_URL, else
    /// redis://127.0.0.1:6379.
    #[arg(
        long = "backend",
        global = true,
        value_name = "URL",
        conflicts_with = "redis"
    )]
    pub backend: Option<String>,

    /// PostgreSQL: the schema holding dlock's tables (default dlock; else $DLOCK_PG_SCHEMA).
    /// Logged or unlogged (made for Durability::Ephemeral): dlock reads which from the schema.
    /// Example: dlock --backend postgres://ops@db/app --schema app_locks status deploy
    #[arg(long = "schema", global = true, value_name = "NAME")]
    pub schema: Option<String>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Takes the lock, runs COMMAND as a process group while holding it (renewing its lease),
    /// releases it once every process of its job has ended, and exits with the command's
    /// code.
    #[command(after_help = EXAMPLES, after_long_help = format!("{RUN_DETAILS}\n\n{EXAMPLES}"))]
    Run(RunArgs),
    /// Shows whether a lock is held, by whom, and for how long its lease still runs; and what
    /// the name holds as a semaphore, a latch or a leader election. Reads only.
    Status {
        /// The lock's name.
        name: String,
        /// Prints JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Exits 0 when the name is in use (a lock held, a permit held, a leader, a count set)
        /// and 1 when it is free, as `flock -n` and `grep -q` answer a test (without it, 0
        /// either way). Example: dlock status --check deploy && echo 'a deploy is running'
        #[arg(long)]
        check: bool,
    },
    /// Lists the locks held now, the semaphores with permits held and the elections with a
    /// leader, found with SCAN (never KEYS). Reads only.
    List {
        /// Only names matching this Redis glob pattern (`*`, `?`, `[ab]`).
        #[arg(default_value = "*")]
        pattern: String,
        /// Lists at most this many locks.
        #[arg(long, default_value_t = dlocks::redis::DEFAULT_LIST_LIMIT)]
        limit: usize,
        /// Prints JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A full-screen view of what is held now, refreshed every second: name, kind, holder
    /// (name@host pid), how long it has been held, lease left, waiters; semaphores' permits,
    /// latches' counts, elections' leaders. Keys: q quits, / filters, s changes the sort.
    /// Reads only: it never writes to the backend.
    Top {
        /// Only names matching this glob pattern (`*`, `?`, `[ab]`).
        #[arg(default_value = "*")]
        pattern: String,
    },
    /// Prints a line each time a name changes: taken (by whom), released, expired (its lease
    /// ran out while held), handed over (to another holder between two reads), its queue's
    /// length. Reads every 200 ms; never writes. Runs until interrupted.
    Watch {
        /// The name.
        name: String,
        /// Prints JSON lines instead of text.
        #[arg(long)]
        json: bool,
        /// Exits after this many lines.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// Prints the current leader of a leader election (its candidate id, token and lease);
    /// exits 0 whether or not anyone leads. Reads only.
    Leader {
        /// The election's name.
        name: String,
        /// Prints JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Frees a lock and wakes its waiters, and prints the holds it freed: each hold it saw is
    /// released by its id, so a hold taken meanwhile is not freed by mistake (after a few tries
    /// it frees whoever holds it, and says so). The holder finds out at its next renewal:
    /// `dlock run` stops its command and exits with 69.
    ForceUnlock {
        /// The lock's name.
        name: String,
        /// Frees the lock only if this hold (a holder id as `status` shows it) still holds it,
        /// in one atomic step; exits 1, changing nothing, if it does not. Example: dlock
        /// force-unlock deploy --if-holder dlock-web1-4242-5f0c2a9b1e7d:1099511627901
        #[arg(long, value_name = "ID")]
        if_holder: Option<String>,
        /// Prints JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Prints the SQL that creates dlock's PostgreSQL schema (tables and functions), for a DBA
    /// to run where the lock user may not create it; connects to nothing. The schema is
    /// --schema's (default dlock).
    PostgresSchema {
        /// Also grants this role what the lock steps need (and nothing more).
        #[arg(long, value_name = "ROLE")]
        grant_to: Option<String>,
        /// Makes the lease tables UNLOGGED, for backends of `Durability::Ephemeral` (a crash
        /// or a failover drops every lease).
        #[arg(long, conflicts_with = "fence")]
        ephemeral: bool,
        /// Prints the fence instead (the `dlock_fences` table and the `dlock_fence` function
        /// writers call in their own transactions), for the database that holds the data, in
        /// --schema's schema (default public); --grant-to grants it to a writer role.
        #[arg(long)]
        fence: bool,
    },
}

/// `dlock run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock's name (shared with every service that locks this name on the same server;
    /// on Redis it is the key, as Redisson lays locks out).
    pub name: String,

    /// How long to wait for the lock; `0` tries once. Without it, waits as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wait: Option<Duration>,

    /// The lease: renewed every third of it while the command runs, and how long the lock
    /// outlives a machine that is lost (a `dlock` killed takes its job with it at once). At
    /// least 30ms.
    #[arg(long, value_name = "DURATION", value_parser = parse_lease, default_value = "30s")]
    pub lease: Duration,

    /// How long the job has between SIGTERM and SIGKILL when the lock is at risk: while
    /// renewals keep failing, SIGTERM is sent once only this much of the lease is left and
    /// SIGKILL just before it runs out; a lease lost while it still ran gets SIGTERM, then
    /// SIGKILL this long after (see --help). Default: 10s, or less when the lease leaves less
    /// room (what fits after renewals are found failing).
    #[arg(long = "kill-after", value_name = "DURATION", value_parser = parse_duration)]
    pub kill_after_flag: Option<Duration>,

    /// Which kind of lock.
    #[command(flatten)]
    pub kind: KindArgs,

    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

/// The lock kinds `run` can take; the default is the reentrant lock (Redisson's `RLock`).
#[derive(Debug, Args)]
#[group(multiple = false)]
pub struct KindArgs {
    /// A fair lock: granted in arrival order across processes (Redisson's `RedissonFairLock`).
    #[arg(long)]
    pub fair: bool,
    /// The read side of a read-write lock: shared with other readers.
    #[arg(long)]
    pub read: bool,
    /// The write side of a read-write lock: exclusive.
    #[arg(long)]
    pub write: bool,
    /// A fenced lock: the hold's fencing token is passed to the command as
    /// DLOCK_FENCING_TOKEN, for resources that refuse older tokens.
    #[arg(long)]
    pub fenced: bool,
    /// A permit of a semaphore of N permits (Redisson's RPermitExpirableSemaphore): at most N
    /// commands hold one at once, across machines. The number is set if the semaphore has
    /// none yet (else the one it has is used); the permit's id is passed to the command as
    /// DLOCK_PERMIT_ID.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub permits: Option<u32>,
}

impl Cli {
    /// Parses the process's arguments; prints help or a usage error and exits (code 2) when
    /// they are not valid.
    pub fn from_env() -> Cli {
        Cli::parse()
    }

    /// The backend: `--backend` or `--redis`, else `$DLOCK_URL`, else `$REDIS_URL` (each when
    /// set and not empty), else the default Redis server; and the PostgreSQL schema, `--schema`
    /// else `$DLOCK_PG_SCHEMA`.
    pub fn target(&self) -> Target {
        let url = self
            .backend
            .clone()
            .or_else(|| self.redis.clone())
            .filter(|url| !url.is_empty())
            .or_else(|| variable(DLOCK_URL_VARIABLE))
            .or_else(|| variable(REDIS_URL_VARIABLE))
            .unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned());
        Target {
            url,
            schema: self.schema.clone().or_else(|| variable(SCHEMA_VARIABLE)),
            schema_given: self.schema.is_some(),
        }
    }
}

/// The environment variable `name`, when set and not empty.
fn variable(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}
