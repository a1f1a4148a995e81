//! Leader election: a leased, fenced leadership, and who holds it.

use std::fmt;
use std::time::{Duration, Instant};

use crate::contract::error::LockError;
use crate::contract::limits::MAX_NAME_LEN;
use crate::engine::hold::LeaseMode;
use crate::engine::leader_watch::LeaderChanges;
use crate::engine::Handle;
use crate::handles::owned_guard::OwnedHold;

/// A leader election, from [`LockClient::leader_election`](crate::LockClient::leader_election):
/// at most one candidate leads at a time, across every process (the shape of etcd's
/// `Election` and Curator's `LeaderLatch`).
///
/// A leadership is a lease like a lock's: renewed by the client's watchdog while it is held,
/// reported by lease events when lost, ended by [`Leadership::resign`] or its drop, and taken
/// over by the next candidate when its lease runs out (a leader that dies is replaced within a
/// lease). Each leadership has a fencing token, strictly increasing from one leader to the
/// next.
///
/// **What it promises**: two leaders never both *believe* they lead: a leader cut off from the
/// store is told ([`Leadership::is_lost`], a `Lost` lease event) no later than the store lets
/// another candidate in (the lease rule, with its clock-drift margin). **What it does not**: a
/// leader is a process, and a process can be paused (a GC, a `SIGSTOP`, a suspended VM) right
/// after it checked; it may then act after its lease ended. Stamp the leader's writes with its
/// [`token`](Leadership::token) and have the resource refuse a token lower than one it has
/// seen: that makes late acts harmless.
///
/// # Examples
///
/// ```
/// use dlocks::{LockClient, MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let (a, b) = (LockClient::new(backend.clone()), LockClient::new(backend));
/// let leading = a.leader_election("scheduler").campaign("node-a")?;
/// assert_eq!(b.leader_election("scheduler").leader()?.as_deref(), Some("node-a"));
/// assert!(b.leader_election("scheduler").try_campaign_for("node-b", std::time::Duration::ZERO)?.is_none());
/// let first = leading.token();
/// leading.resign()?;
/// let next = b.leader_election("scheduler").campaign("node-b")?;
/// assert!(next.token() > first);
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct LeaderElection {
    handle: Handle,
}

impl LeaderElection {
    pub(crate) fn new(handle: Handle) -> Self {
        LeaderElection { handle }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// Campaigns as `candidate` until it leads, as long as it takes.
    pub fn campaign(&self, candidate: &str) -> Result<Leadership, LockError> {
        self.run(candidate, None)?
            .ok_or_else(|| unbounded_campaign_ended(self.name()))
    }

    /// Campaigns as `candidate` for at most `wait`; `Ok(None)` if another candidate led all
    /// that time.
    pub fn try_campaign_for(
        &self,
        candidate: &str,
        wait: Duration,
    ) -> Result<Option<Leadership>, LockError> {
        self.run(candidate, Some(wait))
    }

    /// [`campaign`](LeaderElection::campaign) as a future: campaigns as `candidate` until it
    /// leads, holding no thread while another candidate leads. Dropped before it leads, it
    /// leaves no leadership behind (one that raced the drop is resigned at once).
    ///
    /// # Examples
    ///
    /// ```
    /// use dlocks::{LockClient, MemoryBackend};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let client = LockClient::new(MemoryBackend::new());
    /// let scheduler = client.leader_election("scheduler");
    /// let leading = scheduler.campaign_async("node-a").await?;
    /// assert_eq!(scheduler.leader()?.as_deref(), Some("node-a"));
    /// leading.resign_async().await?;
    /// # Ok::<(), dlocks::LockError>(())
    /// # }).unwrap();
    /// ```
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn campaign_async(
        &self,
        candidate: &str,
    ) -> impl std::future::Future<Output = Result<Leadership, LockError>> + Send + 'static {
        let running = self.run_async(candidate, None);
        let name = self.name().to_owned();
        async move {
            running
                .await?
                .ok_or_else(|| unbounded_campaign_ended(&name))
        }
    }

    /// [`try_campaign_for`](LeaderElection::try_campaign_for) as a future.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn try_campaign_for_async(
        &self,
        candidate: &str,
        wait: Duration,
    ) -> impl std::future::Future<Output = Result<Option<Leadership>, LockError>> + Send + 'static
    {
        self.run_async(candidate, Some(wait))
    }

    /// The current leader's candidate id, if anyone leads (one backend call).
    pub fn leader(&self) -> Result<Option<String>, LockError> {
        Ok(self.handle.leader()?.map(|leader| leader.candidate))
    }

    /// The leader changes from now on: the current leader's candidate id first (`None` while
    /// nobody leads), then each change. Changes are found when a leadership ends (a message on
    /// Redis) or when the leader's lease runs out, never by polling faster than that; a thread
    /// of the client watches while the returned [`LeaderChanges`] lives, and stops as soon as
    /// it is dropped (or the client is).
    pub fn observe(&self) -> Result<LeaderChanges, LockError> {
        self.handle.observe_leader()
    }

    fn run(
        &self,
        candidate: &str,
        wait: Option<Duration>,
    ) -> Result<Option<Leadership>, LockError> {
        validate_candidate(candidate)?;
        Ok(self
            .handle
            .acquire_owned(wait, LeaseMode::Watchdog, Some(candidate.to_owned()))?
            .map(|hold| Leadership {
                token: hold.fencing_token().unwrap_or_default(),
                inner: OwnedHold::new(&self.handle, hold),
                candidate: candidate.to_owned(),
            }))
    }
}

#[cfg(feature = "async")]
impl LeaderElection {
    fn run_async(
        &self,
        candidate: &str,
        wait: Option<Duration>,
    ) -> impl std::future::Future<Output = Result<Option<Leadership>, LockError>> + Send + 'static
    {
        let valid = validate_candidate(candidate);
        let handle = self.handle.clone();
        let candidate = candidate.to_owned();
        let running =
            self.handle
                .acquire_owned_future(wait, LeaseMode::Watchdog, Some(candidate.clone()));
        async move {
            valid?;
            Ok(running.await?.map(|hold| Leadership {
                token: hold.fencing_token().unwrap_or_default(),
                inner: OwnedHold::from_future(&handle, hold),
                candidate,
            }))
        }
    }
}

/// The error of a campaign without a wait limit in election `name` that ended without leading
/// (a bug).
fn unbounded_campaign_ended(name: &str) -> LockError {
    LockError::protocol(format!(
        "a campaign without a wait limit in election {name:?} returned without leading"
    ))
}

/// A candidate id: not empty, at most [`MAX_NAME_LEN`] bytes.
fn validate_candidate(candidate: &str) -> Result<(), LockError> {
    if candidate.is_empty() || candidate.len() > MAX_NAME_LEN {
        return Err(LockError::invalid(
            "candidate",
            format!(
                "a candidate id must be 1 to {MAX_NAME_LEN} bytes, got {} bytes",
                candidate.len()
            ),
        ));
    }
    Ok(())
}

impl fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElection")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// This candidate's leadership of a [`LeaderElection`]: it resigns when dropped (or with
/// [`resign`](Leadership::resign)), from any thread.
#[must_use = "the leadership is resigned as soon as it is dropped"]
pub struct Leadership {
    inner: OwnedHold,
    candidate: String,
    token: u64,
}

impl Leadership {
    /// The election's name.
    pub fn election(&self) -> &str {
        self.inner.handle().name()
    }

    /// The id the store keeps this leadership under (`<client id>:owned-<n>`).
    pub fn owner(&self) -> &str {
        self.inner.owner().as_str()
    }

    /// The candidate id this leadership campaigned with.
    pub fn candidate(&self) -> &str {
        &self.candidate
    }

    /// The leadership's fencing token: higher than every earlier leader's. Stamp the leader's
    /// writes with it.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Whether the leadership may have been lost (its lease ran out, or the store no longer
    /// has it): another candidate may lead now.
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// The instant until which the leadership is known to last.
    pub fn lease_deadline(&self) -> Instant {
        self.inner.lease_deadline()
    }

    /// Resigns now and reports how it went ([`LockError::LeaseLost`] if the leadership had
    /// been lost).
    pub fn resign(self) -> Result<(), LockError> {
        self.inner.release()
    }

    /// [`resign`](Leadership::resign) for async code: resigned where it cannot block the
    /// caller's executor, at once, even if the future is dropped.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn resign_async(
        self,
    ) -> impl std::future::Future<Output = Result<(), LockError>> + Send + 'static {
        self.inner.release_async()
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.election())
            .field("candidate", &self.candidate)
            .field("token", &self.token)
            .field("lost", &self.is_lost())
            .finish()
    }
}
