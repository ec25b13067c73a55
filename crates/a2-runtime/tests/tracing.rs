//! RT7: every attempt runs in a `tracing` span carrying session, index,
//! attempt, type and outcome.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::{MemoryStore, NewEvent, Store, StoreOptions};
use a2_runtime::{App, Backoff};
use serde_json::{Value, json};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// Collects the fields of every closed `a2.attempt` span.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<BTreeMap<String, String>>>>);

impl<S> Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "a2.attempt" {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(fields) = span.extensions_mut().remove::<Fields>()
        {
            self.0.lock().unwrap().push(fields.0);
        }
    }
}

#[tokio::test]
async fn rt7_each_attempt_has_a_span_with_its_outcome() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let app = App::builder(store)
        .backoff(Backoff::none())
        .poll_interval(Duration::from_millis(5))
        .handler("job", |ctx, _: Value| async move {
            if ctx.attempt() == 1 {
                return Err("first try fails".into());
            }
            Ok(())
        })
        .build()
        .unwrap();
    app.append("chat", vec![NewEvent::new("job", json!(null))])
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), app.idle())
        .await
        .unwrap();

    let spans = capture.0.lock().unwrap().clone();
    let summary: Vec<Vec<&str>> = spans
        .iter()
        .map(|f| {
            ["session", "index", "attempt", "type", "outcome"]
                .iter()
                .map(|k| f.get(*k).map_or("-", String::as_str))
                .collect()
        })
        .collect();
    assert_eq!(
        summary,
        [
            ["chat", "1", "1", "job", "failed"],
            ["chat", "1", "2", "job", "completed"]
        ]
    );
    let stats = app.stats();
    assert_eq!((stats.claimed, stats.failed, stats.completed), (2, 1, 1));
}
