//! Each `.lua` file starts with a header comment: a step's says what it does and what each
//! `KEYS[i]` and `ARGV[i]` is; a preamble's names what it defines. A header that names an
//! index the body does not use, or misses one it does, misleads whoever calls the step.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::{lua_steps, LUA_PREAMBLES};

/// The text of `file` (under `src/scripts`, without `.lua`).
fn read(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/scripts")
        .join(format!("{file}.lua"));
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The header (the comment lines the file starts with) and the code after it, its comments
/// left out.
fn split(text: &str) -> (Vec<&str>, String) {
    let lines: Vec<&str> = text.lines().collect();
    let header_len = lines
        .iter()
        .take_while(|line| line.starts_with("--"))
        .count();
    let code = lines[header_len..]
        .iter()
        .map(|line| line.find("--").map_or(*line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n");
    (lines[..header_len].to_vec(), code)
}

/// The indices of `table` (`KEYS` or `ARGV`) in `text`, as written between the brackets with
/// the spaces left out: `1`, `i+1`, `(i+2)/3+1`.
fn indices(text: &str, table: &str) -> BTreeSet<String> {
    let open = format!("{table}[");
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find(&open) {
        rest = &rest[at + open.len()..];
        let end = rest.find(']').unwrap_or(rest.len());
        found.insert(rest[..end].split_whitespace().collect());
    }
    found
}

/// What is wrong with the header of step `file`, whose text is `text`.
fn step_header_faults(file: &str, text: &str) -> Vec<String> {
    let (header, code) = split(text);
    let mut faults = Vec::new();
    match header.first() {
        None => faults.push(format!("{file}: no header comment")),
        Some(first) if first.starts_with("-- KEYS") || first.starts_with("-- ARGV") => faults.push(
            format!("{file}: the header's first line does not say what the step does"),
        ),
        Some(_) => {}
    }
    let header_text = header.join("\n");
    for table in ["KEYS", "ARGV"] {
        if !header
            .iter()
            .any(|line| line.starts_with(&format!("-- {table}")))
        {
            faults.push(format!("{file}: no `-- {table}` line in the header"));
        }
        let named = indices(&header_text, table);
        let used = indices(&code, table);
        let none = format!("-- {table} none");
        if header.iter().any(|line| line.starts_with(&none)) && !used.is_empty() {
            faults.push(format!("{file}: says `-- {table} none` but uses {used:?}"));
        }
        for index in named.difference(&used) {
            faults.push(format!("{file}: the header names {table}[{index}], unused"));
        }
        for index in used.difference(&named) {
            faults.push(format!(
                "{file}: uses {table}[{index}], not named in the header"
            ));
        }
    }
    faults
}

/// What is wrong with the header of preamble `file`, whose text is `text`.
fn preamble_header_faults(file: &str, text: &str) -> Vec<String> {
    let (header, code) = split(text);
    let mut faults = Vec::new();
    if !header
        .first()
        .is_some_and(|first| first.starts_with("-- Preamble"))
    {
        faults.push(format!("{file}: the header does not say it is a preamble"));
    }
    for table in ["KEYS", "ARGV"] {
        if code.contains(&format!("{table}[")) {
            faults.push(format!("{file}: a preamble reads {table}"));
        }
    }
    let header_text = header.join("\n");
    let names_word = |word: &str| {
        header_text
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|token| token == word)
    };
    // What it leaves defined for the step: its top-level locals and functions.
    for line in code.lines() {
        let Some(local) = line.strip_prefix("local ") else {
            continue;
        };
        let local = local.strip_prefix("function ").unwrap_or(local);
        let name: String = local
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !names_word(&name) {
            faults.push(format!("{file}: defines `{name}`, not named in the header"));
        }
    }
    faults
}

#[test]
fn every_step_header_names_the_keys_and_args_its_body_uses() {
    let steps = lua_steps();
    assert!(!steps.is_empty());
    let faults: Vec<String> = steps
        .iter()
        .flat_map(|(file, _)| step_header_faults(file, &read(file)))
        .collect();
    assert!(faults.is_empty(), "step headers:\n{}", faults.join("\n"));
}

#[test]
fn every_preamble_header_says_so_and_names_what_it_defines() {
    let faults: Vec<String> = LUA_PREAMBLES
        .iter()
        .flat_map(|file| preamble_header_faults(file, &read(file)))
        .collect();
    assert!(
        faults.is_empty(),
        "preamble headers:\n{}",
        faults.join("\n")
    );
}

#[test]
fn a_header_that_misses_or_invents_an_index_is_caught() {
    let body = "redis.call('set', KEYS[1], ARGV[1])\nreturn KEYS[i + 1]\n";
    let good = format!("-- Set it.\n-- KEYS[1] a, KEYS[i + 1] b.\n-- ARGV[1] c.\n{body}");
    assert_eq!(step_header_faults("good", &good), Vec::<String>::new());

    let no_argv_line = format!("-- Set it.\n-- KEYS[1] a, KEYS[i+1] b, ARGV[1] c.\n{body}");
    assert_eq!(step_header_faults("bad", &no_argv_line).len(), 1);

    let missing = format!("-- Set it.\n-- KEYS[1] a.\n-- ARGV[1] c.\n{body}");
    assert_eq!(
        step_header_faults("bad", &missing),
        ["bad: uses KEYS[i+1], not named in the header"]
    );

    let invented =
        format!("-- Set it.\n-- KEYS[1] a, KEYS[i + 1] b.\n-- ARGV[1] c, ARGV[2] d.\n{body}");
    assert_eq!(
        step_header_faults("bad", &invented),
        ["bad: the header names ARGV[2], unused"]
    );

    let none = format!("-- Set it.\n-- KEYS[1] a, KEYS[i + 1] b.\n-- ARGV none\n{body}");
    assert_eq!(step_header_faults("bad", &none).len(), 2);

    // A use in a comment of the body is no use.
    let commented = "-- Get it.\n-- KEYS[1] a.\n-- ARGV none.\nreturn KEYS[1] -- not ARGV[1]\n";
    assert_eq!(step_header_faults("good", commented), Vec::<String>::new());

    let preamble = "-- Preamble: defines f.\nlocal function f() end\nlocal g = 1\n";
    assert_eq!(
        preamble_header_faults("p", preamble),
        ["p: defines `g`, not named in the header"]
    );
}
