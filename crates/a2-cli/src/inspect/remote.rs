//! `a2 inspect --server URL`: the same views, read from a running
//! `a2 serve` over its HTTP API (docs/http.md) instead of a store. The
//! server knows what no store does: how many live feeds follow each
//! session there now (ST7).

use a2::{EventsPage, SessionSummary};
use a2_server::error::ErrorBody;
use a2_server::model::{EventsPageResponse, SessionListResponse};
use reqwest::Url;

type Failure = Box<dyn std::error::Error>;

/// A running `a2 serve`.
pub struct Server {
    base: Url,
    token: Option<String>,
    client: reqwest::Client,
}

impl Server {
    /// The server at `url` (`http://HOST:PORT` or `https://…`), with the
    /// bearer `token` its `A2_TOKENS` asks for, if any.
    pub fn new(url: &str, token: Option<String>) -> Result<Self, Failure> {
        let base = Url::parse(url).map_err(|e| format!("--server {url:?}: {e}"))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(format!(
                "--server {url:?}: give the address of a2 serve, e.g. http://127.0.0.1:8080"
            )
            .into());
        }
        Ok(Self {
            base,
            token,
            client: reqwest::Client::new(),
        })
    }

    /// `base` + `segments` (each percent-encoded) + `query`.
    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, url: Url) -> Result<T, Failure> {
        let mut request = self.client.get(url.clone());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("cannot reach a2 serve at {}: {e}", self.base))?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            let message = serde_json::from_str::<ErrorBody>(&text)
                .map(|body| body.error.message)
                .unwrap_or(text);
            let hint = if status == reqwest::StatusCode::UNAUTHORIZED {
                " (pass a token with the read scope: --token or A2_TOKEN)"
            } else {
                ""
            };
            return Err(format!("{url} answered {status}: {message}{hint}").into());
        }
        Ok(serde_json::from_str(&text)
            .map_err(|e| format!("{url} answered something that is not a2's API: {e}"))?)
    }

    /// A page of sessions, each with its followers on the server.
    pub async fn sessions(
        &self,
        prefix: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<(SessionSummary, u64)>, Option<String>), Failure> {
        let mut query = vec![("limit", limit.to_string())];
        if let Some(prefix) = prefix {
            query.push(("prefix", prefix.to_owned()));
        }
        if let Some(cursor) = cursor {
            query.push(("cursor", cursor.to_owned()));
        }
        let page: SessionListResponse = self.get(self.url(&["v1", "sessions"], &query)).await?;
        let rows = page
            .sessions
            .into_iter()
            .map(|s| {
                let followers = s.followers;
                (SessionSummary::from(s), followers)
            })
            .collect();
        Ok((rows, page.cursor))
    }

    /// How many live feeds follow `session` on the server now.
    pub async fn followers(&self, session: &str) -> Result<u64, Failure> {
        let (rows, _) = self.sessions(Some(session), None, 1).await?;
        Ok(rows
            .into_iter()
            .find(|(s, _)| s.session_id == session)
            .map_or(0, |(_, followers)| followers))
    }

    /// A page of `session`'s events (I2).
    pub async fn events(
        &self,
        session: &str,
        after: u64,
        through: Option<u64>,
        limit: usize,
    ) -> Result<EventsPage, Failure> {
        let mut query = vec![
            ("after_index", after.to_string()),
            ("limit", limit.to_string()),
        ];
        if let Some(through) = through {
            query.push(("through_index", through.to_string()));
        }
        let url = self.url(&["v1", "sessions", session, "events"], &query);
        let page: EventsPageResponse = self.get(url).await?;
        Ok(EventsPage {
            events: page.events.into_iter().map(Into::into).collect(),
            through_index: page.through_index,
        })
    }
}
