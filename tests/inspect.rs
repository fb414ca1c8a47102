//! What the inspection commands (`status`, `jobs`, `history`, `dead list`) print for a given
//! state of Redis, seeded through the store as replicas and leaders write it.

use redcron::store::Store;

use crate::store::connect;
use crate::util::cli;
use crate::util::redis_server::RedisServer;

/// The JSON document a `--json` command printed: exactly one, whatever its lines.
#[track_caller]
fn one_document(out: &str) -> serde_json::Value {
    let mut documents = serde_json::Deserializer::from_str(out).into_iter::<serde_json::Value>();
    let document = documents
        .next()
        .unwrap_or_else(|| panic!("no JSON document in {out:?}"))
        .unwrap_or_else(|error| panic!("not JSON ({error}): {out:?}"));
    assert!(
        documents.next().is_none(),
        "more than one JSON document: {out:?}"
    );
    document
}

#[tokio::test]
async fn an_empty_namespace_reads_as_empty_not_as_an_error() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Store = connect(&server).await;
    let overview = store.overview().await.expect("an overview of nothing");
    assert!(overview.replicas.is_empty() && overview.definitions.is_empty());
    assert_eq!(
        store
            .enqueue_many(&[])
            .await
            .expect("enqueue nothing")
            .len(),
        0
    );

    let hint = "no replica has published jobs in namespace \"test\" (is --namespace the one the \
                replicas run with?)\n";
    assert_eq!(cli(&server, dir.path(), &["jobs"]).success(), hint);
    let status = cli(&server, dir.path(), &["status"]).success();
    assert!(
        status.contains("no replica has sent a heartbeat in namespace \"test\"\n"),
        "{status}"
    );
    assert!(status.ends_with(hint), "{status}");
    let status = one_document(&cli(&server, dir.path(), &["status", "--json"]).success());
    assert_eq!(status["replicas"], serde_json::json!([]), "{status}");
    assert_eq!(status["jobs"], serde_json::json!([]), "{status}");
    for args in [
        &["jobs", "--json"][..],
        &["history"],
        &["history", "--json"],
        &["dead", "list"],
        &["dead", "list", "--json"],
    ] {
        cli(&server, dir.path(), args).success();
    }
}
