//! The gateway's reply encoding.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::json::write_reply;
use super::*;

fn to_json(value: Value, base64: bool) -> Json {
    let mut out = Vec::new();
    write_reply(&mut out, value, base64);
    serde_json::from_slice(&out).expect("the gateway writes JSON")
}

#[test]
fn replies_encode_like_the_provider() {
    let value = Value::Array(vec![
        Value::BulkString("é\n".as_bytes().to_vec()),
        Value::Okay,
        Value::Int(3),
        Value::Nil,
        Value::Map(vec![(Value::SimpleString("k".into()), Value::Double(0.5))]),
    ]);
    assert_eq!(
        to_json(value.clone(), true),
        json!([
            STANDARD.encode("é\n"),
            "OK",
            3,
            null,
            [STANDARD.encode("k"), 0.5]
        ])
    );
    assert_eq!(
        to_json(value, false),
        json!(["é\n", "OK", 3, null, ["k", 0.5]])
    );
}
