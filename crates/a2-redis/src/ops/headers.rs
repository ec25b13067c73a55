//! The header of every session script against its Rust encoder: the names
//! a script gives its `ARGV` positions are the names its encoder pushes
//! (scripts whose encodings vary check theirs beside their encoder).

use a2_core::{Claim, Expiry, SnapshotWrite};
use serde_json::json;

use super::*;

#[test]
fn session_script_headers_match_their_encoders() {
    let claims = [Claim {
        index: 1,
        attempt: 2,
    }];
    let snapshot = SnapshotWrite {
        reducer: "r".into(),
        index: 1,
        state: json!(1),
    };
    let scripts: [(&crate::lua::SessionScript, Args); 12] = [
        (&cancel::SCRIPT, cancel::encode(3, Some("stop"))),
        (&claim::SCRIPT, claim::encode("w", 5, 10, true, &[1, 2])),
        (&clear::SCRIPT, clear::encode()),
        (&fail::SCRIPT, fail::encode(1, 1, "boom", 3, Some(5))),
        (&read_state::SCRIPT, read_state::encode("r", 10)),
        (&release::SCRIPT, release::encode("w", &claims)),
        (&renew::SCRIPT, renew::encode("w", 5, &claims)),
        (&revive::SCRIPT, revive::encode(3)),
        (&lifecycle::CLOSE, lifecycle::encode_close()),
        (
            &lifecycle::SET_EXPIRY,
            lifecycle::encode_set_expiry(Expiry::ttl(5)),
        ),
        (
            &lifecycle::TRIM,
            lifecycle::encode_trim(3, &[b"#a".to_vec(), b"#b".to_vec()]),
        ),
        (&snapshots::SCRIPT, snapshots::encode(&[snapshot])),
    ];
    for (script, args) in &scripts {
        crate::lua::header::check_session(script, &args.names);
    }
}
