//! A server backend plugs into the tests through one harness type in test-support (a type
//! implementing `ServerEnv`), from which every suite runs by macro. This test reads the sources
//! and fails when a harness is missing from a suite: every type implementing `ServerEnv` in
//! test-support must be named by a `conformance_suite!`, `server_suite!`, `lease_model_suite!`
//! and `async_suite!` line somewhere under `tests/`, and its backend (the harness's `NAME`)
//! must be one of the fault suite's `BACKENDS`. A harness whose store has messages anyone may
//! send (it implements `MessageChannel`) must be run by `forged_grants_suite!` as well.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The suite macros every server harness must be run by.
const SUITES: [&str; 4] = [
    "conformance_suite!",
    "server_suite!",
    "lease_model_suite!",
    "async_suite!",
];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).expect("read a source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                found.push(path);
            }
        }
    }
    found
}

/// The code of `path`, its comment lines left out.
fn code(path: &Path) -> String {
    fs::read_to_string(path)
        .expect("read a source file")
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifiers in `text`.
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty())
}

/// The types test-support implements `ServerEnv` for (`impl ServerEnv for RedisServer`, by any
/// path to the trait).
fn harnesses(root: &Path) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for path in sources(&root.join("test-support/src")) {
        let code = code(&path);
        for (at, _) in code.match_indices("ServerEnv for ") {
            let line_start = code[..at].rfind('\n').map_or(0, |start| start + 1);
            if !code[line_start..at].trim_start().starts_with("impl") {
                continue;
            }
            // The type's path ends where its body (or generics) starts: its last segment.
            let after = &code[at + "ServerEnv for ".len()..];
            let path = after
                .split(|c: char| c == '{' || c == '<' || c.is_whitespace())
                .next()
                .unwrap_or_default();
            let harness = path.rsplit("::").next().unwrap_or_default();
            assert!(!harness.is_empty(), "a harness type after `ServerEnv for `");
            let name = quoted_after(after, "const NAME: &'static str = ")
                .unwrap_or_else(|| panic!("{harness}: no `const NAME` in its impl"));
            found.insert((harness.to_owned(), name.to_owned()));
        }
    }
    found
}

/// The types test-support implements `MessageChannel` for.
fn message_channels(root: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for path in sources(&root.join("test-support/src")) {
        let code = code(&path);
        for (at, _) in code.match_indices("MessageChannel for ") {
            let after = &code[at + "MessageChannel for ".len()..];
            if let Some(harness) = identifiers(after).next() {
                found.insert(harness.to_owned());
            }
        }
    }
    found
}

/// The string literal right after the first `marker` in `text`.
fn quoted_after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let rest = rest.strip_prefix('"')?;
    Some(&rest[..rest.find('"')?])
}

/// The names of the fault suite's backends (`name: "redis"` in its service entries).
fn fault_suite_backends(root: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for path in sources(&root.join("fault-suite/src/service")) {
        let code = code(&path);
        if let Some(entry) = code.find("Backend = Backend {") {
            if let Some(name) = quoted_after(&code[entry..], "name: ") {
                found.insert(name.to_owned());
            }
        }
    }
    found
}

/// For each suite macro, the identifiers named in its invocations under `tests/`.
fn invocations<'a>(root: &Path, suites: &[&'a str]) -> Vec<(&'a str, BTreeSet<String>)> {
    let files: Vec<String> = sources(&root.join("tests"))
        .iter()
        .map(|path| code(path))
        .collect();
    suites
        .iter()
        .map(|suite| {
            let mut named = BTreeSet::new();
            for code in &files {
                for (at, _) in code.match_indices(&format!("{suite}(")) {
                    // A whole macro name, not the tail of a longer one.
                    let before = code[..at].chars().next_back();
                    if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                        continue;
                    }
                    let arguments = &code[at + suite.len() + 1..];
                    let arguments = &arguments[..arguments.find(')').expect("a closed invocation")];
                    named.extend(identifiers(arguments).map(str::to_owned));
                }
            }
            (*suite, named)
        })
        .collect()
}

#[test]
fn every_server_harness_is_run_by_every_suite() {
    // The workspace: this package is its `tests/` folder.
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let harnesses = harnesses(root);
    let types: BTreeSet<&str> = harnesses
        .iter()
        .map(|(harness, _)| harness.as_str())
        .collect();
    for known in ["RedisServer", "PostgresServer", "EtcdCluster"] {
        assert!(
            types.contains(known),
            "the harness {known} was not found among {types:?}: the scan is broken"
        );
    }
    let mut missing = Vec::new();
    for (suite, named) in invocations(root, &SUITES) {
        for harness in &types {
            if !named.contains(*harness) {
                missing.push(format!("{suite}({harness})"));
            }
        }
    }
    let channels = message_channels(root);
    assert!(
        channels.contains("RedisServer"),
        "RedisServer's MessageChannel was not found: the scan is broken"
    );
    for (suite, named) in invocations(root, &["forged_grants_suite!"]) {
        for harness in &channels {
            if !named.contains(harness) {
                missing.push(format!("{suite}({harness})"));
            }
        }
    }
    let fault_suite = fault_suite_backends(root);
    for (harness, name) in &harnesses {
        if !fault_suite.contains(name) {
            missing.push(format!(
                "a fault-suite service named {name:?} for {harness} (fault-suite/src/service/)"
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "server harnesses not run by every suite (docs/architecture.md, \"Adding a backend\"): {}",
        missing.join(", ")
    );
}
