//! Reducers: named folds of a session's events into state (RT5).

use std::marker::PhantomData;

use a2_core::{Error, Event, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A reducer with its state type erased to JSON, the form snapshots take.
pub(crate) trait ErasedReducer: Send + Sync {
    /// The state before any event.
    fn initial(&self) -> Result<Value>;
    /// Folds `events` (in index order) into `state`.
    fn fold(&self, state: Value, events: &[Event]) -> Result<Value>;
}

pub(crate) struct TypedReducer<S, F> {
    pub(crate) name: String,
    pub(crate) initial: S,
    pub(crate) fold: F,
    pub(crate) _state: PhantomData<fn() -> S>,
}

impl<S, F> ErasedReducer for TypedReducer<S, F>
where
    S: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    F: Fn(&mut S, &Event) + Send + Sync + 'static,
{
    fn initial(&self) -> Result<Value> {
        serde_json::to_value(&self.initial).map_err(|e| {
            Error::serialization(format!(
                "state of reducer {} does not serialize: {e}",
                self.name
            ))
        })
    }

    fn fold(&self, state: Value, events: &[Event]) -> Result<Value> {
        let mut state: S = serde_json::from_value(state).map_err(|e| {
            Error::serialization(format!(
                "stored snapshot of reducer {} does not decode: {e}",
                self.name
            ))
        })?;
        for event in events {
            (self.fold)(&mut state, event);
        }
        serde_json::to_value(&state).map_err(|e| {
            Error::serialization(format!(
                "state of reducer {} does not serialize: {e}",
                self.name
            ))
        })
    }
}

/// A reducer's state as the caller's type (RT8: a mismatch is
/// `Serialization`).
pub(crate) fn decode_state<S: DeserializeOwned>(value: Value, reducer: &str) -> Result<S> {
    serde_json::from_value(value).map_err(|e| {
        Error::serialization(format!(
            "state of reducer {reducer} does not decode as {}: {e}",
            std::any::type_name::<S>()
        ))
    })
}

/// Decoding an event's payload inside a reducer or a feed.
pub trait EventExt {
    /// The payload decoded as `T`, or `None` when it does not decode.
    ///
    /// ```
    /// use a2_core::Event;
    /// use a2_runtime::EventExt;
    /// #[derive(serde::Deserialize)]
    /// struct Message { text: String }
    /// let e = Event {
    ///     id: "e1".into(), event_type: "user.message".into(),
    ///     payload: serde_json::json!({"text": "hi"}), index: 1,
    ///     session_id: "s".into(), created_at: 0, cause: None, lane: None,
    /// };
    /// assert_eq!(e.decode::<Message>().unwrap().text, "hi");
    /// ```
    fn decode<T: DeserializeOwned>(&self) -> Option<T>;
}

impl EventExt for Event {
    fn decode<T: DeserializeOwned>(&self) -> Option<T> {
        T::deserialize(&self.payload).ok()
    }
}
