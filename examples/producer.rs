//! A producer that enqueues `thumbnail` runs for the `worker` example: some now at high
//! priority, most at normal, a few delayed, and one unique per image so that a second upload of
//! the same image within the hour is refused.
//!
//! ```sh
//! cargo run --example producer -- redis://127.0.0.1/ 20
//! ```

use std::error::Error;
use std::time::Duration;

use redcron::client::{Client, ClientError};
use redcron::schedule::Priority;

/// The namespace the two examples share.
const NAMESPACE: &str = "examples";

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1/".to_owned());
    let count: usize = args.next().map_or(Ok(10), |count| count.parse())?;
    let client = Client::connect(&url, NAMESPACE).await?;
    for index in 0..count {
        let payload = serde_json::json!({ "image": format!("upload-{index}.png") });
        let mut request = client
            .enqueue("thumbnail")
            .payload(&payload)?
            // The first few jump the queue.
            .priority(if index < 3 {
                Priority::High
            } else {
                Priority::Normal
            })
            // One run per image within the hour.
            .unique_for(Duration::from_secs(3600));
        if index % 5 == 4 {
            // Every fifth a second from now, on Redis's clock.
            request = request.after(Duration::from_secs(1));
        }
        match request.send().await {
            Ok(run) => println!("enqueued {}", run.run_id),
            Err(ClientError::Duplicate { holder, .. }) => {
                println!("already enqueued as {holder}");
            }
            Err(ClientError::UnknownJob(_)) => {
                return Err(
                    "no live replica declares the job thumbnail: start the worker \
                            example first"
                        .into(),
                );
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}
