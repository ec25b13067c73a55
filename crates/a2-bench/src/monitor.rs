//! `MONITOR` on a raw connection, to tell the commands a client sends from
//! those a script runs inside the server (`[0 lua]`), which `INFO
//! commandstats` counts alike.

use std::collections::BTreeMap;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::BoxError;

/// Command counts of one window, split by who ran them.
#[derive(Debug, Default, Clone)]
pub struct Split {
    /// Commands clients sent, by lowercase name.
    pub client: BTreeMap<String, u64>,
    /// Commands scripts ran inside the server.
    pub in_script: BTreeMap<String, u64>,
}

impl Split {
    /// `self - other × factor`, per command, clamped at zero.
    pub fn minus_scaled(&self, other: &Split, factor: f64) -> Split {
        let sub = |a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>| {
            a.iter()
                .map(|(k, v)| {
                    let minus = b.get(k).map_or(0.0, |n| *n as f64 * factor);
                    (k.clone(), (*v as f64 - minus).round().max(0.0) as u64)
                })
                .filter(|(_, v)| *v > 0)
                .collect()
        };
        Split {
            client: sub(&self.client, &other.client),
            in_script: sub(&self.in_script, &other.in_script),
        }
    }
}

/// A `MONITOR` connection.
pub struct Monitor {
    lines: mpsc::UnboundedReceiver<String>,
}

impl Monitor {
    /// Connects to 127.0.0.1:`port` and starts monitoring.
    pub async fn start(port: u16) -> Result<Self, BoxError> {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"MONITOR\r\n").await?;
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut monitor = Self { lines: rx };
        // The first line is the +OK of MONITOR itself.
        monitor
            .lines
            .recv()
            .await
            .ok_or("MONITOR connection closed")?;
        Ok(monitor)
    }

    /// Counts every command seen until `ECHO marker` (which the caller sends
    /// after the window), leaving out the benchmark's own inspection
    /// commands; client commands only from these `ip:port` addresses when
    /// `only` is given (commands run inside scripts are always counted).
    pub async fn until(
        &mut self,
        marker: &str,
        only: Option<&[String]>,
    ) -> Result<Split, BoxError> {
        let mut split = Split::default();
        loop {
            let line = tokio::time::timeout(std::time::Duration::from_secs(30), self.lines.recv())
                .await?
                .ok_or("MONITOR connection closed")?;
            let Some((origin, rest)) = line.split_once(']') else {
                continue;
            };
            let command = rest.trim_start().trim_start_matches('"');
            let name = command.split('"').next().unwrap_or("").to_lowercase();
            if name == "echo" && rest.contains(marker) {
                return Ok(split);
            }
            if matches!(
                name.as_str(),
                "info" | "client" | "echo" | "slowlog" | "config" | ""
            ) {
                continue;
            }
            let map = if origin.ends_with(" lua") {
                &mut split.in_script
            } else {
                let from = origin.rsplit(' ').next().unwrap_or("");
                if only.is_some_and(|addrs| !addrs.iter().any(|a| a == from)) {
                    continue;
                }
                &mut split.client
            };
            *map.entry(name).or_default() += 1;
        }
    }
}
