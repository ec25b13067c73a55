//! The connections of `serve` over a raw socket: a first request for
//! Server-Sent Events is answered without hyper (chunked, dated, closed
//! when asked, for a live route whatever its `Accept`), its connection then
//! serves further requests through hyper, a follower that leaves closes its
//! feed, a shutdown ends an open one, and what the SSE path does not take
//! (pipelined requests) hyper answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::{MemoryStore, StoreOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEADLINE: Duration = Duration::from_secs(10);

struct Server {
    addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let store = Arc::new(MemoryStore::new(StoreOptions::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(a2_server::serve(
            listener,
            store,
            a2_server::Config::default(),
            async {
                let _ = stopped.await;
            },
        ));
        Self {
            addr,
            stop: Some(stop),
            served,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }

    async fn create_stream(&self, name: &str) {
        let r = reqwest::Client::new()
            .put(self.url(&format!("/v1/stream/{name}")))
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }

    async fn append(&self, name: &str, body: &str) {
        let r = reqwest::Client::new()
            .post(self.url(&format!("/v1/stream/{name}")))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }

    /// The `a2_open_streams{kind="session"}` gauge.
    async fn open_streams(&self) -> f64 {
        let text = reqwest::get(self.url("/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("a2_open_streams{kind=\"session\"} "))
            .map(|v| v.trim().parse().unwrap())
            .expect("the gauge is exported")
    }

    async fn wait_open_streams(&self, want: f64) {
        let started = Instant::now();
        loop {
            let now = self.open_streams().await;
            if now == want {
                return;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "open streams stayed {now}, want {want}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Reads from `socket` into `seen` until `needle` has been seen after
/// `from`; returns where it ends. Fails at the deadline or at end of input.
async fn read_until(
    socket: &mut TcpStream,
    seen: &mut Vec<u8>,
    from: usize,
    needle: &str,
) -> usize {
    let started = Instant::now();
    loop {
        if let Some(at) = find(&seen[from..], needle.as_bytes()) {
            return from + at + needle.len();
        }
        let mut buf = [0; 4096];
        let left = DEADLINE.saturating_sub(started.elapsed());
        let n = tokio::time::timeout(left, socket.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} in {:?}", String::from_utf8_lossy(seen)))
            .unwrap();
        assert!(
            n > 0,
            "closed before {needle:?}: {:?}",
            String::from_utf8_lossy(seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads one whole answer with a `content-length` body from `from`;
/// returns its head, its body and where it ends.
async fn read_answer(
    socket: &mut TcpStream,
    seen: &mut Vec<u8>,
    from: usize,
) -> (String, String, usize) {
    let head_end = read_until(socket, seen, from, "\r\n\r\n").await;
    let head = String::from_utf8_lossy(&seen[from..head_end]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("a content-length")
        .trim()
        .parse()
        .unwrap();
    while seen.len() < head_end + length {
        let mut buf = [0; 4096];
        let n = tokio::time::timeout(DEADLINE, socket.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        seen.extend_from_slice(&buf[..n]);
    }
    let body = String::from_utf8_lossy(&seen[head_end..head_end + length]).into_owned();
    (head, body, head_end + length)
}

async fn waits_for_end(socket: &mut TcpStream) {
    let started = Instant::now();
    let mut buf = [0; 4096];
    loop {
        let left = DEADLINE.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, socket.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the server kept the connection open"),
        }
    }
}

/// Connects, sends `request` and reads the answer's head: the socket,
/// the bytes read so far, where the head ends and the head in lower case.
async fn open(server: &Server, request: &[u8]) -> (TcpStream, Vec<u8>, usize, String) {
    let mut socket = server.connect().await;
    socket.write_all(request).await.unwrap();
    let mut seen = Vec::new();
    let head_end = read_until(&mut socket, &mut seen, 0, "\r\n\r\n").await;
    let head = String::from_utf8_lossy(&seen[..head_end]).to_lowercase();
    (socket, seen, head_end, head)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_gets_chunked_events_and_leaving_closes_its_feed() {
    let server = Server::start().await;
    server.create_stream("chat").await;
    let (mut socket, mut seen, head_end, head) = open(
        &server,
        b"GET /v1/stream/chat?offset=now&live=sse HTTP/1.1\r\nhost: a2\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    for line in [
        "content-type: text/event-stream",
        "transfer-encoding: chunked",
        "date: ",
    ] {
        assert!(head.contains(line), "no {line:?} in {head}");
    }
    assert!(!head.contains("connection: close"), "{head}");
    server.wait_open_streams(1.0).await;

    server.append("chat", r#"[{"text":"first"}]"#).await;
    let end = read_until(&mut socket, &mut seen, head_end, "first").await;
    server.append("chat", r#"[{"text":"second"}]"#).await;
    read_until(&mut socket, &mut seen, end, "second").await;
    // Every chunk is framed: a hexadecimal size line, then that many bytes.
    let body = &seen[head_end..];
    let size_end = find(body, b"\r\n").unwrap();
    let size = usize::from_str_radix(std::str::from_utf8(&body[..size_end]).unwrap(), 16).unwrap();
    assert_eq!(&body[size_end + 2 + size..size_end + 4 + size], b"\r\n");

    drop(socket);
    server.wait_open_streams(0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_feed_asked_without_accept_is_streamed_in_chunks() {
    let server = Server::start().await;
    let (mut socket, mut seen, head_end, head) = open(
        &server,
        b"GET /v1/sessions/talk/live HTTP/1.1\r\nhost: a2\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    server.wait_open_streams(1.0).await;
    let r = reqwest::Client::new()
        .post(server.url("/v1/sessions/talk/events"))
        .json(&serde_json::json!({"events": [{"type": "said", "payload": {"text": "hello"}}]}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    read_until(&mut socket, &mut seen, head_end, "hello").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_of_an_sse_request_serves_more_requests() {
    let server = Server::start().await;
    server.create_stream("kept").await;
    server.append("kept", r#"[{"n":1}]"#).await;
    let mut socket = server.connect().await;
    // A refusal on the SSE path: a fixed-length answer, and the connection
    // stays open for hyper.
    socket
        .write_all(b"GET /v1/stream/missing?offset=-1&live=sse HTTP/1.1\r\nhost: a2\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let (head, _, end) = read_answer(&mut socket, &mut seen, 0).await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
    socket
        .write_all(b"GET /v1/stream/kept?offset=-1 HTTP/1.1\r\nhost: a2\r\n\r\n")
        .await
        .unwrap();
    let (head, body, _) = read_answer(&mut socket, &mut seen, end).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(body.contains(r#""n":1"#), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_close_is_honoured_on_the_sse_path() {
    let server = Server::start().await;
    let mut socket = server.connect().await;
    socket
        .write_all(
            b"GET /v1/stream/missing?offset=-1&live=sse HTTP/1.1\r\nhost: a2\r\nconnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let mut seen = Vec::new();
    let (head, _, _) = read_answer(&mut socket, &mut seen, 0).await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    waits_for_end(&mut socket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let server = Server::start().await;
    server.create_stream("piped").await;
    server.append("piped", r#"[{"n":2}]"#).await;
    let mut socket = server.connect().await;
    socket
        .write_all(
            b"GET /v1/stream/missing?offset=-1&live=sse HTTP/1.1\r\nhost: a2\r\n\r\n\
              GET /v1/stream/piped?offset=-1 HTTP/1.1\r\nhost: a2\r\n\r\n",
        )
        .await
        .unwrap();
    let mut seen = Vec::new();
    let (head, _, end) = read_answer(&mut socket, &mut seen, 0).await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
    let (head, body, _) = read_answer(&mut socket, &mut seen, end).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(body.contains(r#""n":2"#), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_an_open_follower_and_returns() {
    let mut server = Server::start().await;
    server.create_stream("open").await;
    let (mut socket, mut seen, head_end, head) = open(
        &server,
        b"GET /v1/stream/open?offset=now&live=sse HTTP/1.1\r\nhost: a2\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    server.wait_open_streams(1.0).await;
    let _ = server.stop.take().unwrap().send(());
    // The last chunk ends the stream, and the server closes the connection.
    read_until(&mut socket, &mut seen, head_end, "0\r\n\r\n").await;
    waits_for_end(&mut socket).await;
    tokio::time::timeout(DEADLINE, &mut server.served)
        .await
        .expect("serve returned")
        .unwrap()
        .unwrap();
}
