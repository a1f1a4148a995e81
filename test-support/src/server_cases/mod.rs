//! Behaviours of a lock server that the backends keeping their locks on one (Redis,
//! PostgreSQL) share: written once against [`ServerEnv`], run on each backend by
//! [`server_suite!`](crate::server_suite). What differs between backends is said by the
//! harness (its associated constants and methods), never by an argument of a case.

pub mod faults;
pub mod fenced_writes;
pub mod forged_grants;
pub mod granted_heads;
pub mod multi;
pub mod processes;
pub mod replayed_releases;
pub mod synchronizer_processes;

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::{LockClient, LockError};

use crate::differential::ProxyTarget;
use crate::env::TestEnv;
use crate::lease_model::ServerModel;
use crate::tcp_proxy::TcpProxy;

/// A real server of one backend, started for one test, and what the shared cases need to see
/// of it besides dlock's public API. Every suite runs on a server backend through this one
/// type: the conformance suite (on [`ServerEnv::conformance_env`]), the server cases, the lease
/// model and the differential test.
pub trait ServerEnv: Sized + Sync {
    /// The backend's short name, in reports.
    const NAME: &'static str;

    /// Starts a server of its own.
    fn start() -> Self;

    /// The conformance suite's environment: a server of its own and a backend on it.
    fn conformance_env() -> impl TestEnv;

    /// The port it listens on.
    fn port(&self) -> u16;

    /// The URL another process connects to it by.
    fn url(&self) -> String;

    /// A client on the server with bounded test timeouts.
    fn client(&self) -> LockClient;

    /// A backend on the server with bounded test timeouts, the ones `timeouts` names replaced.
    fn backend_with(&self, timeouts: Timeouts) -> Arc<dyn DistributedLock>;

    /// A backend on the server through `proxy`, with the harness's timeouts but those
    /// `timeouts` names.
    fn backend_through(&self, proxy: &TcpProxy, timeouts: Timeouts) -> Arc<dyn DistributedLock>;

    /// A URL of this backend naming a port on which nothing listens.
    fn url_with_nothing_listening() -> String;

    /// Makes a backend for `url` that gives up connecting after `connect_timeout`.
    fn connect_within(url: &str, connect_timeout: Duration) -> Result<(), LockError>;

    /// URLs this backend refuses as configuration errors (another scheme, a bad port, ...);
    /// one of them carries the password `hunter2`, which no error may show.
    const BAD_URLS: &'static [&'static str];

    /// Builds of this backend with settings it refuses (each must be a configuration error).
    fn bad_settings() -> Vec<Result<(), LockError>>;

    /// Words of the error of a request that got no answer within its timeout.
    const TIMEOUT_WORDS: &'static str;

    /// Kills the server (`kill -9`).
    fn kill(&mut self);

    /// Starts the killed server again, on the same port and data directory.
    fn restart(&mut self);

    /// Stops the server from answering (`SIGSTOP`).
    fn pause(&self);

    /// Lets a paused server answer again.
    fn resume(&self);

    /// A client on the server at `url`, made as another process makes one.
    fn connect(url: &str) -> LockClient;

    /// The backend on the server at `url` (for a client built with settings of its own).
    fn connect_backend(url: &str) -> Arc<dyn DistributedLock>;

    /// A client whose pool keeps `size` connections.
    fn client_with_pool(&self, size: u32) -> LockClient;

    /// A client on the server through `proxy`, whose requests the proxy can recognize by
    /// [`ServerEnv::RELEASE_REQUEST`], with a 2 s bound on each answer.
    fn client_through(&self, proxy: &TcpProxy) -> LockClient;

    /// Text that a release request carries on the wire (and no other request).
    const RELEASE_REQUEST: &'static str;

    /// How many release records the server keeps (what a release writes so that one sent
    /// again after its reply was lost answers as it first did: Redisson's unlock latch on
    /// Redis).
    fn release_records(&self) -> usize;

    /// Whether a release keeps a record of its answer. Without one (etcd), a release sent
    /// again that finds its hold gone answers "gone" (the holder is told the lease was lost),
    /// whatever its first run did: the hold may have ended otherwise, and no "released" is
    /// inferred.
    const KEEPS_RELEASE_RECORDS: bool = true;

    /// How many records a reentrant release that found no live hold leaves (1 where the
    /// backend records "not held" too, so that one sent again answers the same).
    const RECORDS_LEFT_BY_A_RELEASE_OF_NOTHING: usize;

    /// How many locks the server keeps (release records aside).
    fn locks(&self) -> usize;

    /// Makes ready the counter that [`ServerEnv::counter`] reads and writes, before processes
    /// race to it.
    fn prepare_counter(&self) {}

    /// A plain connection (not through dlock) to a counter on the server at `url`: a read and
    /// a separate write, which only a lock keeps together.
    fn counter(url: &str) -> Box<dyn Counter>;

    /// How much work the cases give one server of this backend (within CI's time).
    const LOAD: Load;

    /// The lease model's and the differential test's scale on this backend.
    fn lease_model() -> ServerModel;

    /// Brings the server to where one that has served the library for a while is, before a
    /// test cuts replies: a cut reply must be the answer of a step, not of the backend's first
    /// meeting with the server (Redis answers a script's first EVALSHA NOSCRIPT, nothing done,
    /// and the backend sends it again with its script). The default: nothing to do.
    fn warm(&self) {}

    /// Texts (all of them) that the request of a step writing on lock `name` carries on the
    /// wire, by which the proxy finds the request whose reply a case cuts. By default the name,
    /// which every request carries as it is.
    fn step_request(&self, name: &str) -> Vec<String> {
        vec![name.to_owned()]
    }

    /// How the differential test finds a step's requests on the wire. By default by the lock's
    /// name, which every request carries as it is; a backend that encodes names, or whose
    /// gateway drops a request held up past its timeout, says so here.
    fn differential_target(&self, target: ProxyTarget) -> ProxyTarget {
        target
    }
}

/// How much work a case gives one server of a backend.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Processes incrementing one counter under one lock.
    pub processes: usize,
    /// Threads in each of them.
    pub threads: usize,
    /// Increments by each thread.
    pub increments: i64,
    /// Rounds of each of the two threads taking one multi-lock in opposite orders.
    pub multi_lock_rounds: usize,
}

/// Timeouts of a backend in a test; `None` keeps the harness's.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timeouts {
    /// How long a request waits for its answer (Redis's response timeout, PostgreSQL's
    /// statement timeout).
    pub answer: Option<Duration>,
    /// How long connecting may take.
    pub connect: Option<Duration>,
    /// How long a call waits for a pooled connection.
    pub checkout: Option<Duration>,
}

/// A value on the server read and written with plain commands.
pub trait Counter {
    /// The value (0 before the first write).
    fn read(&mut self) -> i64;
    /// Sets the value.
    fn write(&mut self, value: i64);
    /// Adds `delta` to the value in one command (atomic on the server); answers the value after.
    fn add(&mut self, delta: i64) -> i64;
}

/// Instantiates every shared server case (one module of tests per module of
/// [`server_cases`](crate::server_cases)) for the server harness `$server`, a type implementing
/// [`ServerEnv`]. The cases that start other processes run this binary again: each module's
/// `helper` test plays their role.
#[macro_export]
macro_rules! server_suite {
    ($server:ty) => {
        /// The cases every server backend shares (`dlock_test_support::server_cases`).
        mod server_cases {
            use super::*;

            /// The harness the cases run on.
            type Harness = $server;

            $crate::server_suite!(@module faults;
                connecting_to_nothing_fails_as_unavailable_within_the_connect_timeout,
                bad_urls_and_settings_are_configuration_errors,
                a_killed_server_makes_calls_fail_and_the_holder_is_told_then_locks_work_after_a_restart,
                a_paused_server_makes_calls_fail_instead_of_hanging_and_a_hold_paused_past_its_lease_is_lost,
                a_hold_on_a_silent_server_is_reported_lost_at_its_deadline_while_the_renewal_waits,
                a_call_to_a_silent_server_returns_within_one_answer_timeout,
            );
            $crate::server_suite!(@module replayed_releases;
                an_unlock_whose_reply_was_lost_is_answered_as_it_first_was,
                a_release_that_found_nothing_reports_the_loss,
                two_hundred_pairs_on_distinct_names_leave_no_garbage,
                a_set_once_step_whose_reply_was_lost_answers_as_it_first_did,
                a_release_retried_after_its_hold_ran_out_and_was_forced_reports_the_loss,
                a_hold_made_again_under_its_id_is_released_once,
            );
            $crate::server_suite!(@module multi;
                members_on_two_servers_and_in_memory_are_taken_all_or_none_without_deadlock,
            );
            $crate::server_suite!(@helped processes;
                a_lock_held_by_a_killed_process_is_taken_after_its_lease,
                processes_of_threads_lose_no_update,
            );
            $crate::server_suite!(@helped synchronizer_processes;
                six_processes_never_hold_more_permits_than_the_semaphore_has,
                a_permit_held_by_a_killed_process_comes_back_within_its_lease,
                a_killed_leader_is_replaced_within_its_lease_by_a_higher_token,
            );
        }
    };
    (@module $module:ident; $($case:ident,)*) => {
        mod $module {
            $(
                #[test]
                fn $case() {
                    $crate::server_cases::$module::$case::<super::Harness>();
                }
            )*
        }
    };
    // Cases that start this binary again as helper processes: they name this module, whose
    // `helper` test plays the helpers' roles.
    (@helped $module:ident; $($case:ident,)*) => {
        mod $module {
            #[test]
            fn helper() {
                $crate::server_cases::$module::helper::<super::Harness>();
            }

            $(
                #[test]
                fn $case() {
                    $crate::server_cases::$module::$case::<super::Harness>(module_path!());
                }
            )*
        }
    };
}
