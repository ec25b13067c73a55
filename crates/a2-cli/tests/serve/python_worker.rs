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
        stdout.contains("stopped: claimed 31, completed 29, failed 2, dead_lettered 1, released 0"),
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
