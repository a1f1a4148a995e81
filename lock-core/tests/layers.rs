//! The crate's layers, checked on its own source: each module uses only the layers below its
//! own (time, then contract, engine, handles, and the client on top), so no import circle
//! crosses a layer; and no source file grows past a size one reader can hold in mind.
//!
//! `cargo test -p dlock-core --test layers` prints every upward import it finds.

use std::fs;
use std::path::{Path, PathBuf};

/// The layers, lowest first. A file's layer is its folder under `src/` (or, for a file at the
/// top, its name).
const LAYERS: [&str; 5] = ["time", "contract", "engine", "handles", "client"];

/// The longest a source file may grow, in lines.
const MAX_LINES: usize = 600;

fn source_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|error| panic!("reading {dir:?}: {error}"));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layer a path under `src/` belongs to, or `None` for `lib.rs`, which only declares the
/// layers and re-exports what users name.
fn layer_of_file(relative: &Path) -> Option<usize> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let first = first.strip_suffix(".rs").unwrap_or(first);
    LAYERS.iter().position(|layer| *layer == first)
}

/// The layer a `crate::…` path names, from its first segment; `backend` is the contract's
/// public module, re-exported at the crate root for backend implementors.
fn layer_of_path(first_segment: &str) -> Option<usize> {
    let segment = if first_segment == "backend" {
        "contract"
    } else {
        first_segment
    };
    LAYERS.iter().position(|layer| *layer == segment)
}

/// Every `crate::<segment>` in `code`, with its line number, leaving comments (doc links
/// included) out: only what the compiler resolves counts.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in code.lines().enumerate() {
        let line = match line.find("//") {
            Some(comment) => &line[..comment],
            None => line,
        };
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let segment: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push((number + 1, segment));
            rest = after;
        }
    }
    found
}

#[test]
fn every_import_points_to_a_lower_layer_or_its_own() {
    let root = src();
    let mut files = Vec::new();
    source_files(&root, &mut files);
    files.sort();
    assert!(files.len() > 20, "found only {} source files", files.len());
    let mut upward = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&root).expect("a file under src/");
        let Some(own) = layer_of_file(relative) else {
            assert_eq!(relative, Path::new("lib.rs"), "{relative:?} is in no layer");
            continue;
        };
        let code = fs::read_to_string(file).expect("a readable source file");
        for (line, segment) in crate_paths(&code) {
            match layer_of_path(&segment) {
                Some(target) if target > own => upward.push(format!(
                    "{}:{line}: the {} layer uses crate::{segment} (the {} layer, above it)",
                    relative.display(),
                    LAYERS[own],
                    LAYERS[target]
                )),
                Some(_) => {}
                None => upward.push(format!(
                    "{}:{line}: crate::{segment} names no layer (name items by their layer's path)",
                    relative.display()
                )),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layers:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_source_file_is_longer_than_one_reader_can_hold() {
    let root = src();
    let mut files = Vec::new();
    source_files(&root, &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = fs::read_to_string(file)
                .expect("a readable source file")
                .lines()
                .count();
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", file.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_check_finds_an_upward_import() {
    let paths = crate_paths("use crate::client::Thing; // crate::handles in a comment\n");
    assert_eq!(paths, vec![(1, "client".to_owned())]);
    assert_eq!(layer_of_path("backend"), layer_of_path("contract"));
    assert!(layer_of_path("client") > layer_of_file(Path::new("engine/hold.rs")));
}
