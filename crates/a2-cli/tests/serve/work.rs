//! The work API (`/v1/work/*`) as a remote worker uses it, one behaviour
//! per test: finding and claiming work, renewing, completing, releasing,
//! failing until dead-lettered, reviving, and the metrics the cycle leaves.
//! Each test starts its own `a2 serve` with the same three jobs.

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

use crate::server::{Server, get, ids, post};

/// A server on the memory store whose session `jobs` holds `j1` and `j2`
/// on lane `l`, and `j3` without a lane.
async fn jobs() -> (Server, Client) {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let (status, body) = post(
        &client,
        server.url("/v1/sessions/jobs/events"),
        json!({"events": [
            {"id": "j1", "type": "job", "lane": "l"},
            {"id": "j2", "type": "job", "lane": "l"},
            {"id": "j3", "type": "job"}
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    (server, client)
}

/// Posts `body` to `/v1/work/{op}` and expects 200.
async fn work(server: &Server, client: &Client, op: &str, body: Value) -> Value {
    let (status, answer) = post(client, server.url(&format!("/v1/work/{op}")), body).await;
    assert_eq!(status, 200, "{op}: {answer}");
    answer
}

/// Claims every ready event of `jobs` for `holder`, except `exclude`.
async fn claim(server: &Server, client: &Client, holder: &str, exclude: &[u64]) -> Value {
    let body = json!({"holder": holder, "ttl_ms": 60_000, "session": "jobs",
                      "limit": 10, "exclude_indexes": exclude});
    work(server, client, "claim", body).await
}

/// PS1, C2, C3: the pending sessions are listed; a claim without a session
/// finds one and takes its ready events (the lane holds `j2` back); a claim
/// of what is leased is told when to come back.
#[tokio::test]
async fn ps1_c2_c3_a_claim_finds_the_work_and_a_second_is_busy() {
    let (server, client) = jobs().await;
    let (_, pending) = get(&client, server.url("/v1/work/pending")).await;
    assert_eq!(pending["sessions"], json!(["jobs"]));
    let body = json!({"holder": "w1", "ttl_ms": 60_000, "limit": 10});
    let claimed = work(&server, &client, "claim", body).await;
    assert_eq!(claimed["outcome"], "claimed");
    assert_eq!(claimed["session"], "jobs");
    assert_eq!(ids(&claimed["events"]), ["j1", "j3"]);
    assert_eq!(claimed["events"][0]["attempt_count"], 1);
    assert_eq!(claimed["events"][0]["claim_holder"], "w1");
    let busy = claim(&server, &client, "w2", &[]).await;
    assert_eq!(busy["outcome"], "busy");
    assert!(busy["retry_at"].as_i64().unwrap() > 0, "{busy}");
}

/// RN2: the holder's leases move.
#[tokio::test]
async fn rn2_a_renewal_moves_the_holders_leases() {
    let (server, client) = jobs().await;
    claim(&server, &client, "w1", &[]).await;
    let renewed = work(
        &server,
        &client,
        "renew",
        json!({"session": "jobs", "holder": "w1", "ttl_ms": 60_000,
               "claims": [{"index": 1, "attempt": 1}, {"index": 3, "attempt": 1}]}),
    )
    .await;
    assert_eq!(renewed, json!({"renewed": [1, 3], "superseded": []}));
}

/// CO2, CO3: a completion appends the returned events with their cause;
/// the same completion again answers the same rows.
#[tokio::test]
async fn co2_co3_a_completion_appends_its_events_and_a_repeat_is_a_replay() {
    let (server, client) = jobs().await;
    claim(&server, &client, "w1", &[]).await;
    let complete = json!({"session": "jobs", "index": 1, "attempt": 1,
                          "events": [{"id": "r1", "type": "job.done", "settled": true}]});
    let done = work(&server, &client, "complete", complete.clone()).await;
    assert_eq!(done["outcome"], "completed");
    assert_eq!(
        done["events"][0]["cause"],
        json!({"index": 1, "attempt": 1})
    );
    let again = work(&server, &client, "complete", complete).await;
    assert_eq!(again, done);
    // The lane moved on: j2 is ready now.
    assert_eq!(
        ids(&claim(&server, &client, "w2", &[]).await["events"]),
        ["j2"]
    );
}

/// RL1: a released lease can be claimed again at once, as a new attempt.
#[tokio::test]
async fn rl1_a_released_event_is_claimed_again_as_a_new_attempt() {
    let (server, client) = jobs().await;
    claim(&server, &client, "w1", &[]).await;
    let released = work(
        &server,
        &client,
        "release",
        json!({"session": "jobs", "holder": "w1", "claims": [{"index": 3, "attempt": 1}]}),
    )
    .await;
    assert_eq!(released, json!({"released": [3]}));
    let again = claim(&server, &client, "w2", &[]).await;
    assert_eq!(ids(&again["events"]), ["j3"]);
    assert_eq!(again["events"][0]["attempt_count"], 2);
}

/// F6, CO5: failures are counted until the event is dead-lettered; a stale
/// attempt's completion is superseded; the events' states show it.
#[tokio::test]
async fn f6_co5_failures_dead_letter_an_event_and_stale_attempts_are_superseded() {
    let (server, client) = jobs().await;
    let fail = |attempt: u32, error: &str| {
        json!({"session": "jobs", "index": 3, "attempt": attempt,
               "error": error, "max_failures": 2})
    };
    claim(&server, &client, "w1", &[]).await;
    let failed = work(&server, &client, "fail", fail(1, "boom")).await;
    assert_eq!(failed, json!({"outcome": "failed", "failure_count": 1}));
    assert_eq!(
        ids(&claim(&server, &client, "w1", &[1]).await["events"]),
        ["j3"]
    );
    let dead = work(&server, &client, "fail", fail(2, "boom again")).await;
    assert_eq!(
        dead,
        json!({"outcome": "dead_lettered", "failure_count": 2})
    );
    let stale = json!({"session": "jobs", "index": 3, "attempt": 1});
    assert_eq!(
        work(&server, &client, "complete", stale).await["outcome"],
        "superseded"
    );
    let (_, page) = get(&client, server.url("/v1/sessions/jobs/events")).await;
    let states: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["pending", "pending", "dead_lettered"]);
    assert_eq!(page["events"][2]["last_error"], "boom again");
}

/// RV1, RV2, RV3: a dead letter revived is pending again with its failures
/// reset and runs again as a new attempt; a second revive finds nothing to
/// do; an index outside the log is refused.
#[tokio::test]
async fn rv1_rv2_rv3_a_revived_dead_letter_runs_again() {
    let (server, client) = jobs().await;
    claim(&server, &client, "w1", &[]).await;
    let fail = json!({"session": "jobs", "index": 3, "attempt": 1,
                      "error": "boom", "max_failures": 1});
    assert_eq!(
        work(&server, &client, "fail", fail).await["outcome"],
        "dead_lettered"
    );
    let revive = server.url("/v1/sessions/jobs/events/3/revive");
    let (status, revived) = post(&client, revive.clone(), json!(null)).await;
    assert_eq!(status, 200, "{revived}");
    assert_eq!(revived["outcome"], "revived");
    assert_eq!(revived["event"]["state"], "pending");
    assert_eq!(revived["event"]["failure_count"], 0);
    let (_, again) = post(&client, revive, json!(null)).await;
    assert_eq!(again["outcome"], "not_dead_lettered");
    let (status, missing) = post(
        &client,
        server.url("/v1/sessions/jobs/events/99/revive"),
        json!(null),
    )
    .await;
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("InvalidArgument"))
    );
    let claimed = claim(&server, &client, "w2", &[1]).await;
    assert_eq!(
        ids(&claimed["events"]),
        ["j3"],
        "the revived event runs again"
    );
    assert_eq!(claimed["events"][0]["attempt_count"], 2);
}

/// `/metrics` counts what the work API did, and times each route.
#[tokio::test]
async fn metrics_count_the_work_cycle() {
    let (server, client) = jobs().await;
    claim(&server, &client, "w1", &[]).await;
    let complete = json!({"session": "jobs", "index": 1, "attempt": 1});
    work(&server, &client, "complete", complete).await;
    let fail = json!({"session": "jobs", "index": 3, "attempt": 1,
                      "error": "boom", "max_failures": 1});
    work(&server, &client, "fail", fail).await;
    let (status, _) = post(
        &client,
        server.url("/v1/sessions/jobs/events/3/revive"),
        json!(null),
    )
    .await;
    assert_eq!(status, 200);
    let metrics = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "a2_claimed_events_total 2",
        "a2_completed_attempts_total 1",
        "a2_failed_attempts_total 1",
        "a2_dead_lettered_events_total 1",
        "a2_revived_events_total 1",
        "a2_appended_events_total 3",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    assert!(
        metrics.contains(
            "a2_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/work/claim\",status=\"200\""
        ),
        "{metrics}"
    );
}

/// CN1, CN2, CN5, DL1, C7 over HTTP: a delayed event is appended at once and a
/// claim is told when it is due, also one that hands out another event; a remote worker following
/// `/v1/work/cancellations` hears the cancel of the attempt it holds, whose
/// renewal then lists it superseded and whose completion is refused; a
/// second cancel is `not_pending`; a bad reason is 400 with nothing
/// written.
#[tokio::test]
async fn cn1_cn5_dl1_a_remote_worker_hears_the_cancel_of_its_attempt() {
    let (server, client) = jobs().await;
    // DL1: appended now, due in a minute.
    let (status, body) = post(
        &client,
        server.url("/v1/sessions/later/events"),
        json!({"events": [{"id": "r1", "type": "remind", "delay_ms": 60_000}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["events"][0]["state"], "delayed");
    let due = body["events"][0]["retry_at"].as_i64().expect("a due time");
    let body = json!({"holder": "w1", "ttl_ms": 60_000, "session": "later", "limit": 10});
    let busy = work(&server, &client, "claim", body).await;
    assert_eq!(busy["outcome"], "busy");
    assert_eq!(busy["retry_at"], due, "DL3: busy until the due time");
    // C7: a claim that hands out an event names when the delayed one is due.
    let (status, body) = post(
        &client,
        server.url("/v1/sessions/later/events"),
        json!({"events": [{"id": "now", "type": "remind"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let body = json!({"holder": "w1", "ttl_ms": 60_000, "session": "later", "limit": 10});
    let claimed = work(&server, &client, "claim", body).await;
    assert_eq!(claimed["outcome"], "claimed", "{claimed}");
    assert_eq!(ids(&claimed["events"]), ["now"]);
    assert_eq!(claimed["next_at"], due, "C7: the delayed event's due time");

    // CN5: the worker follows cancels, then claims j1 and j3.
    let response = client
        .get(server.url("/v1/work/cancellations"))
        .send()
        .await
        .unwrap();
    let mut cancels = crate::sse::Reader::new(response);
    let claimed = claim(&server, &client, "w1", &[]).await;
    assert_eq!(ids(&claimed["events"]), ["j1", "j3"]);
    let (status, answer) = post(
        &client,
        server.url("/v1/sessions/jobs/events/1/cancel"),
        json!({"reason": "the user pressed stop"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "cancelled");
    assert_eq!(answer["event"]["state"], "cancelled");
    assert_eq!(answer["event"]["cancel_reason"], "the user pressed stop");
    let message = cancels
        .next(std::time::Duration::from_secs(10))
        .await
        .expect("a cancel message");
    assert_eq!(message.event, "cancel");
    assert_eq!(
        message.json(),
        json!({"session": "jobs", "index": 1, "attempt": 1})
    );
    // CN2: the renewal lists it superseded; its completion is refused.
    let renewed = work(
        &server,
        &client,
        "renew",
        json!({"session": "jobs", "holder": "w1", "ttl_ms": 60_000,
               "claims": [{"index": 1, "attempt": 1}, {"index": 3, "attempt": 1}]}),
    )
    .await;
    assert_eq!(renewed["superseded"], json!([1]));
    assert_eq!(renewed["renewed"], json!([3]));
    let completed = work(
        &server,
        &client,
        "complete",
        json!({"session": "jobs", "index": 1, "attempt": 1, "events": []}),
    )
    .await;
    assert_eq!(completed["outcome"], "superseded");
    // CN1: the lane moved on: j2 is claimable now.
    let next = claim(&server, &client, "w1", &[3]).await;
    assert_eq!(ids(&next["events"]), ["j2"]);
    // CN3, CN4.
    let (status, again) = post(
        &client,
        server.url("/v1/sessions/jobs/events/1/cancel"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["outcome"], "not_pending");
    let (status, refused) = post(
        &client,
        server.url("/v1/sessions/jobs/events/3/cancel"),
        json!({"reason": "x".repeat(1025)}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("1024")),
        "{refused}"
    );
    let (_, page) = get(&client, server.url("/v1/sessions/jobs/events")).await;
    assert_eq!(
        page["events"][2]["state"], "pending",
        "CN4: nothing written"
    );
}
