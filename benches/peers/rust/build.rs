// Records the rslock version resolved in Cargo.lock so the driver can report it.
use std::{env, fs, path::Path};

fn main() {
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap();
    let lock = Path::new(&dir).join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = fs::read_to_string(&lock).unwrap_or_default();
    let mut version = String::from("unknown");
    let mut in_rslock = false;
    for line in text.lines() {
        let line = line.trim();
        if line == "[[package]]" {
            in_rslock = false;
        } else if line == "name = \"rslock\"" {
            in_rslock = true;
        } else if in_rslock {
            if let Some(v) = line.strip_prefix("version = \"") {
                version = v.trim_end_matches('"').to_string();
                break;
            }
        }
    }
    println!("cargo:rustc-env=RSLOCK_VERSION={version}");
}
