//! Passwords never print: `dlock` run with each tricky spelling of a URL with a password
//! against a closed port, its whole output (errors, usage messages, JSON) read for any part of
//! the password.

use crate::support;

use std::process::Command;

use support::{code, stderr, stdout};

/// The parts of every password below: none of them may be printed.
const PARTS: [&str; 4] = ["Alpha7", "Bravo8", "Charlie9", "Delta0"];

/// URLs with the password `Alpha7<sep>Bravo8...` spelled in every way a user writes it, each
/// naming port `port`, where nothing listens.
fn spellings(port: u16) -> Vec<String> {
    let host = format!("127.0.0.1:{port}");
    vec![
        format!("redis://app:Alpha7Bravo8@{host}/0"),
        format!("redis://app:Alpha7/Bravo8@{host}/0"),
        format!("redis://:Alpha7@Bravo8@{host}"),
        format!("redis://app:Alpha7:Bravo8:Charlie9@{host}"),
        format!("redis://app:Alpha7?Bravo8#Charlie9@{host}/0"),
        format!("redis://app:Alpha7%2FBravo8%40Charlie9@{host}"),
        format!("rediss://app:Alpha7/Bravo8@{host}"),
        format!("redis://app:Alpha7/Bravo8@127.0.0.1:99999"),
        "redis+unix:///nonexistent/dlock.sock?db=0&pass=Alpha7Bravo8".to_owned(),
        "redis:/app:Alpha7Bravo8@nowhere".to_owned(),
        format!("redis-sentinel://app:Alpha7/Bravo8@{host}/mymaster"),
        format!("redis-sentinel://app:Alpha7/Bravo8@{host}"),
        format!("postgres://app:Alpha7/Bravo8@{host}/app"),
        format!("postgres://app:Alpha7@Bravo8@{host}/app"),
        format!("postgresql://app@{host}/app?password=Alpha7Bravo8"),
        format!("postgres://{host}/app?user=app&password=Alpha7@Bravo8&sslmode=disable"),
        format!("postgres://app:Alpha7%2FBravo8@{host}/app?sslpassword=Charlie9Delta0"),
        format!("host=127.0.0.1 port={port} user=app password = 'Alpha7 Bravo8'"),
        format!("host=127.0.0.1 port={port} password=Alpha7\\ Bravo8 user=app dbname=app"),
        format!("host=127.0.0.1 port={port} password='Alpha7\\'Bravo8"),
    ]
}

#[test]
fn no_spelling_of_a_password_is_printed() {
    let port = support::redis_server::free_port();
    let commands: [&[&str]; 7] = [
        &["status", "x"],
        &["status", "x", "--json"],
        &["list"],
        &["list", "--json"],
        &["leader", "x", "--json"],
        &["force-unlock", "x"],
        &["run", "x", "--wait", "0", "--", "true"],
    ];
    for url in spellings(port) {
        for args in commands {
            // By option and by environment alike.
            let by_option = Command::new(env!("CARGO_BIN_EXE_dlock"))
                .env_remove("REDIS_URL")
                .env_remove("DLOCK_URL")
                .arg("--backend")
                .arg(&url)
                .args(args)
                .output()
                .expect("dlock runs");
            let by_variable = Command::new(env!("CARGO_BIN_EXE_dlock"))
                .env_remove("REDIS_URL")
                .env("DLOCK_URL", &url)
                .args(args)
                .output()
                .expect("dlock runs");
            for output in [by_option, by_variable] {
                assert_ne!(code(&output), 0, "{url} {args:?} cannot succeed");
                let printed = format!("{}{}", stdout(&output), stderr(&output));
                assert!(!printed.is_empty(), "{url} {args:?} says what failed");
                for part in PARTS {
                    assert!(
                        !printed.contains(part),
                        "{url} {args:?} printed {part:?}: {printed}"
                    );
                }
            }
        }
    }
}
