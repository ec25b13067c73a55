//! The body of a Durable Streams SSE response.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Bytes;
use futures::Stream;
use futures::stream::BoxStream;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::metrics::StreamGuard;

/// The comment sent when nothing else was sent for a while.
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// The chunks of an SSE response: the events' bytes as they come (empty
/// pieces skipped), a keep-alive comment after `keep_alive` without any
/// chunk, and the end when the events end, when `lifetime` has passed, or
/// when the server stops.
///
/// The keep-alive counts from the last chunk sent, so a busy follower gets
/// none, and the followers of one stream, connected together, do not all
/// get theirs in the same instant while events are flowing. One timer
/// serves both deadlines and is not touched when an event goes out: the
/// time of the last chunk is noted, and when the timer fires before the
/// keep-alive is due it is set again for then. The timer and the shutdown
/// signal are polled only when no event is ready.
pub(super) struct SseBody {
    events: BoxStream<'static, Vec<u8>>,
    timer: Pin<Box<Sleep>>,
    keep_alive: Duration,
    last_sent: Instant,
    ends_at: Instant,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    done: bool,
    _guard: StreamGuard,
}

impl SseBody {
    pub(super) fn new(
        events: BoxStream<'static, Vec<u8>>,
        keep_alive: Duration,
        lifetime: Duration,
        shutdown: CancellationToken,
        guard: StreamGuard,
    ) -> Self {
        let now = Instant::now();
        let ends_at = now + lifetime;
        Self {
            events,
            timer: Box::pin(tokio::time::sleep_until((now + keep_alive).min(ends_at))),
            keep_alive,
            last_sent: now,
            ends_at,
            shutdown: Box::pin(shutdown.cancelled_owned()),
            done: false,
            _guard: guard,
        }
    }
}

impl Stream for SseBody {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match this.events.as_mut().poll_next(cx) {
                Poll::Ready(Some(chunk)) if chunk.is_empty() => continue,
                Poll::Ready(Some(chunk)) => {
                    let now = Instant::now();
                    this.last_sent = now;
                    // Past its lifetime the response ends after this chunk.
                    this.done = now >= this.ends_at;
                    return Poll::Ready(Some(Ok(Bytes::from(chunk))));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => break,
            }
        }
        if this.shutdown.as_mut().poll(cx).is_ready() {
            this.done = true;
            return Poll::Ready(None);
        }
        loop {
            ready!(this.timer.as_mut().poll(cx));
            let now = Instant::now();
            if now >= this.ends_at {
                this.done = true;
                return Poll::Ready(None);
            }
            let due = this.last_sent + this.keep_alive;
            if now >= due {
                this.last_sent = now;
                this.timer
                    .as_mut()
                    .reset((now + this.keep_alive).min(this.ends_at));
                return Poll::Ready(Some(Ok(Bytes::from_static(KEEP_ALIVE))));
            }
            this.timer.as_mut().reset(due.min(this.ends_at));
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use futures::channel::mpsc;

    use super::*;

    const KEEP: Duration = Duration::from_secs(15);
    const LIFE: Duration = Duration::from_secs(60);

    fn body(shutdown: CancellationToken) -> (mpsc::UnboundedSender<String>, SseBody) {
        let (tx, rx) = mpsc::unbounded();
        let guard = StreamGuard::new(&metrics::Gauge::noop());
        let body = SseBody::new(
            rx.map(String::into_bytes).boxed(),
            KEEP,
            LIFE,
            shutdown,
            guard,
        );
        (tx, body)
    }

    /// The next chunk as text, `None` at the end; pending when nothing is
    /// ready at this instant of the paused clock.
    fn next_now(body: &mut SseBody) -> Poll<Option<String>> {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        Pin::new(body)
            .poll_next(&mut cx)
            .map(|c| c.map(|c| String::from_utf8(c.unwrap().to_vec()).unwrap()))
    }

    #[tokio::test(start_paused = true)]
    async fn the_keep_alive_counts_from_the_last_chunk_sent() {
        let (tx, mut body) = body(CancellationToken::new());
        assert_eq!(next_now(&mut body), Poll::Pending);
        tokio::time::advance(Duration::from_secs(10)).await;
        tx.unbounded_send("data 1\n\n".into()).unwrap();
        tx.unbounded_send(String::new()).unwrap();
        assert_eq!(next_now(&mut body), Poll::Ready(Some("data 1\n\n".into())));
        assert_eq!(next_now(&mut body), Poll::Pending);
        // 15 s after the start, but only 5 s after the event: nothing yet.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(next_now(&mut body), Poll::Pending);
        // 15 s after the event.
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            next_now(&mut body),
            Poll::Ready(Some(": keep-alive\n\n".into()))
        );
        assert_eq!(next_now(&mut body), Poll::Pending);
        tokio::time::advance(Duration::from_secs(14)).await;
        assert_eq!(next_now(&mut body), Poll::Pending);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            next_now(&mut body),
            Poll::Ready(Some(": keep-alive\n\n".into()))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_response_ends_at_its_lifetime_even_while_events_flow() {
        let (tx, mut body) = body(CancellationToken::new());
        for _ in 0..6 {
            tokio::time::advance(Duration::from_secs(10)).await;
            tx.unbounded_send("data\n\n".into()).unwrap();
            assert_eq!(next_now(&mut body), Poll::Ready(Some("data\n\n".into())));
        }
        // The last event went out 60 s after the start: the end follows.
        tx.unbounded_send("data\n\n".into()).unwrap();
        assert_eq!(next_now(&mut body), Poll::Ready(None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_response_ends_at_its_lifetime() {
        let (_tx, mut body) = body(CancellationToken::new());
        let mut keep_alives = 0;
        loop {
            match next_now(&mut body) {
                Poll::Ready(Some(c)) => {
                    assert_eq!(c, ": keep-alive\n\n");
                    keep_alives += 1;
                }
                Poll::Ready(None) => break,
                Poll::Pending => tokio::time::advance(Duration::from_secs(1)).await,
            }
        }
        // At 15, 30 and 45 s; the end at 60 s.
        assert_eq!(keep_alives, 3);
        assert_eq!(body.ends_at, Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn the_response_ends_when_the_events_end_or_the_server_stops() {
        let (tx, mut body) = body(CancellationToken::new());
        drop(tx);
        assert_eq!(next_now(&mut body), Poll::Ready(None));
        assert_eq!(next_now(&mut body), Poll::Ready(None));

        let shutdown = CancellationToken::new();
        let (_tx, mut body) = super::tests::body(shutdown.clone());
        assert_eq!(next_now(&mut body), Poll::Pending);
        shutdown.cancel();
        assert_eq!(next_now(&mut body), Poll::Ready(None));
    }
}
