//! The gateway's reply encoding.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::json::to_json;
use super::*;

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
