//! `a2 demo --store sqlite:PATH` keeps its sessions in the file: a second
//! run continues the first run's sessions, and `a2 inspect` reads them.

use std::process::Command;

const A2: &str = env!("CARGO_BIN_EXE_a2");

fn a2(args: &[&str]) -> String {
    let output = Command::new(A2).args(args).output().expect("a2 runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "a2 {args:?} failed: {stderr}\n{stdout}"
    );
    stdout
}

/// The indexes of the live-feed lines of `session` (`  0.12s bob    #3  …`).
fn feed_indexes(stdout: &str, session: &str) -> Vec<u64> {
    stdout
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                [_, label, index, ..] if *label == session => {
                    index.strip_prefix('#').and_then(|i| i.parse().ok())
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn demo_twice_on_sqlite_continues_the_first_runs_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("demo.db").display());

    let first = a2(&["demo", "--think-ms", "5", "--store", &url]);
    assert!(!first.contains("continuing"), "{first}");
    assert!(
        first.contains("demo finished: events 45, attempts 13, failures 5, dead letters 1,"),
        "unexpected summary:\n{first}"
    );

    let second = a2(&["demo", "--think-ms", "5", "--store", &url]);
    assert!(
        second.contains("continuing 3 sessions with 45 events from an earlier run"),
        "{second}"
    );
    // The same work again, counted on top of the first run's.
    assert!(
        second.contains("demo finished: events 90, attempts 26, failures 10, dead letters 2,"),
        "unexpected summary:\n{second}"
    );
    // The live feed shows the new events only: bob's first new one is #13.
    assert_eq!(feed_indexes(&first, "bob").first(), Some(&1), "{first}");
    assert_eq!(feed_indexes(&second, "bob").first(), Some(&13), "{second}");
    // The transcripts hold both runs' conversations.
    let lisbon = second.matches("user      Plan a weekend in Lisbon").count();
    assert_eq!(lisbon, 2, "{second}");

    let listing = a2(&["inspect", "--store", &url]);
    let bob = listing
        .lines()
        .find(|l| l.split_whitespace().next() == Some("bob"))
        .unwrap_or_else(|| panic!("bob's session listed:\n{listing}"));
    let columns: Vec<&str> = bob.split_whitespace().collect();
    // events, pending, dead, attempts, failures
    assert_eq!(columns[1..], ["24", "0", "2", "10", "6"]);
}

#[test]
fn an_unknown_store_url_is_refused_with_the_accepted_forms() {
    let output = Command::new(A2)
        .args(["demo", "--store", "postgres://x"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("memory, sqlite:PATH or redis://"),
        "{stderr}"
    );
}
