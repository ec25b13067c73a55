//! `a2 demo` runs to completion on the memory store: exit code 0, and its
//! summary shows every event processed, the flaky tool retried, and exactly
//! the poisoned message dead-lettered.

use std::process::Command;

#[test]
fn demo_runs_to_completion_on_the_memory_store() {
    let output = Command::new(env!("CARGO_BIN_EXE_a2"))
        .args(["demo", "--think-ms", "5"])
        .output()
        .expect("a2 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "a2 demo failed: {stderr}\n{stdout}"
    );
    assert!(
        !stdout.contains('\x1b'),
        "no colours when stdout is not a terminal"
    );
    // 8 user messages: 7 answered (one through a tool call that fails twice,
    // 3 attempts) and one poisoned (3 failed attempts, dead-lettered).
    assert!(
        stdout.contains("stored now: 45 events, 13 attempts, 5 failures, 1 dead letter"),
        "unexpected summary:\n{stdout}"
    );
    let total = stdout
        .lines()
        .find(|l| l.starts_with("total"))
        .expect("a total row");
    let columns: Vec<&str> = total.split_whitespace().collect();
    assert_eq!(columns, ["total", "45", "0", "13", "5", "1"]);
    assert!(stdout.contains("✗ dead-lettered after 3 failures"));
    assert!(stdout.contains("✓ attempt 3 succeeded"));
    assert!(stdout.contains("  assistant In Lisbon it is"));
}
