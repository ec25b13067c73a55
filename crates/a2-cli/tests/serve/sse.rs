//! A small reader of Server-Sent Events over a reqwest response.

use std::time::Duration;

use futures::StreamExt;

/// One SSE message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

impl Message {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {}", self.data))
    }
}

pub struct Reader {
    body: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: String,
}

impl Reader {
    pub fn new(response: reqwest::Response) -> Self {
        assert_eq!(response.status(), 200, "an SSE stream opens with 200");
        let kind = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Self {
            body: response
                .bytes_stream()
                .map(|r| r.map(|b| b.to_vec()))
                .boxed(),
            buffer: String::new(),
        }
    }

    /// The next message (keep-alive comments skipped), `None` when the
    /// stream ended cleanly; panics after `timeout` or on a broken stream.
    pub async fn next(&mut self, timeout: Duration) -> Option<Message> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut message = Message {
                    event: "message".into(),
                    id: None,
                    data: String::new(),
                };
                let mut any = false;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        message.event = v.trim().to_owned();
                        any = true;
                    } else if let Some(v) = line.strip_prefix("id:") {
                        message.id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        if !message.data.is_empty() {
                            message.data.push('\n');
                        }
                        message.data.push_str(v.strip_prefix(' ').unwrap_or(v));
                        any = true;
                    }
                }
                if any {
                    return Some(message);
                }
                continue;
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => panic!("no SSE message within {timeout:?}"),
                Ok(None) => return None,
                Ok(Some(Err(e))) => panic!("the SSE stream broke: {e}"),
                Ok(Some(Ok(chunk))) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
            }
        }
    }
}
