//! Every command's output may go to a pipe whose reader stops early, as in
//! `a2 inspect … | head -1`: the command then ends quietly, with exit status
//! 0 and no panic, and the demo's handlers are not hurt on the way.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const A2: &str = env!("CARGO_BIN_EXE_a2");

/// Runs `a2 args`, reads the first line of its stdout, closes the pipe, and
/// returns its exit status and stderr.
fn first_line_then_close(args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(A2)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a2 starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("a first line");
    assert!(!first.is_empty(), "a2 {args:?} printed nothing");
    // The reader is dropped here: the pipe is closed.
    let output = child.wait_with_output().expect("a2 ends");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn assert_quiet(args: &[&str]) {
    let (status, stderr) = first_line_then_close(args);
    assert!(
        !stderr.contains("panicked"),
        "a2 {args:?} panicked on a closed pipe: {stderr}"
    );
    assert!(
        status.success(),
        "a2 {args:?} ended with {status}: {stderr}"
    );
}

#[test]
fn the_demo_ends_quietly_when_its_reader_goes_away() {
    assert_quiet(&["demo", "--think-ms", "5"]);
}

#[test]
fn inspect_and_help_end_quietly_when_their_reader_goes_away() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = format!("sqlite:{}", dir.path().join("demo.db").display());
    let demo = Command::new(A2)
        .args(["demo", "--think-ms", "1", "--store", &store])
        .output()
        .expect("a2 demo runs");
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    assert_quiet(&["inspect", "--store", &store]);
    assert_quiet(&["inspect", "--store", &store, "alice"]);
    assert_quiet(&["--help"]);
}
