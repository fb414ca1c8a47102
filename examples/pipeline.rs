//! Starts a declared workflow through [`Client`] and follows it to its end, printing each step's
//! status as it changes: the image pipeline of the guide (docs/guide.md, Workflows), from Rust.
//!
//! ```sh
//! cargo run --example pipeline -- redis://127.0.0.1/ images '{"image": "cat.png"}'
//! ```

use std::collections::HashMap;
use std::error::Error;
use std::time::Duration;

use redcron::client::Client;
use redcron::store::WorkflowState;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1/".to_owned());
    let workflow = args.next().unwrap_or_else(|| "images".to_owned());
    let payload: Option<serde_json::Value> = args
        .next()
        .map(|text| serde_json::from_str(&text))
        .transpose()?;
    let namespace = std::env::var("REDCRON_NAMESPACE").unwrap_or_else(|_| "redcron".to_owned());
    let client = Client::connect(&url, &namespace).await?;
    let started = client.start_workflow(&workflow, payload.as_ref()).await?;
    println!("started {workflow} {}", started.id);
    let mut shown: HashMap<String, String> = HashMap::new();
    loop {
        let Some(instance) = client.workflow(&started.id).await? else {
            return Err(format!("instance {} is gone", started.id).into());
        };
        for step in &instance.steps {
            let status = step.status.to_string();
            if shown.get(&step.name) != Some(&status) {
                println!("{} {status}", step.name);
                shown.insert(step.name.clone(), status);
            }
        }
        if instance.state != WorkflowState::Running {
            println!("{workflow} {}", instance.state);
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
