//! What the server and this process say about themselves: `INFO
//! commandstats`, `CLIENT LIST`, `SLOWLOG`, and resident memory.

use std::collections::BTreeMap;

use redis::aio::ConnectionLike;

use crate::BoxError;

/// Calls per command name (`xadd`, `evalsha`, `client|list`, …), as `INFO
/// commandstats` counts them. Commands run inside scripts are counted too.
pub type CommandCounts = BTreeMap<String, u64>;

/// The server's command counters now.
pub async fn command_counts(con: &mut impl ConnectionLike) -> Result<CommandCounts, BoxError> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await?;
    let mut counts = CommandCounts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        counts.insert(name.to_string(), calls);
    }
    Ok(counts)
}

/// Microseconds the server spent in script calls (EVAL*, FCALL*) so far,
/// the commands they ran included.
pub async fn script_micros(con: &mut impl ConnectionLike) -> Result<u64, BoxError> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await?;
    Ok(text
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(name, _)| name.starts_with("eval") || name.starts_with("fcall"))
        .filter_map(|(_, fields)| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix("usec="))?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

/// `after - before` per command, without the commands the benchmark itself
/// sends to look (`info`, `client|list`, `slowlog|…`), and without zeros.
pub fn delta(before: &CommandCounts, after: &CommandCounts) -> CommandCounts {
    after
        .iter()
        .filter(|(name, _)| !is_inspection(name))
        .map(|(name, n)| {
            (
                name.clone(),
                n.saturating_sub(*before.get(name).unwrap_or(&0)),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn is_inspection(name: &str) -> bool {
    name == "info"
        || name.starts_with("client|")
        || name.starts_with("slowlog|")
        || name.starts_with("config|")
}

/// `counts / per`, formatted `name 1.00, other 0.01`, largest first.
pub fn per_operation(counts: &CommandCounts, per: u64) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = counts
        .iter()
        .map(|(name, n)| (name.clone(), *n as f64 / per.max(1) as f64))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

/// One connection of `CLIENT LIST`.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    /// `id=`.
    pub id: u64,
    /// `addr=`: the client's `ip:port`.
    pub addr: String,
    /// `flags=`.
    pub flags: String,
    /// `sub=` + `psub=` + `ssub=`: channels and patterns it listens to.
    pub subscriptions: u64,
}

impl ClientInfo {
    /// Whether it is a subscriber connection (RESP2 pub/sub mode, or RESP3
    /// with subscriptions).
    pub fn is_subscriber(&self) -> bool {
        self.flags.contains('P') || self.subscriptions > 0
    }
}

/// The server's connections now.
pub async fn clients(con: &mut impl ConnectionLike) -> Result<Vec<ClientInfo>, BoxError> {
    let text: String = redis::cmd("CLIENT").arg("LIST").query_async(con).await?;
    Ok(text
        .lines()
        .map(|line| {
            let field = |key: &str| {
                line.split(' ')
                    .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
                    .unwrap_or("")
                    .to_string()
            };
            let num = |key: &str| field(key).parse::<u64>().unwrap_or(0);
            ClientInfo {
                id: num("id"),
                addr: field("addr"),
                flags: field("flags"),
                subscriptions: num("sub") + num("psub") + num("ssub"),
            }
        })
        .collect())
}

/// One `SLOWLOG` entry: the command name and how long it ran.
#[derive(Debug, Clone)]
pub struct SlowEntry {
    /// The command (for EVALSHA, `evalsha`).
    pub command: String,
    /// Execution time on the server, in microseconds.
    pub micros: u64,
}

/// Takes every `SLOWLOG` entry so far and empties the log.
pub async fn take_slowlog(con: &mut impl ConnectionLike) -> Result<Vec<SlowEntry>, BoxError> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(con)
        .await?;
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query_async(con).await?;
    let mut out = Vec::new();
    for entry in entries {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let micros = match fields.get(2) {
            Some(redis::Value::Int(n)) => *n as u64,
            _ => 0,
        };
        let command = match fields.get(3) {
            Some(redis::Value::Array(args)) => match args.first() {
                Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_lowercase(),
                _ => String::new(),
            },
            _ => String::new(),
        };
        out.push(SlowEntry { command, micros });
    }
    Ok(out)
}

/// Summarises slow entries: `evalsha: 12 over 1 ms, max 3.2 ms`.
pub fn summarize_slowlog(entries: &[SlowEntry]) -> Vec<String> {
    let mut by: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for e in entries {
        let slot = by.entry(e.command.as_str()).or_default();
        slot.0 += 1;
        slot.1 = slot.1.max(e.micros);
    }
    by.into_iter()
        .map(|(cmd, (n, max))| format!("{cmd}: {n} over 1 ms, max {:.1} ms", max as f64 / 1e3))
        .collect()
}

/// This process's resident set size in bytes (`VmRSS` of /proc/self/status).
pub fn rss_bytes() -> Option<u64> {
    rss_bytes_of("self")
}

/// The resident set size in bytes of process `pid` (a number, or `self`).
pub fn rss_bytes_of(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let kb = line
            .strip_prefix("VmRSS:")?
            .trim()
            .strip_suffix("kB")?
            .trim();
        kb.parse::<u64>().ok().map(|kb| kb * 1024)
    })
}

/// CPU seconds (user + system) the server has used so far (`INFO cpu`).
pub async fn server_cpu_seconds(con: &mut impl ConnectionLike) -> Result<f64, BoxError> {
    let text: String = redis::cmd("INFO").arg("cpu").query_async(con).await?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(':')?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0)
    };
    Ok(field("used_cpu_user") + field("used_cpu_sys"))
}

/// Bytes the server's data takes (`used_memory` of `INFO memory`).
pub async fn used_memory(con: &mut impl ConnectionLike) -> Result<u64, BoxError> {
    let text: String = redis::cmd("INFO").arg("memory").query_async(con).await?;
    text.lines()
        .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok())
        .ok_or_else(|| "INFO memory has no used_memory".into())
}

/// CPU seconds (user + system) this process has used so far.
pub fn process_cpu_seconds() -> Option<f64> {
    process_cpu_seconds_of("self")
}

/// CPU seconds (user + system) process `pid` (a number, or `self`) has
/// used so far.
pub fn process_cpu_seconds_of(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line, in clock ticks (USER_HZ, 100 on Linux).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_drops_inspection_and_zeros() {
        let before: CommandCounts =
            [("xadd".into(), 5), ("info".into(), 1), ("get".into(), 2)].into();
        let after: CommandCounts = [
            ("xadd".into(), 9),
            ("info".into(), 4),
            ("get".into(), 2),
            ("evalsha".into(), 3),
        ]
        .into();
        let d = delta(&before, &after);
        assert_eq!(d, [("xadd".into(), 4), ("evalsha".into(), 3)].into());
    }

    #[test]
    fn rss_is_readable() {
        assert!(rss_bytes().unwrap_or(0) > 0);
    }
}
