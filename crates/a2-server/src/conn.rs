//! One TCP connection of [`serve`](crate::serve).
//!
//! Connections are HTTP/1, served by hyper, but for one case: a first request
//! that asks for Server-Sent Events (a `GET` of a live route — a Durable
//! Streams read with `live=sse`, `/v1/sessions/{s}/live`,
//! `/v1/presence/{ns}/live`, `/v1/work/cancellations` — or with
//! `Accept: text/event-stream`). hyper keeps two 8 KiB buffers for as long as
//! a connection lives (its read buffer and the head of its write buffer,
//! neither of which hyper 1 lets a server size), and an idle SSE follower
//! holds its connection for a minute at a time: 16 of the ~19 KiB a follower
//! cost the server were those buffers. Such a request is read here, answered
//! by the same router (tokens, limits, metrics and all), and its answer
//! written here with chunked framing and no buffer kept while the stream
//! idles. When the answer ends, the connection goes back to hyper, with
//! whatever the client sent meanwhile, for its next requests.
//!
//! Anything unusual in that first request (a body, `Expect`, `Upgrade`,
//! HTTP/1.0, more than one request in the first read, a head over
//! [`HEAD_LIMIT`], a header hyper would refuse) sends the connection to hyper
//! with the bytes read so far, and hyper answers it as it answers any other.

use std::io::{self, Write as _};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use http_body_util::BodyExt;
use hyper::body::Buf;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The largest first request head read here; a longer one goes to hyper.
const HEAD_LIMIT: usize = 4096;
/// The most headers a first request read here may have.
const MAX_HEADERS: usize = 48;

/// Serves one accepted connection until it closes, or until `shutdown` and
/// the request in flight has been answered.
pub(crate) async fn serve(mut stream: TcpStream, app: Router, shutdown: CancellationToken) {
    let mut read = vec![0; HEAD_LIMIT];
    let mut len = 0;
    let taken = loop {
        let n = tokio::select! {
            n = stream.read(&mut read[len..]) => n,
            () = shutdown.cancelled() => return,
        };
        match n {
            Ok(0) if len == 0 => return,
            Ok(0) => break None,
            Ok(n) => len += n,
            Err(_) => return,
        }
        match first_request(&read[..len]) {
            First::Partial if len < HEAD_LIMIT => continue,
            First::Partial | First::Hyper => break None,
            First::Sse { request, close } => break Some((request, close)),
        }
    };
    let Some((request, close)) = taken else {
        read.truncate(len);
        return with_hyper(stream, Bytes::from(read), app, shutdown).await;
    };
    drop(read);
    let Ok(response) = Box::pin(app.clone().oneshot(*request)).await;
    let after = match answer(&mut stream, response, close).await {
        Ok(After::Open(sent_meanwhile)) => sent_meanwhile,
        Ok(After::Closed) | Err(_) => return,
    };
    if close || shutdown.is_cancelled() {
        let _ = stream.shutdown().await;
        return;
    }
    with_hyper(stream, Bytes::from(after), app, shutdown).await;
}

/// What the first bytes of a connection hold.
enum First {
    /// Not yet a whole request head.
    Partial,
    /// A request for hyper.
    Hyper,
    /// A whole request for Server-Sent Events, and nothing after it;
    /// `close` when the client asked to close the connection after it.
    Sse {
        request: Box<Request<Body>>,
        close: bool,
    },
}

/// Reads the first request of a connection, if it is one to answer here.
fn first_request(bytes: &[u8]) -> First {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let head_len = match head.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return First::Partial,
        Err(_) => return First::Hyper,
    };
    if head_len != bytes.len() || head.method != Some("GET") || head.version != Some(1) {
        return First::Hyper;
    }
    let Some(target) = head.path.filter(|path| path.starts_with('/')) else {
        return First::Hyper;
    };
    let Ok(uri) = target.parse::<Uri>() else {
        return First::Hyper;
    };
    let mut request = Request::new(Body::empty());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    let mut wants_sse = is_sse_route(request.uri());
    let mut close = false;
    for h in head.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            return First::Hyper;
        };
        let text = value.to_str().unwrap_or("");
        // Whether the list holds `token` (before any `;` parameters).
        let lists = |token: &str| {
            text.split(',').any(|t| {
                t.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case(token)
            })
        };
        match name {
            header::TRANSFER_ENCODING | header::EXPECT | header::UPGRADE => return First::Hyper,
            header::CONTENT_LENGTH if text.trim() != "0" => return First::Hyper,
            header::CONNECTION if lists("upgrade") => return First::Hyper,
            header::CONNECTION => close |= lists("close"),
            header::ACCEPT => wants_sse |= lists("text/event-stream"),
            _ => {}
        }
        request.headers_mut().append(name, value);
    }
    if !wants_sse {
        return First::Hyper;
    }
    First::Sse {
        request: Box::new(request),
        close,
    }
}

/// Whether `uri` names a route that answers with Server-Sent Events
/// whatever the request's `Accept`: a Durable Streams read with
/// `live=sse`, a session's or a namespace's live feed, the cancellations.
fn is_sse_route(uri: &Uri) -> bool {
    let path = uri.path();
    uri.query()
        .is_some_and(|query| query.split('&').any(|pair| pair == "live=sse"))
        || ((path.starts_with("/v1/sessions/") || path.starts_with("/v1/presence/"))
            && path.ends_with("/live"))
        || path == "/v1/work/cancellations"
}

/// How the connection stands once an answer was written.
enum After {
    /// Open, with the bytes the client sent while the answer was written.
    Open(Vec<u8>),
    /// The client went away, or the answer's body failed part way.
    Closed,
}

/// How an answer's body is framed.
#[derive(Clone, Copy, PartialEq)]
enum Framing {
    None,
    Length,
    Chunked,
}

/// Writes `response`: its head as hyper writes one (lower-case names, a
/// `date`, the framing), then its body as it comes, while watching for
/// the client going away.
async fn answer(
    stream: &mut TcpStream,
    response: Response<Body>,
    close: bool,
) -> io::Result<After> {
    let (parts, mut body) = response.into_parts();
    let framing = {
        let mut head = Vec::with_capacity(512);
        let status = parts.status;
        head.extend_from_slice(b"HTTP/1.1 ");
        head.extend_from_slice(status.as_str().as_bytes());
        head.push(b' ');
        head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        head.extend_from_slice(b"\r\n");
        let headers = &parts.headers;
        for (name, value) in headers {
            if name == header::CONNECTION || name == header::TRANSFER_ENCODING {
                continue;
            }
            line(&mut head, name.as_str(), value.as_bytes());
        }
        if !headers.contains_key(header::DATE) {
            line(
                &mut head,
                "date",
                httpdate::fmt_http_date(SystemTime::now()).as_bytes(),
            );
        }
        let framing = if status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            Framing::None
        } else if headers.contains_key(header::CONTENT_LENGTH) {
            Framing::Length
        } else if let Some(n) = HttpBody::size_hint(&body).exact() {
            line(&mut head, "content-length", n.to_string().as_bytes());
            Framing::Length
        } else {
            line(&mut head, "transfer-encoding", b"chunked");
            Framing::Chunked
        };
        if close {
            line(&mut head, "connection", b"close");
        }
        head.extend_from_slice(b"\r\n");
        stream.write_all(&head).await?;
        framing
    };
    let mut sent_meanwhile = Vec::new();
    let mut probe = [0; 64];
    let (mut reader, mut writer) = stream.split();
    if framing != Framing::None {
        loop {
            let frame = tokio::select! {
                frame = body.frame() => frame,
                read = reader.read(&mut probe), if sent_meanwhile.len() < HEAD_LIMIT => {
                    match read {
                        Ok(0) | Err(_) => return Ok(After::Closed),
                        Ok(n) => sent_meanwhile.extend_from_slice(&probe[..n]),
                    }
                    continue;
                }
            };
            let data = match frame {
                None => break,
                Some(Err(_)) => return Ok(After::Closed),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => data,
                    _ => continue,
                },
            };
            if framing == Framing::Chunked {
                // The size line, on the stack: this runs for every event.
                let mut line = [0; 20];
                let mut cursor = io::Cursor::new(&mut line[..]);
                write!(cursor, "{:x}\r\n", data.len())?;
                let size = cursor.position() as usize;
                let mut chunk = Buf::chain(Buf::chain(&line[..size], data), &b"\r\n"[..]);
                writer.write_all_buf(&mut chunk).await?;
            } else {
                writer.write_all(&data).await?;
            }
        }
        if framing == Framing::Chunked {
            writer.write_all(b"0\r\n\r\n").await?;
        }
    }
    Ok(After::Open(sent_meanwhile))
}

/// One header line of a response head.
fn line(head: &mut Vec<u8>, name: &str, value: &[u8]) {
    head.extend_from_slice(name.as_bytes());
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// Serves the rest of a connection with hyper, `read` being what was read
/// from it already; at `shutdown` the request in flight is answered and the
/// connection closed.
async fn with_hyper(stream: TcpStream, read: Bytes, app: Router, shutdown: CancellationToken) {
    let service = hyper_util::service::TowerToHyperService::new(
        app.map_request(|request: Request<hyper::body::Incoming>| request.map(Body::new)),
    );
    let io = Rewind { read, stream };
    let connection = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    // Boxed: the tasks of SSE connections answered here never hold it.
    let mut connection = Box::pin(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = ended {
        tracing::trace!(%error, "connection ended with an error");
    }
}

/// A connection whose first bytes were already read: reads give those
/// first.
struct Rewind {
    read: Bytes,
    stream: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.read.is_empty() {
            return Pin::new(&mut self.stream).poll_read(cx, buf);
        }
        let n = self.read.len().min(buf.remaining());
        buf.put_slice(&self.read[..n]);
        self.read.advance(n);
        if self.read.is_empty() {
            // Frees the first read's buffer.
            self.read = Bytes::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
