//! The web inspector at `/`: one server-rendered page with a little
//! JavaScript, no build step.

use axum::Router;
use axum::response::Html;
use axum::routing::get;

use crate::state::AppState;

const PAGE: &str = include_str!("inspector.html");

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/", get(|| async { Html(PAGE) }))
}
