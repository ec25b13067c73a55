//! Run with `cargo run -p example-quickstart`.
use a2::runtime::{App, event};
use a2::{MemoryStore, NewEvent, StoreOptions};
use futures::StreamExt;
use serde_json::json;

#[derive(serde::Deserialize)]
struct Question {
    text: String,
}

#[tokio::main]
async fn main() -> a2::Result<()> {
    let store = std::sync::Arc::new(MemoryStore::new(StoreOptions::default()));
    let app = App::builder(store)
        // A handler: streams a settled progress event, then returns its answer.
        .handler("question", |ctx, q: Question| async move {
            ctx.progress("thinking", json!({ "about": q.text })).await?;
            let answer = json!({ "text": format!("you asked {:?}", q.text) });
            Ok(event("answer", answer)?.settled())
        })
        // A reducer: how many answers the session holds.
        .reducer("answers", 0, |n: &mut u32, e| {
            *n += u32::from(e.event_type == "answer");
        })
        .build()?;
    // The live feed: every event of the session, as it is appended.
    let mut feed = app.stream("chat", 0).take(6);
    for text in ["what is a2?", "is it durable?"] {
        let question = NewEvent::new("question", json!({ "text": text }));
        app.append("chat", vec![question]).await?;
    }
    while let Some(e) = feed.next().await.transpose()? {
        println!("#{} {:<8} {}", e.index, e.event_type, e.payload);
    }
    let answers: u32 = app.state("chat", "answers").await?;
    println!("{answers} answers");
    Ok(())
}
