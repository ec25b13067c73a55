//! `a2 serve` as a user runs it: the real binary in a process of its own,
//! on a loopback port, spoken to over HTTP by clients other people wrote
//! (reqwest here; Python's standard library, npm packages, schemathesis and
//! a browser in the modules that say so).

#[path = "serve/server.rs"]
mod server;
#[path = "serve/sse.rs"]
mod sse;

#[path = "serve/api.rs"]
mod api;
#[path = "serve/auth.rs"]
mod auth;
#[path = "serve/browser.rs"]
mod browser;
#[path = "serve/durable_clients.rs"]
mod durable_clients;
#[path = "serve/durable_protocol.rs"]
mod durable_protocol;
#[path = "serve/durable_streams.rs"]
mod durable_streams;
#[path = "serve/durable_subscriptions.rs"]
mod durable_subscriptions;
#[path = "serve/durable_writers.rs"]
mod durable_writers;
#[path = "serve/followers.rs"]
mod followers;
#[path = "serve/lifecycle.rs"]
mod lifecycle;
#[path = "serve/marks.rs"]
mod marks;
#[path = "serve/pages.rs"]
mod pages;
#[path = "serve/python_worker.rs"]
mod python_worker;
#[path = "serve/schemathesis.rs"]
mod schemathesis;
#[path = "serve/work.rs"]
mod work;
