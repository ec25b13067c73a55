//! The smoke mode runs end to end, so the benchmark never rots: every
//! scenario prints its rows, and each baseline measured a figure.

use std::process::Command;

#[test]
fn quick_mode_prints_every_scenario_with_its_baselines() {
    let out = Command::new(env!("CARGO_BIN_EXE_a2-bench"))
        .args(["--quick", "--json"])
        .output()
        .expect("run a2-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a2-bench --quick failed:\n{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let rows = report["rows"].as_array().expect("rows");
    let measured = |scenario: &str, subject: &str| {
        rows.iter().any(|r| {
            r["scenario"] == scenario && r["subject"] == subject && r["value"].as_f64().is_some()
        })
    };
    for scenario in [
        "append",
        "work cycle",
        "live latency",
        "fan-out",
        "commands",
        "read",
        "serve fan-out",
        "serve: durable streams",
        "fork",
        "cancel",
        "delay",
        "scale",
    ] {
        assert!(
            rows.iter().any(|r| r["scenario"] == scenario),
            "no {scenario} rows"
        );
    }
    assert!(measured("append", "EVALSHA ceiling"));
    assert!(measured("work cycle", "Redis consumer group"));
    assert!(measured("live latency", "XADD -> blocked XREAD"));
    assert!(measured("commands", "EVALSHA ceiling"));
    // BullMQ, when node is there to run it: one node process asked for a
    // round after each round of the others.
    let node = Command::new("node").arg("--version").output();
    let node_ok = node.is_ok_and(|o| o.status.success());
    if node_ok {
        assert!(
            measured("work cycle", "BullMQ"),
            "no BullMQ figure:\n{stderr}"
        );
    }
    // The SQLite rows, each beside its raw baseline.
    assert!(measured("append", "raw rusqlite"));
    assert!(measured("append", "a2 sqlite"));
    assert!(measured("work cycle", "a2 sqlite (runtime)"));
    assert!(measured("read", "raw rusqlite"));
    assert!(measured("read", "a2 sqlite"));
    // The Postgres rows, beside the raw Postgres baseline.
    assert!(measured("append", "raw postgres"));
    assert!(measured("append", "a2 postgres"));
    assert!(measured("work cycle", "a2 postgres (runtime)"));
    // The REST rows, beside the RESP ones.
    assert!(measured("work cycle", "a2 rest (runtime)"));
    assert!(measured("live latency", "a2 rest feed (other instance)"));
    assert!(measured(
        "live latency",
        "a2 rest polling feed (other instance)"
    ));
    // The Durable Streams face beside the servers built only for it (the
    // Rust one when an earlier full run installed it).
    assert!(measured("serve: durable streams", "a2 memory over HTTP"));
    if node_ok {
        assert!(
            measured("serve: durable streams", "@durable-streams/server memory"),
            "no Node server figure:\n{stderr}"
        );
    }
    // Forks on the single Redis (from dumps) and over REST (page by page).
    assert!(measured("fork", "a2 redis"));
    assert!(measured("fork", "a2 rest"));
    // Cancels reaching a worker, on Redis and across processes on SQLite;
    // delayed events started at their time.
    assert!(measured("cancel", "a2 redis"));
    assert!(measured("cancel", "a2 sqlite"));
    assert!(measured("delay", "a2 redis"));
    // Costs as the stores grow, on Redis and SQLite, with the listings.
    let scale = |case: &str, subject: &str, metric: &str| {
        rows.iter().any(|r| {
            r["scenario"] == "scale"
                && r["case"].as_str().is_some_and(|c| c.contains(case))
                && r["subject"] == subject
                && r["metric"] == metric
                && r["value"].as_f64().is_some()
        })
    };
    assert!(scale(
        "work cycle, 2000 sessions",
        "a2 redis",
        "redis-server CPU us/event"
    ));
    assert!(scale(
        "append, 50000 events stored",
        "a2 sqlite",
        "append p99 ms"
    ));
    assert!(scale(
        "scans, 2000 sessions",
        "a2 redis",
        "pending scan us/session"
    ));
    assert!(scale(
        "scans, 2000 sessions",
        "a2 sqlite",
        "listing us/session"
    ));
    // Quick mode sets no targets.
    assert_eq!(report["targets"].as_array().map(Vec::len), Some(0));
    // Every row either has a figure or says why not.
    for r in rows {
        assert!(
            r["value"].as_f64().is_some() || r["note"].as_str().is_some_and(|n| !n.is_empty()),
            "row without figure or note: {r}"
        );
    }
}
