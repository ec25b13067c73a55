//! Options checked once at build (RT12), and the serialization error code
//! (RT8).

use super::*;

/// RT12: `build` refuses nonsense instead of clamping it.
#[test]
fn rt12_build_rejects_nonsense_options() {
    let store = memory();
    let refused = |b: AppBuilder, what: &str| match b.build() {
        Err(err) => assert_eq!(err.code(), ErrorCode::InvalidArgument, "{what}: {err}"),
        Ok(_) => panic!("RT12: {what} was accepted"),
    };
    refused(builder(&store).concurrency(0), "concurrency 0");
    refused(builder(&store).max_failures(0), "max_failures 0");
    refused(
        builder(&store)
            .lease_ttl(Duration::from_secs(10))
            .renew_interval(Duration::from_secs(10)),
        "renew interval equal to the lease ttl",
    );
    refused(
        builder(&store).renew_interval(Duration::from_secs(60)),
        "renew interval above the lease ttl",
    );
    refused(builder(&store).lease_ttl(Duration::ZERO), "zero lease ttl");
    refused(builder(&store).holder(""), "empty holder");
    refused(
        builder(&store).batch_handler("t", 0, |_ctx, _: Vec<Value>| async move { Ok(()) }),
        "batch of 0",
    );
    assert!(builder(&store).build().is_ok());
}

/// RT8: a state that does not decode as the asked type is a
/// `Serialization` error, not `InvalidArgument` (the input was fine).
#[tokio::test]
async fn rt8_state_that_does_not_decode_is_a_serialization_error() {
    let store = memory();
    let app = builder(&store)
        .reducer("count", 0u64, |n: &mut u64, _e| *n += 1)
        .build()
        .unwrap();
    app.append("s", vec![NewEvent::new("t", json!(1)).settled()])
        .await
        .unwrap();
    let err = app.state::<String>("s", "count").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Serialization, "RT8: {err}");
    let err = app.state::<u64>("s", "nope").await.unwrap_err();
    assert_eq!(
        err.code(),
        ErrorCode::InvalidArgument,
        "an unknown reducer is bad input"
    );
}
