//! The a2 runtime: register handlers and reducers, append events, and every
//! event is processed — through crashes, restarts and many processes — with
//! lanes kept in order, failures retried with backoff and then
//! dead-lettered, and state available at any time (SPEC §9).
//!
//! ```
//! use a2_core::{MemoryStore, NewEvent, StoreOptions};
//! use a2_runtime::{App, EventExt, event};
//!
//! #[derive(serde::Deserialize)]
//! struct Message { text: String }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> a2_core::Result<()> {
//! let app = App::builder(MemoryStore::new(StoreOptions::default()))
//!     .handler("user.message", |_ctx, m: Message| async move {
//!         Ok(event("bot.reply", serde_json::json!({ "text": m.text.to_uppercase() }))?.settled())
//!     })
//!     .reducer("replies", Vec::<String>::new(), |replies, e| {
//!         if e.event_type == "bot.reply" {
//!             replies.extend(e.payload["text"].as_str().map(str::to_owned));
//!         }
//!     })
//!     .build()?;
//! app.append("chat-1", vec![NewEvent::new("user.message", serde_json::json!({"text": "hi"}))]).await?;
//! app.idle().await;
//! let replies: Vec<String> = app.state("chat-1", "replies").await?;
//! assert_eq!(replies, ["HI"]);
//! # Ok(())
//! # }
//! ```
//!
//! # What a handler can rely on
//! - An event's *completion* happens once: the store accepts the returned
//!   events of one attempt only (CO2, CO3, CO4, CO5). A handler may still *run* more
//!   than once — after a failure, after its process died, or after its lease
//!   was lost — so side effects outside the store should be idempotent.
//! - Events of one lane of a session run one after another in index order,
//!   in any process; other events run concurrently, up to
//!   [`Options::concurrency`] per process.
//! - An error or a panic fails the attempt; the event is retried after the
//!   [`Backoff`] (on the store clock) and dead-lettered after
//!   [`Options::max_failures`] failures.
//! - Leases are renewed while the handler runs. When one is lost the
//!   handler's future is dropped at its next `.await`
//!   ([`Context::cancelled`] tells a handler doing detached work), and any
//!   late result is discarded.
//! - [`App::append`] drains the session in this process; [`App::run_worker`]
//!   also finds sessions with pending events left by other or crashed
//!   processes; [`App::shutdown`] stops gracefully.
//!
//! # Layout
//! - `app`: [`App`], [`AppBuilder`], state, shutdown.
//! - `worker`: the worker loop ([`App::run_worker`]) and [`App::ready`].
//! - `options`: [`Options`].
//! - `shared`: what the app, its drains and its contexts share (the store,
//!   handlers, reducers, options, counters, drain slots).
//! - `drain`: one session's drain (`drain/session.rs`: claim, renew,
//!   release) and its attempts (`drain/attempt.rs`: run, complete or fail);
//!   it is given the shared part, never the `App`.
//! - `context`: [`Context`], what a handler can do besides return events,
//!   through the narrow `Host` trait the shared part implements.
//! - `handler`: [`HandlerError`], [`IntoEvents`], [`event`], the erased
//!   plain and batch handlers.
//! - `ids`: deterministic ids of what an attempt writes (RT10).
//! - `retry`: trying a replayable write again when the store was unavailable.
//! - `reducer`: reducers and [`EventExt`].
//! - `backoff`: [`Backoff`].
//! - `stats`: [`Stats`], [`AttemptReport`], [`Outcome`].
#![deny(missing_docs)]

mod app;
mod backoff;
mod context;
mod drain;
mod handler;
mod ids;
mod options;
mod reducer;
mod retention;
mod retry;
mod shared;
mod stats;
mod worker;

pub use app::{App, AppBuilder, ShutdownReport};
pub use backoff::Backoff;
pub use context::Context;
pub use handler::{HandlerError, IntoEvents, event};
pub use options::Options;
pub use reducer::EventExt;
pub use retention::Retention;
pub use stats::{AttemptReport, Outcome, Stats};
