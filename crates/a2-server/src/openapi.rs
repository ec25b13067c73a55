//! The OpenAPI document at `/openapi.json`, generated from the handlers'
//! annotations and the model's types (utoipa), never written by hand.

use axum::Router;
use axum::routing::get;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Document, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::error::{ErrorBody, ErrorDetail};
use crate::model::*;
use crate::routes;
use crate::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "a2",
        description = "Durable sessions over HTTP: append-only event logs, remote workers, live feeds, presence. See docs/http.md."
    ),
    paths(
        routes::sessions::list,
        routes::sessions::append,
        routes::sessions::read_events,
        routes::sessions::history,
        routes::sessions::state,
        routes::sessions::put_snapshot,
        routes::sessions::snapshots,
        routes::sessions::clear,
        routes::sessions::revive,
        routes::sessions::cancel,
        routes::sessions::close,
        routes::sessions::set_expiry,
        routes::sessions::trim,
        routes::sessions::fork,
        routes::live::session,
        routes::live::presence,
        routes::presence::read,
        routes::presence::set,
        routes::work::pending,
        routes::work::claim,
        routes::work::renew,
        routes::work::complete,
        routes::work::fail,
        routes::work::release,
        routes::live::cancellations,
        routes::streams::read::read,
        routes::streams::read::head,
        routes::streams::write::create,
        routes::streams::write::append,
        routes::streams::write::delete,
        routes::streams::subscriptions::manage::confirm,
        routes::streams::subscriptions::manage::show,
        routes::streams::subscriptions::manage::remove,
        routes::streams::subscriptions::manage::add_streams,
        routes::streams::subscriptions::manage::remove_stream,
        routes::streams::subscriptions::consume::callback,
        routes::streams::subscriptions::consume::ack,
        routes::streams::subscriptions::consume::release,
        routes::streams::subscriptions::consume::claim,
        routes::streams::subscriptions::manage::jwks,
        routes::metrics,
    ),
    components(schemas(
        ErrorBody,
        ErrorDetail,
        EventState,
        ClaimKind,
        CompleteKind,
        FailKind,
        ReviveKind,
        CancelKind,
        CloseKind,
        ForkKind
    )),
    modifiers(&Security, &Errors, &Tags)
)]
struct ApiDoc;

/// The bearer scheme every operation names with its scope.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The error answers any operation may give, added to each, all with the
/// `ErrorBody` shape: written once here rather than on every handler.
struct Errors;

impl Modify for Errors {
    fn modify(&self, openapi: &mut Document) {
        let errors = [
            ("400", "Bad input (InvalidArgument); nothing was written"),
            ("401", "No token, or an unknown one (Unauthorized)"),
            ("403", "The token lacks the scope (Forbidden)"),
            ("404", "No such route (NotFound)"),
            (
                "405",
                "The route does not take this method (MethodNotAllowed)",
            ),
            (
                "409",
                "A conflicting retry, a stale attempt, a write to a closed session, or a fork onto another session (PartialDuplicateBatch, SupersededAttempt, SessionClosed, SessionExists)",
            ),
            (
                "410",
                "The session was cleared or expired, or the events asked for were trimmed (SessionCleared, SessionExpired, Trimmed)",
            ),
            (
                "413",
                "The body is larger than the server accepts (PayloadTooLarge)",
            ),
            (
                "415",
                "The body is not application/json (UnsupportedMediaType)",
            ),
            ("503", "The store is unavailable; retry (StoreUnavailable)"),
        ];
        for item in openapi.paths.paths.values_mut() {
            for op in operations(item) {
                for (status, description) in errors {
                    let response = ResponseBuilder::new()
                        .description(description)
                        .content(
                            "application/json",
                            ContentBuilder::new()
                                .schema(Some(Ref::from_schema_name("ErrorBody")))
                                .build(),
                        )
                        .build();
                    op.responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert(response.into());
                }
            }
        }
    }
}

/// Each operation's tag, from its path: a live feed (`…/live`) is `live`;
/// any other operation is filed under its path's first part (`/v1/work/…`
/// is `work`, `/v1/stream/…` is `durable streams`). Written once here
/// rather than on every handler, so a new route is filed where its path
/// says.
struct Tags;

/// The tag of the operations at `path`.
fn tag_of(path: &str) -> &str {
    if path.ends_with("/live") {
        return "live";
    }
    let part = path
        .trim_start_matches("/v1")
        .split('/')
        .nth(1)
        .unwrap_or("");
    match part {
        "stream" => "durable streams",
        other => other,
    }
}

impl Modify for Tags {
    fn modify(&self, openapi: &mut Document) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let tag = tag_of(path).to_owned();
            for op in operations(item) {
                op.tags = Some(vec![tag.clone()]);
            }
        }
    }
}

/// The operations of a path, whatever their methods.
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.head,
    ]
    .into_iter()
    .flatten()
}

/// The OpenAPI document, as JSON text.
pub fn openapi_json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route(
        "/openapi.json",
        get(|| async {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                openapi_json(),
            )
        }),
    )
}
