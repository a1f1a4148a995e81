//! `dlock-fault-suite`: K worker processes × T threads doing acquire → read a shared register →
//! write it (with the fencing token through `dlocks::fence`, when fenced) → release, against
//! real `redis-server` (or, with `--backend postgres`, PostgreSQL; `--backend etcd`, etcd)
//! processes while faults are injected; every operation is logged with wall-clock instants and
//! the history is checked afterwards. `docs/reliability.md` has a full run's table.
//!
//! ```text
//! cargo run --release -p dlock-fault-suite -- [--quick] [--faults LIST] [--modes LIST] ...
//! ```

mod checker;
mod history;
mod injector;
mod options;
mod register;
mod report;
mod run;
mod seeded_bug;
mod service;
mod worker;
mod worker_pool;

mod support;

use std::process::ExitCode;

use options::{Options, UsageError, USAGE};
use report::{Row, HEADER};

fn main() -> ExitCode {
    if let Ok(spec) = std::env::var(worker::WORKER_ENV) {
        return ExitCode::from(u8::try_from(worker::run(&spec)).unwrap_or(1));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match Options::parse(&args) {
        Ok(options) => options,
        Err(UsageError(message)) if message.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(UsageError(message)) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let dir = std::env::temp_dir().join(format!("dlock-fault-suite-{}", std::process::id()));
    if let Err(error) = std::fs::create_dir_all(&dir) {
        eprintln!("error: cannot create {}: {error}", dir.display());
        return ExitCode::from(1);
    }
    let topology = match options.topology {
        Some(topology) => format!(" ({})", topology.name),
        None => String::new(),
    };
    let seeded = match options.seeded_bug {
        Some(bug) => format!(", seeded bug {}", bug.name()),
        None => String::new(),
    };
    println!(
        "dlock fault suite on {}{topology}: {} processes × {} threads, lease {:?}, register on {}{seeded}",
        options.backend.name(),
        options.processes,
        options.threads,
        options.lease,
        options.register.name()
    );
    println!("{HEADER}");
    let mut rows = Vec::new();
    for &fault in &options.faults {
        for &mode in &options.modes {
            let run_dir = dir.join(format!("{}-{}", fault.name(), mode.name()));
            let _ = std::fs::create_dir_all(&run_dir);
            let findings = run::run(&options, fault, mode, &run_dir);
            let row = Row {
                fault,
                mode,
                findings,
            };
            println!("{}", row.markdown());
            for note in &row.findings.notes {
                println!("  note: {note}");
            }
            rows.push(row);
        }
    }
    if std::env::var_os("DLOCK_FAULT_SUITE_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Some(path) = &options.json {
        let value = serde_json::Value::Array(rows.iter().map(Row::json).collect());
        if let Err(error) = std::fs::write(path, value.to_string()) {
            eprintln!("error: cannot write {}: {error}", path.display());
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
