//! A worker that runs the `thumbnail` job with Rust code in its own process, from 1 to 8 runs
//! at once as the backlog asks. Start it, then enqueue work with the `producer` example:
//!
//! ```sh
//! cargo run --example worker -- redis://127.0.0.1/
//! cargo run --example producer -- redis://127.0.0.1/ 20
//! ```
//!
//! Ctrl-C stops it: running thumbnails get the shutdown grace to finish.

use std::error::Error;
use std::path::Path;

use redcron::engine::Shutdown;
use redcron::engine::worker::Concurrency;
use redcron::handler::{Completed, RunContext, RunError};
use redcron::replica::{Replica, ReplicaConfig};
use redcron::schedule::parse_file;
use redcron::store::{Store, StoreSettings};

/// The job this worker declares. Its command never runs here: the handler below replaces it.
/// A producer can only enqueue runs of a job some live replica declares.
const JOBS: &str = r#"
[jobs.thumbnail]
command = "false"
queue = "images"
retries = 2
"#;

/// The namespace the two examples share.
const NAMESPACE: &str = "examples";

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1/".to_owned());
    let store = Store::connect(&url, NAMESPACE, StoreSettings::default()).await?;
    let jobs = parse_file(Path::new("worker.toml"), JOBS).map_err(|problems| {
        let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
        listed.join("\n")
    })?;
    let mut config = ReplicaConfig {
        replica_id: format!("example-worker-{}", std::process::id()),
        ..ReplicaConfig::default()
    };
    config.workers.queues = vec!["images".to_owned()];
    config.workers.concurrency = Concurrency::between(1, 8);
    let replica = Replica::builder(store)
        .jobs(jobs)
        .config(config)
        .handler("thumbnail", |run: RunContext| async move {
            let payload: serde_json::Value = match run.payload.as_deref().map(serde_json::from_str)
            {
                Some(Ok(payload)) => payload,
                // No retry can fix a payload that is not JSON: straight to the dead letters.
                Some(Err(error)) => {
                    return Err(RunError::permanent(format!("bad payload: {error}")));
                }
                None => return Err(RunError::permanent("no payload: which image?")),
            };
            let image = payload["image"].as_str().unwrap_or("?");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            println!(
                "thumbnail of {image} made ({}, attempt {})",
                run.run_id, run.attempt
            );
            Ok(Completed {
                output: format!("{image}: 128x128"),
                ..Completed::default()
            })
        })
        .build();
    let shutdown = Shutdown::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    println!("worker ready in namespace {NAMESPACE}, serving queue images");
    replica.run(shutdown).await?;
    Ok(())
}
