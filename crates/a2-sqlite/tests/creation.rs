//! Several store instances creating one new database file at the same
//! moment all open it: SQLite serializes their checks and the schema's
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
