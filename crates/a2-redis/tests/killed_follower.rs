//! A follower process SIGKILLed releases nothing, yet stops costing
//! wake-ups (ST2): each store instance's entry in a followed session's mark
//! lasts three refresh periods of server time unless refreshed, so once the
//! killed instance's last entries lapse, appends to its sessions publish no
//! more. This test binary spawns a copy of itself that follows sessions
//! (`child_role`), kills it, and watches the server's `PUBLISH` count.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use a2_core::{NewEvent, Store};
use a2_redis::testing::{RedisServer, unique_prefix};
use a2_redis::{RedisOptions, RedisStore};
use futures::StreamExt;
use serde_json::json;

const ROLE: &str = "A2_FOLLOWER_ROLE";
const URL: &str = "A2_FOLLOWER_URL";
const PREFIX: &str = "A2_FOLLOWER_PREFIX";
/// The follower's refresh period: short, so the test takes seconds.
const REFRESH: Duration = Duration::from_millis(300);
const SESSIONS: usize = 20;

fn session(k: usize) -> String {
    format!("followed-{k}")
}

/// Not a test on its own: the role a spawned copy of this binary plays.
#[test]
#[ignore = "run by the other test of this file in a child process"]
fn child_role() {
    let (Ok(role), Ok(url), Ok(prefix)) = (
        std::env::var(ROLE),
        std::env::var(URL),
        std::env::var(PREFIX),
    ) else {
        panic!("child_role runs only in a process spawned by the test of this file");
    };
    assert_eq!(role, "follower", "unknown role {role}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let options = RedisOptions::default()
            .prefix(prefix)
            .follow_refresh(REFRESH);
        let store = RedisStore::connect(&url, options).await.unwrap();
        let mut feeds: Vec<_> = (0..SESSIONS)
            .map(|k| store.stream(&session(k), 0))
            .collect();
        for feed in &mut feeds {
            feed.next().await.expect("a first event").expect("no error");
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "following").unwrap();
        out.flush().unwrap();
        drop(out);
        // Followed until killed.
        futures::future::pending::<()>().await;
    });
}

/// Kills a child when dropped, however the test ends.
struct Reaper(Option<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `PUBLISH` calls the server ran so far, scripts' included.
async fn publishes(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_publish:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// ST2: a process following 20 sessions (refresh every 300 ms) is
/// SIGKILLed. While it lived, an append to a followed session published a
/// wake-up; once its entries lapse — within three refresh periods of its
/// death, with the scheduling's slack — appends publish nothing for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn st2_a_killed_followers_marks_lapse_within_three_refresh_periods() {
    let server = RedisServer::start();
    let url = server.url();
    let prefix = unique_prefix("lapse");
    let writer = RedisStore::connect(&url, RedisOptions::default().prefix(prefix.clone()))
        .await
        .unwrap();
    let mut admin = redis::Client::open(url.clone())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // Pending work from the first event on: a later append announces no
    // new work (PS2), so a publish is a feed's wake-up.
    for k in 0..SESSIONS {
        let event = NewEvent::new("job", json!(k));
        writer.append(&session(k), vec![event]).await.unwrap();
    }
    let mut child = Reaper(Some(
        Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "child_role", "--nocapture"])
            .args(["--test-threads=1"])
            .env(ROLE, "follower")
            .env(URL, &url)
            .env(PREFIX, &prefix)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    ));
    let stdout = child.0.as_mut().unwrap().stdout.take().unwrap();
    let following = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.ends_with("following"))
    });
    let following = tokio::time::timeout(Duration::from_secs(30), following).await;
    assert!(
        matches!(following, Ok(Ok(true))),
        "the follower never followed"
    );
    let append_publishes = |k: usize| {
        let writer = &writer;
        async move {
            writer
                .append(&session(k), vec![NewEvent::new("job", json!("more"))])
                .await
                .unwrap();
        }
    };
    let before = publishes(&mut admin).await;
    append_publishes(0).await;
    assert!(
        publishes(&mut admin).await > before,
        "ST2: an append to a followed session publishes a wake-up"
    );
    let mut killed = child.0.take().unwrap();
    killed.kill().expect("SIGKILL the follower");
    killed.wait().unwrap();
    let died = Instant::now();
    // Appends round robin until a whole refresh period passed with no
    // publish: the marks lapsed. They must within three periods (plus the
    // slack of a loaded machine), never later.
    let mut last_publish = Duration::ZERO;
    let mut k = 0;
    loop {
        let before = publishes(&mut admin).await;
        append_publishes(k).await;
        if publishes(&mut admin).await > before {
            last_publish = died.elapsed();
        }
        k = (k + 1) % SESSIONS;
        if died.elapsed() > last_publish + REFRESH * 2 {
            break;
        }
        assert!(
            died.elapsed() < REFRESH * 3 + Duration::from_secs(3),
            "ST2: appends still publish {:?} after the follower died",
            died.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        last_publish <= REFRESH * 3 + Duration::from_secs(1),
        "ST2: the last wake-up went out {last_publish:?} after the follower died"
    );
    eprintln!(
        "killed follower: last wake-up {last_publish:?} after the kill (refresh period {REFRESH:?})"
    );
    writer.close().await;
}
