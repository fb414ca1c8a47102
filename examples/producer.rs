//! A producer that enqueues `thumbnail` runs for the `worker` example: some now at high
//! priority, most at normal, a few delayed, and one unique per image so that a second upload of
//! the same image within the hour is refused.
//!
//! ```sh
//! cargo run --example producer -- redis://127.0.0.1/ 20
//! ```

use std::error::Error;
use std::time::Duration;

use redcron::schedule::Priority;
use redcron::store::{Enqueue, Enqueued, Store, StoreSettings, payload_fingerprint};

/// The namespace the two examples share.
const NAMESPACE: &str = "examples";

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1/".to_owned());
    let count: usize = args.next().map_or(Ok(10), |count| count.parse())?;
    let store = Store::connect(&url, NAMESPACE, StoreSettings::default()).await?;
    let now_ms = store.now_ms().await?;
    for index in 0..count {
        let payload = serde_json::json!({ "image": format!("upload-{index}.png") });
        let request = Enqueue {
            job: "thumbnail".to_owned(),
            // Every fifth a second from now, on Redis's clock; the rest at once.
            due_ms: (index % 5 == 4).then_some(now_ms + 1_000),
            payload: Some(payload.to_string()),
            // The first few jump the queue.
            priority: Some(if index < 3 {
                Priority::High
            } else {
                Priority::Normal
            }),
            unique: Some((
                payload_fingerprint("thumbnail", &payload),
                Duration::from_secs(3600),
            )),
        };
        match store.enqueue_run(&request).await? {
            Enqueued::Scheduled { run_id, .. } => println!("enqueued {run_id}"),
            Enqueued::Duplicate { holder } => println!("already enqueued as {holder}"),
            Enqueued::UnknownJob => {
                return Err(
                    "no live replica declares the job thumbnail: start the worker \
                            example first"
                        .into(),
                );
            }
        }
    }
    Ok(())
}
