//! Handlers: what runs for an event, and what it may return.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use a2_core::{NewEvent, StoredEvent};
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;

/// Why a handler failed. The message is recorded as the event's
/// `last_error` by `fail_attempt`.
///
/// Any error converts into it with `?` (its `source` chain is kept in the
/// message), and so do `&str` and `String`:
///
/// ```
/// use a2_runtime::HandlerError;
/// fn parse(text: &str) -> Result<u32, HandlerError> {
///     if text.is_empty() {
///         return Err("empty input".into());
///     }
///     Ok(text.parse::<u32>()?)
/// }
/// assert_eq!(parse("").unwrap_err().message(), "empty input");
/// assert!(parse("x").unwrap_err().message().contains("invalid digit"));
/// ```
pub struct HandlerError {
    message: String,
}

impl HandlerError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message, with the causes of the original error after `: `.
    pub fn message(&self) -> &str {
        &self.message
    }
}

// No `impl std::error::Error for HandlerError`: it would overlap with the
// blanket conversion below, which is what makes `?` work on any error.
impl<E> From<E> for HandlerError
where
    E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    fn from(error: E) -> Self {
        let error: Box<dyn std::error::Error + Send + Sync> = error.into();
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self { message }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HandlerError").field(&self.message).finish()
    }
}

/// What a handler returns on success: the events that `complete_attempt`
/// appends with `cause = {index, attempt}` (CO2).
pub trait IntoEvents {
    /// The events, in order.
    fn into_events(self) -> Vec<NewEvent>;
}

impl IntoEvents for () {
    fn into_events(self) -> Vec<NewEvent> {
        Vec::new()
    }
}

impl IntoEvents for NewEvent {
    fn into_events(self) -> Vec<NewEvent> {
        vec![self]
    }
}

impl IntoEvents for Option<NewEvent> {
    fn into_events(self) -> Vec<NewEvent> {
        self.into_iter().collect()
    }
}

impl IntoEvents for Vec<NewEvent> {
    fn into_events(self) -> Vec<NewEvent> {
        self
    }
}

/// An event whose payload is `payload` serialized to JSON.
///
/// ```
/// use a2_runtime::event;
/// #[derive(serde::Serialize)]
/// struct Reply { text: String }
/// let e = event("assistant.reply", Reply { text: "hi".into() }).unwrap().lane("chat");
/// assert_eq!(e.payload["text"], "hi");
/// ```
pub fn event(
    event_type: impl Into<String>,
    payload: impl Serialize,
) -> Result<NewEvent, HandlerError> {
    let payload = serde_json::to_value(payload)?;
    Ok(NewEvent::new(event_type, payload))
}

/// A handler with its payload type erased: decodes, runs, collects events.
pub(crate) type BoxHandler =
    Arc<dyn Fn(Context) -> BoxFuture<'static, Result<Vec<NewEvent>, HandlerError>> + Send + Sync>;

/// Wraps a typed handler: the payload is decoded as `T` first, and a payload
/// that does not decode fails the attempt with the decoding error.
pub(crate) fn erase<T, F, Fut, R>(f: F) -> BoxHandler
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Context, T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, HandlerError>> + Send + 'static,
    R: IntoEvents,
{
    erase_with(f, |ctx| {
        // Decoded from the stored value by reference: no copy of the whole
        // payload is made first.
        T::deserialize(ctx.payload()).map_err(|e| {
            HandlerError::new(format!(
                "payload of {} does not decode as {}: {e}",
                ctx.event_type(),
                std::any::type_name::<T>()
            ))
        })
    })
}

/// Wraps `f`, whose input `decode` makes of the context; an input that does
/// not decode fails the attempt with the decoding error.
fn erase_with<P, F, Fut, R>(f: F, decode: fn(&Context) -> Result<P, HandlerError>) -> BoxHandler
where
    P: Send + 'static,
    F: Fn(Context, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, HandlerError>> + Send + 'static,
    R: IntoEvents,
{
    let f = Arc::new(f);
    Arc::new(move |ctx: Context| {
        let f = Arc::clone(&f);
        Box::pin(async move {
            let input = decode(&ctx)?;
            f(ctx, input).await.map(IntoEvents::into_events)
        })
    })
}

/// A batch handler with its payload type erased: decodes every event of the
/// batch (the context's [`Context::batch`]), runs once, collects events.
pub(crate) type BoxBatchHandler = BoxHandler;

/// Wraps a typed batch handler: every payload of the batch is decoded as
/// `T` first, and one that does not decode fails the whole batch (RT8, RT9).
pub(crate) fn erase_batch<T, F, Fut, R>(f: F) -> BoxBatchHandler
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Context, Vec<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, HandlerError>> + Send + 'static,
    R: IntoEvents,
{
    erase_with(f, |ctx| {
        let decode = |event: &StoredEvent| {
            T::deserialize(&event.event.payload).map_err(|e| {
                HandlerError::new(format!(
                    "payload of {} (index {}) does not decode as {}: {e}",
                    event.event.event_type,
                    event.event.index,
                    std::any::type_name::<T>()
                ))
            })
        };
        ctx.batch().iter().map(decode).collect()
    })
}
