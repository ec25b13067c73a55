//! The listeners of each subscribed channel, shared by the SSE and polling
//! subscribers: reference-counted per channel, with per-channel state `T`
//! that lives exactly as long as the channel has listeners.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use a2_core::Error;

use crate::subscriber::Listener;

pub(crate) struct Channel<T> {
    listeners: HashMap<u64, Arc<dyn Listener>>,
    pub(crate) state: T,
}

struct Registry<T> {
    channels: HashMap<String, Channel<T>>,
    next_id: u64,
    closed: Option<Error>,
}

pub(crate) struct Channels<T> {
    // A std mutex: never held across an await, and listeners are called
    // outside of it.
    registry: Mutex<Registry<T>>,
}

impl<T> Default for Channels<T> {
    fn default() -> Self {
        Self {
            registry: Mutex::new(Registry {
                channels: HashMap::new(),
                next_id: 0,
                closed: None,
            }),
        }
    }
}

/// What [`Channels::add`] did.
pub(crate) enum Added {
    /// The listener joins a channel that already had listeners.
    Joined(u64),
    /// The listener is the channel's first: `T` was made for it.
    First(u64),
}

impl<T> Channels<T> {
    fn lock(&self) -> MutexGuard<'_, Registry<T>> {
        // Every critical section is a few map operations that leave the
        // registry consistent, so a poisoned lock is still usable.
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `listener` to `channel`, making the channel's state with
    /// `first` when it is new. Fails when the subscriber is closed.
    pub(crate) fn add(
        &self,
        channel: &str,
        listener: Arc<dyn Listener>,
        first: impl FnOnce() -> T,
    ) -> Result<Added, Error> {
        let mut registry = self.lock();
        if let Some(error) = registry.closed.clone() {
            return Err(error);
        }
        let id = registry.next_id;
        registry.next_id += 1;
        match registry.channels.get_mut(channel) {
            Some(existing) => {
                existing.listeners.insert(id, listener);
                Ok(Added::Joined(id))
            }
            None => {
                let state = first();
                registry.channels.insert(
                    channel.to_owned(),
                    Channel {
                        listeners: HashMap::from([(id, listener)]),
                        state,
                    },
                );
                Ok(Added::First(id))
            }
        }
    }

    /// Removes listener `id`; returns the channel's state when it was the
    /// last one.
    pub(crate) fn remove(&self, channel: &str, id: u64) -> Option<T> {
        let mut registry = self.lock();
        let entry = registry.channels.get_mut(channel)?;
        entry.listeners.remove(&id);
        if entry.listeners.is_empty() {
            return registry.channels.remove(channel).map(|c| c.state);
        }
        None
    }

    pub(crate) fn listeners(&self, channel: &str) -> Vec<Arc<dyn Listener>> {
        self.lock()
            .channels
            .get(channel)
            .map(|c| c.listeners.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Runs `f` over every channel and its state.
    pub(crate) fn each<R>(&self, mut f: impl FnMut(&str, &mut T) -> Option<R>) -> Vec<R> {
        self.lock()
            .channels
            .iter_mut()
            .filter_map(|(name, channel)| f(name, &mut channel.state))
            .collect()
    }

    /// Runs `f` on `channel`'s state, if it is subscribed.
    pub(crate) fn with<R>(&self, channel: &str, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.lock()
            .channels
            .get_mut(channel)
            .map(|c| f(&mut c.state))
    }

    /// Ends `channel`'s subscriptions with `error`, if its state still
    /// passes `current` (a newer subscription to the same channel is left
    /// alone).
    pub(crate) fn fail_channel(
        &self,
        channel: &str,
        current: impl FnOnce(&T) -> bool,
        error: &Error,
    ) {
        let failed = {
            let mut registry = self.lock();
            match registry.channels.get(channel) {
                Some(c) if current(&c.state) => registry.channels.remove(channel),
                _ => None,
            }
        };
        for listener in failed.into_iter().flat_map(|c| c.listeners.into_values()) {
            listener.fail(error.clone());
        }
    }

    /// Ends every subscription with `error`; returns the states.
    pub(crate) fn fail_all(&self, error: &Error) -> Vec<T> {
        let drained: Vec<Channel<T>> = self.lock().channels.drain().map(|(_, c)| c).collect();
        let mut states = Vec::with_capacity(drained.len());
        for channel in drained {
            for listener in channel.listeners.into_values() {
                listener.fail(error.clone());
            }
            states.push(channel.state);
        }
        states
    }

    /// Closes: every subscription fails, and so does every later one.
    pub(crate) fn close(&self, error: &Error) -> Vec<T> {
        self.lock().closed = Some(error.clone());
        self.fail_all(error)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed.is_some()
    }
}
