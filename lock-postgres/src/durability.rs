//! What a lock step's commit waits for: PostgreSQL's `synchronous_commit`, per step.

use std::fmt;

/// The `synchronous_commit` of a lock step's transaction (`SET LOCAL` inside each step's
/// function): what the server has done with a grant, a renewal or a release before the client
/// hears that it is done.
///
/// A step that changed nothing a holder relies on (a refused acquire, which at most marks the
/// lock contended or queues the waiter; a release that found nothing to release; a waiter
/// giving up) commits with `off` whatever this says: losing it loses nothing.
///
/// | setting | the step is answered once its commit is | a crash of the server loses | a failover to a standby loses |
/// |---|---|---|---|
/// | [`On`](Durability::On) (default) | flushed to the primary's disk (and, with `synchronous_standby_names`, to a standby's) | nothing | with a synchronous standby, nothing; else what had not reached the standby |
/// | [`Off`](Durability::Off) | in the primary's memory | the last ~`3 × wal_writer_delay` (600 ms by default) of grants, renewals and releases: a holder may hold a lock the restarted server does not know (two owners) | as `On` without a synchronous standby |
/// | [`Local`](Durability::Local) | flushed to the primary's disk, not waiting for any standby | nothing | what had not reached the standby |
/// | [`RemoteWrite`](Durability::RemoteWrite) | written (not flushed) by the synchronous standby | nothing | nothing, unless the standby's host crashes too |
/// | [`RemoteApply`](Durability::RemoteApply) | applied by the synchronous standby (visible to its queries) | nothing | nothing: every acknowledged hold is on the standby (the analogue of Redis `WAIT`) |
/// | [`Ephemeral`](Durability::Ephemeral) | in the primary's memory, in `UNLOGGED` tables (no write-ahead log at all) | every lease, queue, permit and count: the tables are emptied | every lease: unlogged tables are not replicated |
///
/// Without `synchronous_standby_names` on the server, `RemoteWrite` and `RemoteApply` wait for
/// the local flush only, as `On` does. With it, a standby that stops answering makes every
/// lock-changing step wait until the statement timeout (then `LockError::Unavailable`: the
/// primary has committed it, but no standby confirmed it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous_commit = on`: durable on the primary's disk (and on a synchronous standby's,
    /// when the server has one). A hold survives a server restart shorter than its lease.
    #[default]
    On,
    /// `synchronous_commit = off`: the fastest; a server crash can lose the last moments of
    /// lock steps (fencing tokens stay increasing: they never go below the server's clock).
    Off,
    /// `synchronous_commit = local`: durable on the primary's disk, never waiting for standbys.
    Local,
    /// `synchronous_commit = remote_write`: the synchronous standby has written it.
    RemoteWrite,
    /// `synchronous_commit = remote_apply`: the synchronous standby has applied it.
    RemoteApply,
    /// Leases in `UNLOGGED` tables (and `synchronous_commit = off`): no write-ahead log, the
    /// lightest step; a server crash or a failover drops every lease, so a holder may believe
    /// in a lock the server no longer knows. The right choice where a lock only saves
    /// duplicate work (a cache refill, an idempotent scheduled job), not where it guards a
    /// write that must not happen twice. It needs a schema created for it: one schema's tables
    /// are all logged or all unlogged, and a backend refuses a schema of the other sort.
    Ephemeral,
}

impl Durability {
    /// The `synchronous_commit` value in SQL (`off` for [`Ephemeral`](Durability::Ephemeral)).
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::On => "on",
            Durability::Off => "off",
            Durability::Local => "local",
            Durability::RemoteWrite => "remote_write",
            Durability::RemoteApply => "remote_apply",
            Durability::Ephemeral => "off",
        }
    }

    /// Whether a schema for this setting keeps its lease tables `UNLOGGED`.
    pub fn is_unlogged(self) -> bool {
        self == Durability::Ephemeral
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Durability::Ephemeral => f.write_str("ephemeral"),
            other => f.write_str(other.as_str()),
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = dlock_core::LockError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "on" => Durability::On,
            "off" => Durability::Off,
            "local" => Durability::Local,
            "remote_write" => Durability::RemoteWrite,
            "remote_apply" => Durability::RemoteApply,
            "ephemeral" => Durability::Ephemeral,
            other => {
                return Err(dlock_core::LockError::config(format!(
                    "synchronous_commit must be on, off, local, remote_write, remote_apply or \
                     ephemeral, got {other:?}"
                )))
            }
        })
    }
}
