//! The README example runs and prints what it promises.

#[test]
fn quickstart_prints_the_feed_and_the_state() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_example-quickstart"))
        .output()
        .expect("the example runs");
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 7, "{stdout}");
    assert_eq!(lines.iter().filter(|l| l.contains(" answer ")).count(), 2);
    assert_eq!(lines.iter().filter(|l| l.contains(" thinking ")).count(), 2);
    assert_eq!(lines[6], "2 answers");
}
