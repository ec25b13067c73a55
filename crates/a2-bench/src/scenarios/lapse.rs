//! Wake-ups after a follower dies (ST2), part of the `idle` scenario: a
//! process of its own (`a2-bench --follow-child PREFIX`) follows 100
//! sessions over RESP with a refresh period of 500 ms and is SIGKILLed, so
//! it releases nothing. The benchmark then appends to the sessions round
//! robin and counts the server's `PUBLISH` calls around each append; the
//! row is how long after the kill the last append published a wake-up, in
//! refresh periods (ST2's bound: three).

use std::sync::Arc;
use std::time::Duration;

use a2::Store;
use a2::redis::{RedisOptions, RedisStore};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

use crate::BoxError;
use crate::a2_side::event;
use crate::ctx::Ctx;
use crate::info;
use crate::report::Report;

const S: &str = "idle feeds";
const SUBJECT: &str = "a2 redis";
const SESSIONS: usize = 100;
/// The follower's refresh period: short, so a round takes seconds.
const REFRESH: Duration = Duration::from_millis(500);
/// Appends keep going until none published for this long after the last
/// one that did (or after the kill): longer than a refresh period, so a
/// mark that a refresh still kept alive would show.
const QUIET: Duration = Duration::from_millis(1500);
/// How long wake-ups may go on before the round fails.
const GIVE_UP: Duration = Duration::from_secs(10);

fn case() -> String {
    format!("follower process SIGKILLed, {SESSIONS} followed sessions")
}

fn session(k: usize) -> String {
    format!("lapse-{k}")
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    if !ctx.wants(SUBJECT) {
        return;
    }
    let case = case();
    for round in 0..ctx.sizes.heavy_rounds {
        match measure(ctx, round).await {
            Ok(lapse) => {
                let periods = lapse.as_secs_f64() / REFRESH.as_secs_f64();
                eprintln!(
                    "  killed follower: last wake-up {:.0} ms after the kill ({periods:.2} refresh periods)",
                    lapse.as_secs_f64() * 1e3
                );
                let metric = "wake-ups after the kill, refresh periods";
                report.round(S, &case, SUBJECT, metric, periods);
                let ms = lapse.as_secs_f64() * 1e3;
                report.round(S, &case, SUBJECT, "wake-ups after the kill, ms", ms);
            }
            Err(e) => {
                eprintln!("  killed follower: {e}");
                for metric in [
                    "wake-ups after the kill, refresh periods",
                    "wake-ups after the kill, ms",
                ] {
                    report.missing(S, &case, SUBJECT, metric, &e.to_string());
                }
            }
        }
    }
    report.note(format!(
        "idle feeds, killed follower: a process of its own follows {SESSIONS} sessions over RESP \
         (refresh period {} ms) and is SIGKILLed; appends round robin then count PUBLISH calls \
         (INFO commandstats) until none published for {} ms; the row is the time from the kill \
         to the last append that published",
        REFRESH.as_millis(),
        QUIET.as_millis()
    ));
}

/// `PUBLISH` calls the server ran so far (also inside scripts).
async fn publishes(ctx: &Ctx) -> Result<u64, BoxError> {
    let counts = info::command_counts(&mut ctx.con.clone()).await?;
    Ok(counts.get("publish").copied().unwrap_or(0))
}

/// Appends one event to session `k`; whether the server published
/// anything meanwhile.
async fn append_published(ctx: &Ctx, writer: &Arc<dyn Store>, k: usize) -> Result<bool, BoxError> {
    let before = publishes(ctx).await?;
    writer.append(&session(k), vec![event(k as u64)]).await?;
    Ok(publishes(ctx).await? > before)
}

async fn measure(ctx: &Ctx, round: usize) -> Result<Duration, BoxError> {
    let prefix = format!("bench{}lapse{round}", ctx.run_id);
    let writer: Arc<dyn Store> =
        Arc::new(RedisStore::connect(&ctx.url, RedisOptions::default().prefix(&prefix)).await?);
    // Each session has work pending from its first event on, so a later
    // append announces no new work: a publish is a wake-up.
    for k in 0..SESSIONS {
        writer.append(&session(k), vec![event(0)]).await?;
    }
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(["--follow-child", &prefix, "--redis-url", &ctx.url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .map_err(|_| "the follower did not catch up within 30 s")??;
    if line.as_deref() != Some("following") {
        return Err(format!("the follower said {line:?}").into());
    }
    // Followed: appends publish (each session's mark is set before its
    // feed's first read, so this holds at once).
    let deadline = Instant::now() + GIVE_UP;
    while !append_published(ctx, &writer, 0).await? {
        if Instant::now() > deadline {
            return Err("followed sessions' appends publish nothing".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SIGKILL (tokio's `kill`): the follower releases nothing.
    child.kill().await?;
    let killed = Instant::now();
    let mut last = None;
    let mut k = 0;
    loop {
        let published = append_published(ctx, &writer, k).await?;
        k = (k + 1) % SESSIONS;
        if published {
            last = Some(killed.elapsed());
        }
        let since = killed.elapsed() - last.unwrap_or_default();
        if since >= QUIET {
            break;
        }
        if killed.elapsed() > GIVE_UP {
            return Err(format!("appends still publish {GIVE_UP:?} after the kill").into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    writer.close().await;
    Ok(last.unwrap_or_default())
}

/// The child's side (`a2-bench --follow-child PREFIX --redis-url URL`):
/// follows the scenario's sessions under `PREFIX`, prints `following` once
/// every feed has its first event, then waits to be killed (or for stdin
/// to close).
pub async fn child(url: &str, prefix: &str) -> Result<(), BoxError> {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let options = RedisOptions::default()
        .prefix(prefix)
        .follow_refresh(REFRESH);
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(url, options).await?);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut feeds = Vec::with_capacity(SESSIONS);
    for k in 0..SESSIONS {
        let mut feed = store.stream(&session(k), 0);
        let tx = tx.clone();
        feeds.push(tokio::spawn(async move {
            let mut first = true;
            while let Some(item) = feed.next().await {
                if item.is_err() {
                    break;
                }
                if std::mem::take(&mut first) {
                    let _ = tx.send(());
                }
            }
        }));
    }
    drop(tx);
    for _ in 0..SESSIONS {
        rx.recv()
            .await
            .ok_or("a feed ended before its first event")?;
    }
    println!("following");
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    for feed in feeds {
        feed.abort();
    }
    store.close().await;
    Ok(())
}
