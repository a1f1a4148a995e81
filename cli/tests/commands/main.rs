//! The `dlock` binary run as a user runs it, against real servers: `dlock run`, the inspection
//! commands, and the PostgreSQL store.

mod etcd;
mod inspect;
mod job;
mod postgres;
mod run;
mod secrets;
mod store_text;
mod support;
mod top;
