//! The faults of a deployment that promotes a replica by itself (Redis Sentinel, Redis
//! Cluster): the master's node cut off from the others, or its replication cut and the
//! master killed, then the wait for the deployment to promote a replica. Each deployment says
//! how it finds its master and sees a promotion; the faults are the same.

use std::time::Duration;

use crate::support::network::Network;

/// A deployment of one server per network node that promotes a replica by itself.
pub(super) trait Promoting {
    /// Its network, one node per server.
    fn network(&self) -> &Network;

    /// How many servers (and nodes) it has.
    fn servers(&self) -> usize;

    /// The server taking the locks now.
    fn current_master(&mut self) -> usize;

    /// Kills server `at` (`SIGKILL`), to be started again as a replica after the fault.
    fn kill(&mut self, at: usize);

    /// Waits (bounded) until a server other than `old` takes the locks.
    fn await_failover(&mut self, old: usize) -> Result<(), String>;
}

/// The master's node cut off from the other nodes, both ways or (not `both_ways`) only what
/// it sends, the clients still reaching every node, for `length` and until a replica is
/// promoted; then the partition heals.
pub(super) fn partition(
    service: &mut impl Promoting,
    length: Duration,
    both_ways: bool,
) -> Result<(), String> {
    let old = service.current_master();
    let others = others_than(service, old);
    service.network().cut(&[old], &others, both_ways)?;
    std::thread::sleep(length);
    let promoted = service.await_failover(old);
    service.network().heal()?;
    promoted
}

/// What the master sends the other nodes dropped (its replicas get none of what it writes
/// meanwhile; the deployment still hears it) for `lag`, then the master killed; returns once
/// a replica is promoted.
pub(super) fn fail_over(service: &mut impl Promoting, lag: Duration) -> Result<(), String> {
    let old = service.current_master();
    let others = others_than(service, old);
    service.network().cut(&[old], &others, false)?;
    std::thread::sleep(lag);
    service.kill(old);
    service.network().heal()?;
    service.await_failover(old)
}

fn others_than(service: &impl Promoting, at: usize) -> Vec<usize> {
    (0..service.servers())
        .filter(|other| *other != at)
        .collect()
}
