//! `dlock`: distributed locks from the shell, on Redis (shared with Redisson (Java) and dlock
//! services through the same keys) or PostgreSQL.
//!
//! ```sh
//! dlock run nightly-report -- ./report.sh --full
//! dlock status nightly-report --json
//! ```

mod args;
mod connect;
mod descendants;
mod duration_arg;
mod escape;
mod exit_code;
mod force_unlock;
mod inspect;
mod job;
mod keeper;
mod run;
mod schemes;
mod signals;
mod snapshot;
mod supervise;
mod terminal;
mod top;
mod watch;

use args::{Cli, Command};

fn main() {
    // `dlock run` runs itself again as the keeper of its job.
    let mut raw = std::env::args_os().skip(1);
    if raw.next().is_some_and(|first| first == job::KEEPER_ARG) {
        std::process::exit(keeper::keep(&raw.collect::<Vec<_>>()));
    }
    let cli = Cli::from_env();
    let target = cli.target();
    let outcome = match &cli.command {
        Command::Run(args) => run::run(&target, args),
        Command::Status { name, json, check } => inspect::status(&target, name, *json, *check),
        Command::List {
            pattern,
            limit,
            json,
        } => inspect::list(&target, pattern, *limit, *json),
        Command::ForceUnlock {
            name,
            if_holder,
            json,
        } => force_unlock::force_unlock(&target, name, if_holder.as_deref(), *json),
        Command::PostgresSchema {
            grant_to,
            ephemeral,
            fence: false,
        } => inspect::postgres_schema(target.schema.as_deref(), grant_to.as_deref(), *ephemeral),
        Command::PostgresSchema {
            grant_to,
            fence: true,
            ..
        } => inspect::postgres_fence(target.schema.as_deref(), grant_to.as_deref()),
        Command::Leader { name, json } => inspect::leader(&target, name, *json),
        Command::Top { pattern } => top::top(&target, pattern),
        Command::Watch { name, json, count } => watch::watch(&target, name, *json, *count),
    };
    let code = match outcome {
        Ok(code) => code,
        Err(failure) => {
            // Messages may quote what the store or a server said.
            eprintln!("dlock: {}", escape::terminal_safe(&failure.to_string()));
            failure.code
        }
    };
    std::process::exit(code);
}
