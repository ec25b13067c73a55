//! [`RestTransport`]: the [`Transport`] seam over the REST protocol.

use std::sync::Arc;

use a2_core::{Error, Result};
use async_trait::async_trait;
use redis::{Cmd, Script, Value};

use super::client::{RestClient, RestConnection, cmd_args};
use super::json;
use crate::args::Args;
use crate::transport::Transport;

/// [`Transport`] over a Redis REST endpoint (the Upstash protocol): one
/// HTTP request per command or script call, on a keep-alive pool.
///
/// Scripts run by hash (`EVALSHA`); after `NOSCRIPT` the script is loaded
/// (`SCRIPT LOAD`) and called again, as on RESP. Stream reads (`XRANGE …
/// COUNT n`) larger than [`RestTransport::stream_page`] are split into
/// several requests, for providers that cap the size of a reply; the pages
/// join exactly because log entries never change. Every call is bounded by
/// the command timeout; a request that provably never reached the server is
/// retried, and so is any failed read-only command.
pub struct RestTransport {
    client: Arc<RestClient>,
    stream_page: usize,
}

impl RestTransport {
    pub(crate) fn new(client: Arc<RestClient>, stream_page: usize) -> Self {
        Self {
            client,
            stream_page: stream_page.max(1),
        }
    }

    /// How many stream entries one request reads at most.
    pub fn stream_page(&self) -> usize {
        self.stream_page
    }

    async fn bounded<T>(&self, what: &str, work: impl Future<Output = Result<T>>) -> Result<T> {
        match tokio::time::timeout(self.client.command_timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(Error::unavailable(format!(
                "{what} timed out after {:?}",
                self.client.command_timeout
            ))),
        }
    }

    /// One command, its Redis error as `StoreUnavailable` (as on RESP).
    async fn command(&self, args: &[Vec<u8>]) -> Result<Value> {
        checked(self.client.command(args).await?)
    }

    /// `XRANGE key start end COUNT n` a page at a time.
    async fn paged_xrange(&self, args: Vec<Vec<u8>>, count: usize) -> Result<Value> {
        let mut entries = Vec::new();
        let mut start = args[2].clone();
        loop {
            let want = (count - entries.len()).min(self.stream_page);
            let page = vec![
                args[0].clone(),
                args[1].clone(),
                start.clone(),
                args[3].clone(),
                b"COUNT".to_vec(),
                want.to_string().into_bytes(),
            ];
            let Value::Array(page) = self.command(&page).await? else {
                return Err(Error::unavailable("XRANGE did not answer an array"));
            };
            let got = page.len();
            let last_id = page.last().and_then(entry_id);
            entries.extend(page);
            match last_id {
                Some(id) if got == want && entries.len() < count => {
                    // Exclusive start (Redis ≥ 6.2): the entry after `id`.
                    start = [b"(".as_slice(), &id].concat();
                }
                _ => return Ok(Value::Array(entries)),
            }
        }
    }
}

/// A stream entry's id (`[id, fields]`).
fn entry_id(entry: &Value) -> Option<Vec<u8>> {
    match entry {
        Value::Array(parts) => match parts.first() {
            Some(Value::BulkString(id)) => Some(id.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// `XRANGE key start end COUNT n` with `n` over `page`: its `n`.
fn xrange_count(args: &[Vec<u8>], page: usize) -> Option<usize> {
    if args.len() != 6
        || !args[0].eq_ignore_ascii_case(b"XRANGE")
        || !args[4].eq_ignore_ascii_case(b"COUNT")
    {
        return None;
    }
    let count: usize = std::str::from_utf8(&args[5]).ok()?.parse().ok()?;
    (count > page).then_some(count)
}

fn checked(value: Value) -> Result<Value> {
    match value {
        Value::ServerError(error) => Err(Error::unavailable_from(
            "Redis command failed",
            redis::RedisError::from(error),
        )),
        other => Ok(other),
    }
}

#[async_trait]
impl Transport for RestTransport {
    fn binary_args(&self) -> bool {
        false
    }

    fn stream_page(&self) -> usize {
        self.stream_page
    }

    /// Each call is an HTTP request: a claim brings its log entries back
    /// itself.
    fn fewer_round_trips(&self) -> bool {
        true
    }

    async fn call(&self, cmd: Cmd) -> Result<Value> {
        let args = cmd_args(&cmd);
        self.bounded("REST command", async {
            match xrange_count(&args, self.stream_page) {
                Some(count) => self.paged_xrange(args, count).await,
                None => self.command(&args).await,
            }
        })
        .await
    }

    /// `EVALSHA`, its body written straight from the arguments; after
    /// `NOSCRIPT` the script is loaded (`SCRIPT LOAD`) and called again.
    async fn script(&self, script: &Script, keys: &[&str], args: &Args) -> Result<Value> {
        let keys_count = keys.len().to_string();
        let body = || {
            json::command_body(
                [
                    b"EVALSHA".as_slice(),
                    script.get_hash().as_bytes(),
                    keys_count.as_bytes(),
                ]
                .into_iter()
                .chain(keys.iter().map(|k| k.as_bytes()))
                .chain(args.iter()),
            )
        };
        self.bounded("REST script", async {
            let reply = match self.client.command_body(body(), false).await? {
                Value::ServerError(error)
                    if error.kind() == Some(redis::ServerErrorKind::NoScript) =>
                {
                    let mut connection = RestConnection(self.client.clone());
                    script
                        .load_async(&mut connection)
                        .await
                        .map_err(|e| Error::unavailable_from("SCRIPT LOAD failed", e))?;
                    self.client.command_body(body(), false).await?
                }
                reply => reply,
            };
            match reply {
                Value::ServerError(error) => Err(Error::unavailable_from(
                    "Redis script failed",
                    redis::RedisError::from(error),
                )),
                reply => Ok(reply),
            }
        })
        .await
    }

    async fn pipeline(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        let commands: Vec<Vec<Vec<u8>>> = cmds.iter().map(cmd_args).collect();
        let replies = self
            .bounded("REST pipeline", self.client.pipeline(&commands))
            .await?;
        replies.into_iter().map(checked).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_large_xranges_are_paged() {
        let args = |count: &str| -> Vec<Vec<u8>> {
            ["XRANGE", "k", "1-0", "+", "COUNT", count]
                .iter()
                .map(|s| s.as_bytes().to_vec())
                .collect()
        };
        assert_eq!(xrange_count(&args("256"), 64), Some(256));
        assert_eq!(xrange_count(&args("64"), 64), None);
        let mut other = args("256");
        other[0] = b"XREVRANGE".to_vec();
        assert_eq!(xrange_count(&other, 64), None);
    }
}
