//! `examples/worker.py` (Python's standard library only) processes events
//! through the work API of `a2 serve` on a real socket, with a token of
//! the `work` scope. Without `python3` this fails when `CI` is set.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Client;
use serde_json::{Value, json};

use crate::server::Server;

const APPEND: &str = "appender-0123456789abcdef";
const WORK: &str = "py-worker-0123456789abcdef";
const READ: &str = "reader-0123456789abcdef";

pub fn python_available(test: &str) -> bool {
    let runs = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if runs {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test} needs python3 on PATH (apt-get install python3)");
    }
    eprintln!("SKIPPED {test}: python3 is not on PATH (this fails when CI is set)");
    false
}

fn worker_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/worker.py")
}

#[tokio::test]
async fn the_python_worker_processes_every_event_over_http() {
    if !python_available("the_python_worker_processes_every_event_over_http") {
        return;
    }
    let tokens = format!("{APPEND} append\n{WORK} work\n{READ} read");
    let server = Server::start_with(&[], &[("A2_TOKENS", &tokens)]);
    let client = Client::new();
    for s in 0..3 {
        let events: Vec<Value> = (0..10)
            .map(|n| {
                if s == 1 && n == 4 {
                    json!({"type": "text", "payload": {"text": "poison", "fail": true}})
                } else {
                    json!({"type": "text", "payload": {"text": format!("hello {s}.{n}")}, "lane": "chat"})
                }
            })
            .collect();
        let response = client
            .post(server.url(&format!("/v1/sessions/py-{s}/events")))
            .bearer_auth(APPEND)
            .json(&json!({ "events": events }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }

    let started = Instant::now();
    let output = tokio::task::spawn_blocking({
        let url = server.base.clone();
        move || {
            Command::new("python3")
                .arg(worker_script())
                .args(["--url", &url, "--holder", "py-test", "--exit-when-idle"])
                .args([
                    "--max-failures",
                    "2",
                    "--poll-ms",
                    "50",
                    "--ttl-ms",
                    "10000",
                ])
                .env("A2_TOKEN", WORK)
                .stdin(Stdio::null())
                .output()
                .expect("python3 runs")
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "worker.py failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(
            "stopped: claimed 31, completed 29, failed 2, dead_lettered 1, released 0, cancelled 0"
        ),
        "{stdout}\n{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));

    for s in 0..3 {
        let page: Value = client
            .get(server.url(&format!("/v1/sessions/py-{s}/events?limit=1000")))
            .bearer_auth(READ)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let events = page["events"].as_array().unwrap();
        let inputs: Vec<&Value> = events.iter().filter(|e| e["type"] == "text").collect();
        assert_eq!(inputs.len(), 10);
        for input in inputs {
            if input["payload"]["fail"] == true {
                assert_eq!(input["state"], "dead_lettered", "{input}");
                assert_eq!(input["failure_count"], 2);
                continue;
            }
            assert_eq!(input["state"], "processed", "{input}");
            let id = input["returned_event_ids"][0].as_str().unwrap();
            let output = events
                .iter()
                .find(|e| e["id"] == id)
                .expect("the returned event");
            assert_eq!(output["type"], "text.upper");
            assert_eq!(
                output["payload"]["text"],
                input["payload"]["text"].as_str().unwrap().to_uppercase()
            );
            assert_eq!(output["cause"]["index"], input["index"]);
        }
    }
}

/// A token the server refuses stops `worker.py` at once with a message
/// saying what to give, instead of retrying forever.
#[tokio::test]
async fn the_python_worker_stops_on_a_refused_token() {
    if !python_available("the_python_worker_stops_on_a_refused_token") {
        return;
    }
    let tokens = format!("{READ} read\n{WORK} work");
    let server = Server::start_with(&[], &[("A2_TOKENS", &tokens)]);
    for token in ["not-a-token", READ] {
        let output = tokio::task::spawn_blocking({
            let url = server.base.clone();
            let token = token.to_owned();
            move || {
                Command::new("python3")
                    .arg(worker_script())
                    .args(["--url", &url, "--poll-ms", "50"])
                    .env("A2_TOKEN", token)
                    .stdin(Stdio::null())
                    .output()
                    .expect("python3 runs")
            }
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("give a token with the work scope"),
            "{stderr}"
        );
    }
}

/// `worker.py` listens to the server's cancels as the Rust runtime does
/// (RT17): a cancel made while its handler runs a minute-long event stops
/// that handler at once (the next event is processed seconds later, not a
/// minute), nothing of the cancelled attempt is recorded, and the worker
/// says what it did every report period while it does anything.
#[tokio::test]
async fn the_python_worker_stops_a_cancelled_handler_and_reports() {
    if !python_available("the_python_worker_stops_a_cancelled_handler_and_reports") {
        return;
    }
    let tokens = format!("{APPEND} append\n{WORK} work\n{READ} read");
    let server = Server::start_with(&[], &[("A2_TOKENS", &tokens)]);
    let client = Client::new();
    let append = |events: Value| {
        let request = client
            .post(server.url("/v1/sessions/py-cancel/events"))
            .bearer_auth(APPEND)
            .json(&json!({ "events": events }));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
        }
    };
    let state = |index: u64| {
        let request = client
            .get(server.url("/v1/sessions/py-cancel/events?limit=100"))
            .bearer_auth(READ);
        async move {
            let page: Value = request.send().await.unwrap().json().await.unwrap();
            page["events"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["index"] == index)
                .cloned()
        }
    };
    append(json!([{"type": "text", "payload": {"text": "long", "sleep_ms": 60_000}}])).await;
    let worker = Command::new("python3")
        .arg(worker_script())
        .args([
            "--url",
            &server.base,
            "--holder",
            "py-cancel",
            "--poll-ms",
            "50",
        ])
        .args(["--ttl-ms", "120000", "--report-secs", "1"])
        .env("A2_TOKEN", WORK)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    while state(1)
        .await
        .is_none_or(|e| e["claim_holder"] != "py-cancel")
    {
        assert!(Instant::now() < deadline, "worker.py never claimed #1");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = client
        .post(server.url("/v1/sessions/py-cancel/events/1/cancel"))
        .bearer_auth(APPEND)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    append(json!([{"type": "text", "payload": {"text": "next"}}])).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while state(2).await.is_none_or(|e| e["state"] != "processed") {
        assert!(
            Instant::now() < deadline,
            "the next event waits behind the cancelled handler"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = state(1).await.unwrap();
    assert_eq!(first["state"], "cancelled", "{first}");
    assert_eq!(first["returned_event_ids"], json!([]), "nothing recorded");
    // A report period passes with work done.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let pid = worker.id().to_string();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    let output = tokio::task::spawn_blocking(move || worker.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("completed 1,") && stdout.contains("cancelled 1"),
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains("py-cancel #1 was cancelled"), "{stderr}");
    // The periods' lines add up to what it did (the completion and the
    // cancel may fall in two periods).
    let (mut completed, mut cancelled) = (0, 0);
    for line in stderr.lines().filter(|l| l.contains(": last 1 s: ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let count = |label: &str| -> u32 {
            let at = words.iter().position(|w| w.starts_with(label)).unwrap();
            words[at - 1].parse().unwrap()
        };
        completed += count("completed");
        cancelled += count("cancelled");
    }
    assert_eq!((completed, cancelled), (1, 1), "{stderr}");
}

/// The cache folder of the virtual environment: `$A2_TEST_CACHE`, else
/// `~/.cache/a2-test`, else the temporary folder.
fn cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("A2_TEST_CACHE") {
        return PathBuf::from(dir);
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".cache").join("a2-test"),
        None => std::env::temp_dir().join("a2-test"),
    }
}

/// A virtual environment with `package` (`name==version`, from PyPI)
/// installed once, in the cache folder; `None` (after saying why) when it
/// cannot be installed outside CI. `test` names what needs it.
pub fn venv_with(package: &str, test: &str) -> Option<PathBuf> {
    let venv = cache().join(format!("venv-{}", package.replace("==", "-")));
    let marker = venv.join(".a2-complete");
    if marker.exists() {
        return Some(venv);
    }
    let _ = std::fs::remove_dir_all(&venv);
    std::fs::create_dir_all(venv.parent().unwrap()).expect("create the cache folder");
    let pip = venv.join("bin").join("pip");
    let steps: [(PathBuf, Vec<String>); 2] = [
        (
            "python3".into(),
            vec!["-m".into(), "venv".into(), venv.display().to_string()],
        ),
        (
            pip,
            vec![
                "install".into(),
                "--quiet".into(),
                "--disable-pip-version-check".into(),
                package.into(),
            ],
        ),
    ];
    for (program, args) in steps {
        let output = Command::new(&program)
            .args(&args)
            .stdin(Stdio::null())
            .output();
        let failure = match output {
            Ok(o) if o.status.success() => continue,
            Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
            Err(e) => e.to_string(),
        };
        let message = format!(
            "cannot install {package} with `{} {}`: {failure}",
            program.display(),
            args.join(" ")
        );
        if std::env::var_os("CI").is_some() {
            panic!("{message}");
        }
        eprintln!("SKIPPED {test}: {message} (this fails when CI is set)");
        return None;
    }
    std::fs::write(&marker, b"").expect("mark the install complete");
    Some(venv)
}
