//! Many runs created at once ([`Client::send_all`]): one clock read and pipelined script calls
//! instead of two round trips per run.

use super::request::submitted;
use super::{Client, ClientError, RunRequest, Submitted};

impl Client {
    /// Creates the runs `requests` ask for, pipelined (a script call per thousand runs, ten calls
    /// a round trip); each run is created whole or not at all, and the answers are in the order
    /// of `requests`: a run refused (unknown job, duplicate, in the past, a payload its workflow
    /// cannot take) has its own error and does not stop the others. Who the client acts for
    /// ([`Client::acting_as`]) is recorded on each run, and once per thousand runs as an
    /// action in the events stream.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let requests = (0..10_000).map(|n| {
    ///     client.enqueue("thumbnail").payload(&serde_json::json!({ "image": n }))
    /// });
    /// let requests = requests.collect::<Result<Vec<_>, _>>()?;
    /// for answer in client.send_all(requests).await? {
    ///     if let Err(error) = answer {
    ///         eprintln!("refused: {error}");
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Redis errors, for the whole batch: runs of the script calls before the failing one
    /// exist, those of the calls after it may.
    pub async fn send_all(
        &self,
        requests: Vec<RunRequest<'_>>,
    ) -> Result<Vec<Result<Submitted, ClientError>>, ClientError> {
        let now_ms = self.store.now_ms().await?;
        let mut prepared = Vec::with_capacity(requests.len());
        for request in requests {
            prepared.push(request.prepare(now_ms).await);
        }
        let accepted: Vec<_> = prepared
            .iter()
            .filter_map(|request| request.as_ref().ok())
            .cloned()
            .collect();
        // One answer per run sent, in order: the store checks that Redis gave as many.
        let acting = self.acting(false);
        let mut enqueued = self
            .store
            .enqueue_many_by(&accepted, acting)
            .await?
            .into_iter();
        Ok(prepared
            .into_iter()
            .map(|request| {
                let request = request?;
                let answer = enqueued
                    .next()
                    .expect("enqueue_many answers once for every run it is given");
                submitted(request.job, answer, now_ms)
            })
            .collect())
    }
}
