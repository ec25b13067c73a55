//! The load client of the HTTP scenarios: one HTTP/1.1 connection per
//! task, driven through hyper's connection API.
//!
//! A pooled client (reqwest) spent about as much CPU per request as the
//! server under test answering it (22 µs against a2's 24 µs on this
//! benchmark's machine), so on two cores the load generator took half of
//! the CPU that a multi-threaded server could have used, while a
//! single-threaded server (Node) was not slowed at all. A load generator
//! should cost little beside the server it measures; this one sends a
//! request prepared once per connection (only the body changes) and reads
//! the answer without a pool, redirects or header maps built per request.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::BoxError;

/// One keep-alive connection to a server.
pub struct Connection {
    send: SendRequest<Full<Bytes>>,
    host: HeaderValue,
}

impl Connection {
    /// Opens a connection to `base` (`http://host:port`, no path).
    pub async fn open(base: &str) -> Result<Self, BoxError> {
        let authority = base
            .strip_prefix("http://")
            .ok_or_else(|| format!("{base} is not an http:// address"))?
            .trim_end_matches('/');
        let addr: SocketAddr = tokio::net::lookup_host(authority)
            .await?
            .next()
            .ok_or_else(|| format!("{authority} resolves to no address"))?;
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (send, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // Ends when the connection closes or `send` is dropped.
            let _ = connection.await;
        });
        Ok(Self {
            send,
            host: HeaderValue::from_str(authority)?,
        })
    }

    /// POSTs `body` as `content_type` to `path` and reads the whole answer:
    /// its status.
    pub async fn post(
        &mut self,
        path: &str,
        content_type: &'static str,
        body: impl Into<Bytes>,
    ) -> Result<StatusCode, BoxError> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(HOST, self.host.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static(content_type))
            .body(Full::new(body.into()))?;
        self.send.ready().await?;
        let response = self.send.send_request(request).await?;
        let status = response.status();
        // The answer is read to its end so that the connection is free for
        // the next request.
        response.into_body().collect().await?;
        Ok(status)
    }

    /// GETs `path` and returns the body of a `200` answer as it arrives
    /// (an SSE stream), or the status of any other.
    pub async fn get_stream(&mut self, path: &str) -> Result<Incoming, BoxError> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(HOST, self.host.clone())
            .body(Full::new(Bytes::new()))?;
        self.send.ready().await?;
        let response = self.send.send_request(request).await?;
        if response.status() != StatusCode::OK {
            return Err(format!("GET {path} answered {}", response.status()).into());
        }
        Ok(response.into_body())
    }
}

/// The path part of `url` (`http://host:port/path` → `/path`).
pub fn path_of(url: &str) -> &str {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    rest.find('/').map_or("/", |i| &rest[i..])
}
