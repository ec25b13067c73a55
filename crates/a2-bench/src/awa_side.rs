//! The awa baseline of the work cycle, run as a program of its own
//! (`crates/a2-bench/awa`): awa's driver, sqlx, and the SQLite store's,
//! rusqlite, each link a different `libsqlite3-sys`, which one dependency
//! graph cannot hold. The program is built on first use (release, into
//! `target/awa-baseline`) and times itself, so its build is not measured.

use std::time::Duration;

use crate::BoxError;

/// The row subject of the awa baseline.
pub const AWA_SUBJECT: &str = "awa";

/// The work cycle through awa on the Postgres server of `url`: `events`
/// jobs inserted one per call from `concurrency` tasks while one awa
/// client with as many workers runs a no-op handler (what exactly, in the
/// program's `cycle`). Returns the time it measured.
pub async fn cycle(
    url: &str,
    events: u64,
    concurrency: usize,
    tag: &str,
) -> Result<Duration, BoxError> {
    let dir = env!("CARGO_MANIFEST_DIR");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = tokio::process::Command::new(cargo)
        .args(["run", "--release", "--quiet", "--manifest-path"])
        .arg(format!("{dir}/awa/Cargo.toml"))
        .arg("--target-dir")
        .arg(format!("{dir}/../../target/awa-baseline"))
        .arg("--")
        .args([url, &events.to_string(), &concurrency.to_string(), tag])
        .kill_on_drop(true)
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!(
            "the awa baseline failed ({}): {}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )
        .into());
    }
    // Its account of where the time went.
    for line in String::from_utf8_lossy(&output.stderr).lines() {
        if line.starts_with("awa: ") {
            eprintln!("  {line}");
        }
    }
    let ms: f64 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("elapsed_ms="))
        .ok_or_else(|| format!("the awa baseline printed no time: {stdout:?}"))?
        .trim()
        .parse()?;
    Ok(Duration::from_secs_f64(ms / 1e3))
}
