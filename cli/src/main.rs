//! `dlock`: distributed locks from the shell, on Redis (shared with Redisson (Java) and dlock
//! services through the same keys) or PostgreSQL.
//!
//! ```sh
//! dlock run nightly-report -- ./report.sh --full
//! dlock status nightly-report --json
//! ```

mod args;
mod child;
mod connect;
mod duration_arg;
mod exit_code;
mod inspect;
mod run;
mod signals;
mod snapshot;
mod top;
mod watch;

use args::{Cli, Command};

fn main() {
    let cli = Cli::from_env();
    let url = cli.url();
    let url = url.as_str();
    let outcome = match &cli.command {
        Command::Run(args) => run::run(url, args),
        Command::Status { name, json } => inspect::status(url, name, *json),
        Command::List {
            pattern,
            limit,
            json,
        } => inspect::list(url, pattern, *limit, *json),
        Command::ForceUnlock { name, json } => inspect::force_unlock(url, name, *json),
        Command::PostgresSchema {
            schema,
            grant_to,
            ephemeral,
        } => inspect::postgres_schema(schema, grant_to.as_deref(), *ephemeral),
        Command::Leader { name, json } => inspect::leader(url, name, *json),
        Command::Top { pattern } => top::top(url, pattern),
        Command::Watch { name, json, count } => watch::watch(url, name, *json, *count),
    };
    let code = match outcome {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("dlock: {failure}");
            failure.code
        }
    };
    std::process::exit(code);
}
