//! Several store instances, and several processes, creating one new
//! database file at the same moment all open it: SQLite serializes their checks and the schema's
//! creation, and each finds the file either empty (and creates the
//! schema) or an a2 database (and uses it).

use std::sync::{Arc, Barrier};

use a2_sqlite::{SqliteOptions, SqliteStore};

#[test]
fn instances_creating_one_new_file_at_once_all_open_it() {
    let dir = tempfile::Builder::new()
        .prefix("creation")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    for round in 0..40 {
        let path = dir.path().join(format!("a2-{round}.db"));
        let barrier = Arc::new(Barrier::new(8));
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteStore::open(&path, SqliteOptions::default()).map(drop)
                })
            })
            .collect();
        for opener in openers {
            if let Err(error) = opener.join().expect("no panic") {
                panic!(
                    "round {round}: an instance could not open the new file: {error} ({:?})",
                    std::error::Error::source(&error)
                );
            }
        }
    }
}

const ROLE: &str = "A2_CREATION_PATH";
const AT: &str = "A2_CREATION_AT_MS";

fn wall_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Not a test on its own: a spawned copy of this binary that opens the file
/// its parent names at the wall-clock time it names, and says how it went.
#[test]
#[ignore = "run by processes_creating_one_new_file_at_once_all_open_it in a child process"]
fn child_opener() {
    let (Ok(path), Ok(at)) = (std::env::var(ROLE), std::env::var(AT)) else {
        panic!("child_opener runs only in a process spawned by this file's tests");
    };
    let at: u128 = at.parse().unwrap();
    while wall_ms() < at {
        std::hint::spin_loop();
    }
    match SqliteStore::open(std::path::Path::new(&path), SqliteOptions::default()) {
        Ok(_) => println!("opened"),
        Err(error) => println!("failed: {error} ({:?})", std::error::Error::source(&error)),
    }
}

/// Several processes creating one new database file at the same moment all
/// open it (each process has its own connections and hub, so SQLite's file
/// locks alone keep them apart).
#[test]
fn processes_creating_one_new_file_at_once_all_open_it() {
    let dir = tempfile::Builder::new()
        .prefix("creation-processes")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    for round in 0..5 {
        let path = dir.path().join(format!("a2-{round}.db"));
        // Far enough ahead for every process to start and wait.
        let at = wall_ms() + 400;
        let children: Vec<_> = (0..6)
            .map(|_| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--ignored",
                        "--exact",
                        "child_opener",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(ROLE, &path)
                    .env(AT, at.to_string())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn a child process")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("opened"),
                "round {round}: a process could not open the new file: {text}"
            );
        }
    }
}
