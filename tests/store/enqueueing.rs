//! Ad-hoc and delayed runs (`enqueue_runs.lua`): answered run by run, and created once however
//! often a call is sent.

use std::time::Duration;

use redcron::schedule::Priority;
use redcron::store::{Claim, Enqueue, Enqueued};
use redis::Commands;

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::store::{claim, claim_run, run_hash, setup};

#[tokio::test]
async fn bulk_enqueue_answers_each_run_in_order_across_pipelined_calls() {
    let (server, store, _token) = setup("[jobs.work]\ncommand = \"true\"\n").await;
    let request = |job: &str, due_ms: Option<i64>, unique: Option<&str>| Enqueue {
        job: job.to_owned(),
        due_ms,
        payload: None,
        priority: None,
        unique: unique.map(|key| (key.to_owned(), Duration::from_secs(60))),
    };
    // More runs than one script call takes; the odd ones out sit at the end.
    let mut requests: Vec<Enqueue> = (0..2_500).map(|_| request("work", None, None)).collect();
    requests.push(request("work", Some(i64::MAX / 2), None));
    requests.push(request("work", None, Some("once")));
    requests.push(request("work", None, Some("once")));
    requests.push(request("nope", None, None));
    let answers = store.enqueue_many(&requests).await.expect("enqueue");
    assert_eq!(answers.len(), requests.len());
    assert!(
        answers[..2_501]
            .iter()
            .all(|answer| matches!(answer, Enqueued::Scheduled { paused: false, .. }))
    );
    let Enqueued::Scheduled { run_id: holder, .. } = &answers[2_501] else {
        panic!("the first unique run is created: {:?}", answers[2_501]);
    };
    assert_eq!(
        answers[2_502],
        Enqueued::Duplicate {
            holder: holder.clone()
        }
    );
    assert_eq!(answers[2_503], Enqueued::UnknownJob);

    let mut redis = server.connection();
    let ready: usize = redis
        .llen(keys().ready("default", Priority::Normal))
        .expect("LLEN");
    assert_eq!(ready, 2_501, "runs due now are ready at once");
    let due: usize = redis.zcard(keys().due_runs()).expect("ZCARD");
    assert_eq!(due, 1, "a later run waits in the ad-hoc runs' due set");
}

/// A client may send a script again when its connection broke before the reply came (the
/// cluster client does): the repeated call must change nothing, even once the run has finished.
#[tokio::test]
async fn an_enqueue_repeated_after_its_reply_was_lost_creates_nothing_more() {
    let (server, store, _token) = setup("[jobs.work]\ncommand = \"true\"\n").await;
    let request = Enqueue {
        job: "work".to_owned(),
        due_ms: None,
        payload: Some("{}".to_owned()),
        priority: None,
        unique: None,
    };
    let answers = store
        .enqueue_many(std::slice::from_ref(&request))
        .await
        .expect("enqueue");
    let [Enqueued::Scheduled { run_id, .. }] = answers.as_slice() else {
        panic!("one run created: {answers:?}");
    };
    let run = claim_run(&store, &["default"]).await;
    assert_eq!(&run.id, run_id);
    assert!(store.ack_run(&run, Some(0), "").await.expect("ack"));

    // The same call again, word for word: the script's KEYS and ARGV as the store sent them.
    let reply = call_enqueue_script(&server, &request, &[run_id]);
    assert_eq!(reply.len(), 3);
    assert_eq!(
        reply[0],
        redis::Value::BulkString(b"OK".to_vec()),
        "answered as the first call was"
    );
    assert_eq!(run_hash(&server, run_id)["state"], "succeeded");
    assert_eq!(
        claim(&store, &["default"]).await,
        Claim::Empty { skipped: 0 }
    );
}

/// Whether the runs of a call exist already is asked once for the whole call (one EXISTS), not
/// with a read per run: a call of new runs reads only its job's definition, and writes each run
/// once. A run id given twice in one call still makes one run, answered twice.
#[tokio::test]
async fn an_enqueue_asks_once_per_call_whether_its_runs_exist() {
    const RUNS: u64 = 50;
    let (server, store, _token) = setup("[jobs.work]\ncommand = \"true\"\n").await;
    let request = Enqueue {
        job: "work".to_owned(),
        due_ms: None,
        payload: None,
        priority: None,
        unique: None,
    };
    let requests = vec![request.clone(); RUNS as usize];
    server.reset_command_calls();
    let answers = store.enqueue_many(&requests).await.expect("enqueue");
    assert!(
        answers
            .iter()
            .all(|answer| matches!(answer, Enqueued::Scheduled { .. }))
    );
    let calls = server.command_calls();
    let count = |command: &str| calls.get(command).copied().unwrap_or(0);
    assert_eq!(
        [
            ("exists", count("exists")),
            ("hget", count("hget")),
            ("hset", count("hset")),
            ("rpush", count("rpush")),
        ],
        [("exists", 1), ("hget", 1), ("hset", RUNS), ("rpush", 1),],
        "{calls:?}"
    );

    // One run id twice in one call, as the script is called.
    let run_id = redcron::store::new_run_id();
    let reply = call_enqueue_script(&server, &request, &[&run_id, &run_id]);
    let ok = redis::Value::BulkString(b"OK".to_vec());
    assert_eq!((reply.len(), &reply[0], &reply[3]), (6, &ok, &ok));
    let ready: Vec<String> = server
        .connection()
        .lrange(keys().ready("default", Priority::Normal), 0, -1)
        .expect("LRANGE");
    assert_eq!(
        ready.iter().filter(|ready| **ready == run_id).count(),
        1,
        "one run made"
    );
}

/// `enqueue_runs.lua` called as the store calls it, its KEYS and ARGV word for word, with one
/// run of `request` for each of `run_ids` (the same id twice, a call repeated): its reply.
fn call_enqueue_script(
    server: &RedisServer,
    request: &Enqueue,
    run_ids: &[&str],
) -> Vec<redis::Value> {
    let script = redis::Script::new(concat!(
        include_str!("../../lua/include/common.lua"),
        "\n",
        include_str!("../../lua/enqueue_runs.lua")
    ));
    let mut invocation = script.prepare_invoke();
    invocation
        .key(keys().due())
        .key(keys().defs())
        .key(keys().paused())
        .key(keys().wake_promoter())
        .key(keys().hold())
        .key(keys().events())
        .arg(keys().prefix())
        .arg("")
        .arg("")
        .arg("enqueue")
        .arg(100_000);
    for run_id in run_ids {
        invocation.arg(request.script_arguments(run_id).as_slice());
    }
    invocation
        .invoke(&mut server.connection())
        .expect("the script's call")
}
