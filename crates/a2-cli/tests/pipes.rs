//! Every command's output may go to a pipe whose reader stops early, as in
//! `a2 inspect … | head -1`: the command then ends quietly, with exit status
//! 0 and no panic, and the demo's handlers are not hurt on the way.
//!
//! Each command runs once on a pipe that is full, and whose reader is gone,
//! before it writes, so its every write fails with a broken pipe; and a
//! command whose output is longer than a one-page pipe (4 KiB) runs again
//! on one, its reader closing after the first line. (Reading a short output
//! from a pipe of Linux's default 64 KiB, the command would have written it
//! all before the reader closed, and nothing could fail.)

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::json;

const A2: &str = env!("CARGO_BIN_EXE_a2");

/// The capacity the pipe is shrunk to: one page, Linux's smallest.
const PIPE: usize = 4096;

/// How many bytes `a2 args` writes to stdout when nobody stops reading.
fn output_len(args: &[&str]) -> usize {
    let output = Command::new(A2).args(args).output().expect("a2 runs");
    assert!(output.status.success(), "a2 {args:?} failed");
    output.stdout.len()
}

/// Runs `a2 args` with its stdout on a one-page pipe, reads the first line,
/// closes the pipe, and returns its exit status and stderr.
fn first_line_then_close(args: &[&str]) -> (std::process::ExitStatus, String) {
    // Close-on-exec: the child must not inherit the read end, or its own
    // writes would never find the pipe closed.
    let (reader, writer) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a pipe");
    rustix::pipe::fcntl_setpipe_size(&writer, PIPE).expect("a one-page pipe");
    let child = Command::new(A2)
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .expect("a2 starts");
    let mut first = String::new();
    BufReader::new(File::from(reader))
        .read_line(&mut first)
        .expect("a first line");
    assert!(!first.is_empty(), "a2 {args:?} printed nothing");
    // The reader is dropped here: the pipe is closed. Stderr is read while
    // the child runs on.
    let output = child.wait_with_output().expect("a2 ends");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs `a2 args` with its stdout on a pipe that is full, and whose reader
/// is gone, before the command writes anything: every write it makes fails
/// with a broken pipe, however short its output. Returns its exit status
/// and stderr.
fn closed_before_writing(args: &[&str]) -> (std::process::ExitStatus, String) {
    let (reader, writer) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a pipe");
    rustix::pipe::fcntl_setpipe_size(&writer, PIPE).expect("a one-page pipe");
    let capacity = rustix::pipe::fcntl_getpipe_size(&writer).expect("its size");
    let filled = rustix::io::write(&writer, &vec![b'.'; capacity]).expect("fill it");
    assert_eq!(filled, capacity, "the pipe is full");
    drop(reader);
    let child = Command::new(A2)
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .expect("a2 starts");
    let output = child.wait_with_output().expect("a2 ends");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn assert_no_panic(args: &[&str], (status, stderr): (std::process::ExitStatus, String)) {
    assert!(
        !stderr.contains("panicked"),
        "a2 {args:?} panicked on a closed pipe: {stderr}"
    );
    assert!(
        status.success(),
        "a2 {args:?} ended with {status}: {stderr}"
    );
}

/// `a2 args` ends quietly when its reader goes away before it writes, and,
/// when its whole output is longer than the pipe, after one line.
fn assert_quiet(args: &[&str]) {
    assert_no_panic(args, closed_before_writing(args));
    if output_len(args) > 2 * PIPE {
        assert_no_panic(args, first_line_then_close(args));
    }
}

#[test]
fn the_demo_ends_quietly_when_its_reader_goes_away() {
    let (status, stderr) = first_line_then_close(&["demo", "--think-ms", "5"]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(status.success(), "{status}: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_help_end_quietly_when_their_reader_goes_away() {
    use a2::Store;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("big.db");
    {
        let store = a2::sqlite::SqliteStore::open(&path, Default::default()).unwrap();
        for n in 0..300 {
            let note = a2::NewEvent::new("note", json!({"n": n})).settled();
            store
                .append(&format!("chat-{n:03}"), vec![note])
                .await
                .unwrap();
        }
        let notes = (0..300)
            .map(|n| a2::NewEvent::new("note", json!({"text": format!("message {n}")})).settled())
            .collect();
        store.append("long", notes).await.unwrap();
        store.close().await;
    }
    let store = format!("sqlite:{}", path.display());
    // Both listings outlast the pipe: they are also read a line, then cut.
    for args in [
        ["inspect", "--store", &store].as_slice(),
        ["inspect", "--store", &store, "long"].as_slice(),
    ] {
        assert!(output_len(args) > 2 * PIPE, "a2 {args:?} writes too little");
        assert_quiet(args);
    }
    assert_quiet(&["--help"]);
    assert_quiet(&["serve", "--help"]);
}
