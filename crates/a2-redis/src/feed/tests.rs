//! The wake-up parsing and inbox bound of the Redis feeds.

use super::*;

/// ST4: an inbox over 512 KiB drops its wake-ups and asks for a read.
#[test]
fn st4_inbox_overflow_drops_messages_and_marks_dirty() {
    let inbox = Inbox::default();
    let message = vec![b'x'; 100 * 1024];
    for _ in 0..5 {
        inbox.message(&message);
    }
    {
        let state = inbox.lock();
        assert_eq!(state.messages.len(), 5);
        assert!(!state.dirty);
    }
    inbox.message(&message);
    let state = inbox.take();
    assert!(state.messages.is_empty(), "the inbox was dropped");
    assert!(state.dirty, "the feed must catch up by reading");
    assert_eq!(state.bytes, 0);
}

#[test]
fn wake_ups_parse_with_and_without_events() {
    let carried: Wake = serde_json::from_str(r#"{"f":3,"t":5,"e":[["a","t",{"x":1}]]}"#)
        .expect("a carried wake-up");
    assert_eq!(carried.f, 3);
    assert_eq!(carried.e.map(|e| e.len()), Some(1));
    let bare: Wake = serde_json::from_str(r#"{"f":9}"#).expect("a frontier");
    assert!(bare.e.is_none() && bare.t.is_none());
}

/// ST1: the events a wake-up carries keep their lane and cause, as the
/// batch writes them (`Batch::wake`), and a feed applies them as such.
#[test]
fn carried_events_keep_their_lane_and_cause() {
    use a2_core::{Cause, NewEvent, SequentialIds};
    let events = vec![
        NewEvent::new("plain", serde_json::json!(1)),
        NewEvent::new("chat", serde_json::json!(2)).lane("l|ane"),
        NewEvent::new("reply", serde_json::json!(3)).caused_by(Cause::new(1, 2)),
    ];
    let batch = crate::ops::batch::Batch::new(events, &SequentialIds::new("e")).expect("a batch");
    let wake = batch.wake(1 << 20, None);
    let message = format!(r#"{{"f":3,"t":7,"e":{wake}}}"#);
    let parsed: Wake = serde_json::from_str(&message).expect("a carried wake-up");
    let carried: Vec<(Option<String>, Option<String>)> = parsed
        .e
        .expect("events")
        .into_iter()
        .map(|Carried(_, _, _, lane, cause)| (lane, cause))
        .collect();
    assert_eq!(
        carried,
        [
            (None, None),
            (Some("l|ane".into()), None),
            (None, Some("1:2".into()))
        ]
    );
    // A completion's returned events carry the completed attempt.
    let batch = crate::ops::batch::Batch::new(
        vec![NewEvent::new("t", serde_json::json!(0))],
        &SequentialIds::new("r"),
    )
    .expect("a batch");
    let cause = Cause {
        batch_size: Some(3),
        ..Cause::new(4, 1)
    };
    let wake = batch.wake(1 << 20, Some(cause));
    assert!(wake.ends_with(r#",null,"4:1:3"]]"#), "{wake}");
}
