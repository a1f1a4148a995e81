//! The contract between the engine and a store: the backend trait and the steps it is asked
//! for, lock kinds, errors, limits, owner ids, leases and what inspection reports. It uses the
//! time layer only.

pub(crate) mod acquire;
pub mod backend;
pub(crate) mod client_record;
pub(crate) mod error;
pub(crate) mod hand_off;
pub(crate) mod heard;
pub(crate) mod inspection;
pub(crate) mod kind;
pub(crate) mod lease;
pub(crate) mod limits;
pub(crate) mod lock_info;
pub(crate) mod loss;
pub(crate) mod owner;
pub(crate) mod redact;
pub(crate) mod release;
pub(crate) mod reminders;
pub(crate) mod synchronizer;
pub(crate) mod synchronizer_info;
