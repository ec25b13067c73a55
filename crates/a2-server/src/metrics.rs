//! Prometheus metrics, rendered at `/metrics`.
//!
//! Each router owns its own recorder rather than installing a global one,
//! so two servers in one process (tests, an application embedding the
//! router next to its own metrics) never share or fight over counters. The
//! handles are registered when the router is built, so every counter and
//! gauge shows (at 0) on a fresh server, before any traffic.

use std::sync::Mutex;
use std::time::Duration;

use axum::http::Method;
use foldhash::HashMap;
use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

/// Name of the request latency histogram.
const REQUEST_SECONDS: &str = "a2_http_request_duration_seconds";

/// The server's metrics: the recorder, and the handles of its counters.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// The latency histograms by method and status, then route: a request
    /// finds its own without building a key of three owned labels.
    latencies: Mutex<HashMap<(Method, u16), HashMap<String, Histogram>>>,
    /// Events written by appends (retries of A5 excluded).
    pub appended: Counter,
    /// Events handed out by claims.
    pub claimed: Counter,
    /// Attempts completed.
    pub completed: Counter,
    /// Failed attempts recorded (dead-lettering ones included).
    pub failed: Counter,
    /// Events dead-lettered.
    pub dead_lettered: Counter,
    /// Dead letters revived.
    pub revived: Counter,
    /// Events cancelled (CN1).
    pub cancelled: Counter,
    /// Live feeds of sessions open now (SSE and Durable Streams live reads).
    pub session_streams: Gauge,
    /// Presence streams open now.
    pub presence_streams: Gauge,
    /// Reads of the log made by the store's live feeds (ST7).
    feed_reads: Counter,
    /// Events the store's live feeds delivered.
    feed_deliveries: Counter,
    /// Live feeds open in the store now, and sessions with a shared reader.
    feed_followers: Gauge,
    feed_readers: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

static METADATA: Metadata<'static> = Metadata::new("a2_server", Level::INFO, None);

impl Metrics {
    /// A fresh recorder with every counter and gauge registered at zero.
    pub fn new() -> Self {
        // Buckets from 100 µs to 10 s: appends on a local store take well
        // under a millisecond, long polls up to their timeout.
        let buckets = [
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5, 5.0, 10.0,
        ];
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(REQUEST_SECONDS.into()), &buckets)
            // A fixed, non-empty bucket list is always valid.
            .unwrap_or_else(|_| PrometheusBuilder::new())
            .build_recorder();
        let handle = recorder.handle();
        let counter = |name: &'static str, help: &'static str| {
            recorder.describe_counter(name.into(), None, help.into());
            recorder.register_counter(&Key::from_static_name(name), &METADATA)
        };
        let appended = counter("a2_appended_events_total", "Events written by appends.");
        let claimed = counter("a2_claimed_events_total", "Events handed out by claims.");
        let completed = counter("a2_completed_attempts_total", "Attempts completed.");
        let failed = counter("a2_failed_attempts_total", "Failed attempts recorded.");
        let dead_lettered = counter("a2_dead_lettered_events_total", "Events dead-lettered.");
        let revived = counter("a2_revived_events_total", "Dead letters revived.");
        let cancelled = counter("a2_cancelled_events_total", "Events cancelled.");
        recorder.describe_gauge(
            "a2_open_streams".into(),
            None,
            "Live streams open now, by kind.".into(),
        );
        let gauge = |kind: &'static str| {
            let key = Key::from_parts("a2_open_streams", vec![Label::new("kind", kind)]);
            recorder.register_gauge(&key, &METADATA)
        };
        let session_streams = gauge("session");
        let presence_streams = gauge("presence");
        let feed_reads = counter(
            "a2_feed_reads_total",
            "Reads of the log made by live feeds: one per wake-up of a followed session.",
        );
        let feed_deliveries = counter(
            "a2_feed_deliveries_total",
            "Events delivered by live feeds.",
        );
        let plain_gauge = |name: &'static str, help: &'static str| {
            recorder.describe_gauge(name.into(), None, help.into());
            recorder.register_gauge(&Key::from_static_name(name), &METADATA)
        };
        let feed_followers = plain_gauge("a2_feed_followers", "Live feeds open in the store now.");
        let feed_readers = plain_gauge(
            "a2_feed_readers",
            "Sessions with a shared reader (followed by at least one feed) now.",
        );
        recorder.describe_histogram(
            REQUEST_SECONDS.into(),
            Some(Unit::Seconds),
            "HTTP request latency, by method, route and status.".into(),
        );
        Self {
            recorder,
            handle,
            latencies: Mutex::default(),
            appended,
            claimed,
            completed,
            failed,
            dead_lettered,
            revived,
            cancelled,
            session_streams,
            presence_streams,
            feed_reads,
            feed_deliveries,
            feed_followers,
            feed_readers,
        }
    }

    /// Takes the store's feed counters (`Store::feed_stats`) as they are
    /// now: called before each rendering.
    pub fn feeds(&self, stats: a2_core::FeedStats) {
        self.feed_reads.absolute(stats.reads);
        self.feed_deliveries.absolute(stats.deliveries);
        self.feed_followers.set(stats.followers as f64);
        self.feed_readers.set(stats.readers as f64);
    }

    /// Records one request's latency.
    pub fn request(&self, method: &Method, route: &str, status: u16, elapsed: Duration) {
        let known = self.latencies.lock().ok().and_then(|latencies| {
            latencies
                .get(&(method.clone(), status))
                .and_then(|routes| routes.get(route).cloned())
        });
        let histogram = known.unwrap_or_else(|| {
            let labels = vec![
                Label::new("method", method.as_str().to_owned()),
                Label::new("route", route.to_owned()),
                Label::new("status", status.to_string()),
            ];
            let key = Key::from_parts(REQUEST_SECONDS, labels);
            let histogram = self.recorder.register_histogram(&key, &METADATA);
            if let Ok(mut latencies) = self.latencies.lock() {
                latencies
                    .entry((method.clone(), status))
                    .or_default()
                    .insert(route.to_owned(), histogram.clone());
            }
            histogram
        });
        histogram.record(elapsed.as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Drains recorded samples into their histograms, bounding memory
    /// between scrapes; the server runs it every few seconds.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts an open stream for as long as it lives.
#[derive(Debug)]
pub struct StreamGuard(Gauge);

impl StreamGuard {
    /// Increments `gauge` now and decrements it when dropped.
    pub fn new(gauge: &Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge.clone())
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}
