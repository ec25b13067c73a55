//! Every failure the server answers with: one JSON shape,
//! `{"error": {"code": …, "message": …}}`, whose `code` is the contract's
//! stable [`a2_core::ErrorCode`] when the store refused the call, or one of
//! the HTTP-only codes below when the request never reached it.
//!
//! The extractors here wrap axum's own (`Json`, `Query`, `Path`) so that a
//! malformed body, query or path gets the same JSON error as a refusal of the
//! store, never axum's plain-text rejection.

use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

/// An error answer: an HTTP status and the JSON body's code and message.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

/// The body of every error answer.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable code. The contract's codes (`InvalidArgument`,
    /// `PartialDuplicateBatch`, `SupersededAttempt`, `StoreUnavailable`,
    /// `Corrupted`, `StoreClosed`, `SessionCleared`, `Serialization`) come
    /// from the store;
    /// `Unauthorized`, `Forbidden`, `NotFound`, `MethodNotAllowed`,
    /// `PayloadTooLarge` and `UnsupportedMediaType` from HTTP itself;
    /// `SnapshotsBehind` from a trim that would leave a reducer's snapshot
    /// behind (RT19).
    pub code: String,
    /// What happened, for a person.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 `InvalidArgument`: the input is wrong, nothing was written.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "InvalidArgument", message)
    }

    /// 401 `Unauthorized`: no token, or an unknown one.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized", message)
    }

    /// 403 `Forbidden`: a known token without the scope the route needs.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "Forbidden", message)
    }

    /// 404 `NotFound`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NotFound", message)
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The body, as sent.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message.clone(),
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl From<a2_core::Error> for ApiError {
    /// A refusal of the store keeps its contract code; the status says what
    /// the caller should do: fix the input (400), give up on a stale attempt
    /// or conflicting retry (409), retry later (503), or alert (500).
    fn from(error: a2_core::Error) -> Self {
        use a2_core::ErrorCode as C;
        let code = error.code();
        let status = match code {
            C::InvalidArgument => StatusCode::BAD_REQUEST,
            C::PartialDuplicateBatch | C::SupersededAttempt => StatusCode::CONFLICT,
            // StoreClosed: the server is shutting down; another instance
            // may serve the call.
            C::StoreUnavailable | C::StoreClosed => StatusCode::SERVICE_UNAVAILABLE,
            // The log is final (CL2): the write conflicts with its state.
            C::SessionClosed => StatusCode::CONFLICT,
            // A fork's target is another session (FK3); another write came
            // first (A13).
            C::SessionExists | C::FrontierMoved => StatusCode::CONFLICT,
            // What was asked for is gone for good (ST6, EX4, TR3).
            C::SessionCleared | C::SessionExpired | C::Trimmed => StatusCode::GONE,
            C::Corrupted | C::Serialization => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::error!(%error, "store error");
        }
        // The code names the kind; bad input's message need not repeat it.
        let message = match &error {
            a2_core::Error::InvalidArgument { message, .. } => message.clone(),
            _ => error.to_string(),
        };
        Self::new(status, code.as_str(), message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// A request whose declared body length is over `limit` (the server's
/// `max_body_bytes`) is answered here, before any handler runs: its body is
/// read to its end first (up to 64 MiB), since a client still sending when
/// the server answers and closes would see its connection reset instead of
/// the 413. Any other request is handed back.
pub(crate) async fn refuse_declared_oversize(
    request: Request,
    limit: usize,
) -> Result<Request, Response> {
    const DRAINED: u64 = 64 << 20;
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(length) if length > limit as u64 => {
            if length <= DRAINED {
                use futures::StreamExt;
                let mut body = request.into_body().into_data_stream();
                while let Some(Ok(_)) = body.next().await {}
            }
            Err(body_over_limit(limit))
        }
        _ => Ok(request),
    }
}

/// A 413 with the limit the body met and how to raise it: the extractors'
/// own text names neither. `limit` is the server's `max_body_bytes`.
pub(crate) fn body_over_limit(limit: usize) -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "PayloadTooLarge",
        format!(
            "the request body is over this server's limit of {limit} bytes; \
             `a2 serve --max-body-bytes N` raises it"
        ),
    )
    .into_response()
}

/// A rejection of one of axum's extractors, as an [`ApiError`] with the
/// rejection's own status (400, 413, 415, 422 → 400).
fn rejected(status: StatusCode, text: String) -> ApiError {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(status, "PayloadTooLarge", text),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(status, "UnsupportedMediaType", text),
        // A body that parses as JSON but does not fit the request type is
        // bad input like any other: 400, not axum's 422.
        _ => ApiError::invalid(text),
    }
}

/// The rejections of the extractors wrapped here convert with `?`, each
/// as [`rejected`] says.
macro_rules! rejections {
    ($($rejection:ty),*) => {$(
        impl From<$rejection> for ApiError {
            fn from(rejection: $rejection) -> Self {
                rejected(rejection.status(), rejection.body_text())
            }
        }
    )*};
}

rejections!(BytesRejection, JsonRejection, PathRejection, QueryRejection);

/// `axum::Json` whose rejections are JSON errors.
///
/// Every request body of this API is a JSON object: a bare array (say, the
/// events of an append without their `{"events": …}`) is told so, where
/// serde would answer that the array's first element is not what the
/// object's first field wants ("invalid type: map, expected a sequence").
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !has_json_type(req.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                "Expected request with `Content-Type: application/json`",
            ));
        }
        let bytes = axum::body::Bytes::from_request(req, state).await?;
        parse(&bytes).map(Json)
    }
}

/// A JSON body of an object type, as [`Json`] reads it.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(ApiError::invalid(
            "the body must be a JSON object, not an array (an append sends {\"events\": [...]})",
        ));
    }
    let axum::Json(value) = axum::Json::<T>::from_bytes(bytes)?;
    Ok(value)
}

/// Whether the request says its body is JSON (`application/json`, or a
/// type with a `+json` suffix), as `axum::Json` requires.
fn has_json_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype.len() > 5 && subtype[subtype.len() - 5..].eq_ignore_ascii_case("+json"))
}

/// A JSON body that may be left out: no body at all (no content type, no
/// bytes) reads as `T::default()`; one that is sent is read as [`Json`]
/// reads it. For requests whose every field is optional (a cancel's
/// reason).
#[derive(Debug, Clone, Copy, Default)]
pub struct OptionalJson<T>(pub T);

impl<T, S> FromRequest<S> for OptionalJson<T>
where
    T: DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let typed = req.headers().contains_key(axum::http::header::CONTENT_TYPE);
        let bytes = axum::body::Bytes::from_request(req, state).await?;
        if !typed && bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        if !typed {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                "Expected request with `Content-Type: application/json`, or no body",
            ));
        }
        parse(&bytes).map(OptionalJson)
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// Wraps one of axum's extractors of the request's parts (`Query`,
/// `Path`) so that its rejections are JSON errors.
macro_rules! parts_extractor {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $name<T>(pub T);

        impl<T, S> FromRequestParts<S> for $name<T>
        where
            T: DeserializeOwned + Send,
            S: Send + Sync,
        {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
                let axum::extract::$name(value) =
                    axum::extract::$name::from_request_parts(parts, state).await?;
                Ok($name(value))
            }
        }
    };
}

parts_extractor!(
    /// `axum::extract::Query` whose rejections are JSON errors.
    Query
);

parts_extractor!(
    /// `axum::extract::Path` whose rejections are JSON errors.
    Path
);

/// A raw body (`axum::body::Bytes`) whose rejections (a body over the
/// limit) are JSON errors.
#[derive(Debug, Clone, Default)]
pub struct Body(pub axum::body::Bytes);

impl std::ops::Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Body(axum::body::Bytes::from_request(req, state).await?))
    }
}

/// `Result` of a handler.
pub type ApiResult<T> = Result<T, ApiError>;
