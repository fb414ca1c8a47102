//! The queues with ready runs are read from an index, not found by walking every key: `status`,
//! the overview and the runs listing cost no `SCAN` however many keys the namespace holds, and
//! still show the runs of a queue no job names; a namespace written before the index is walked
//! until a reaper has walked it once; a queue leaves the index once its lists are empty, and
//! comes back with the next run pushed there; a run's claim and success write nothing to it.

use redcron::engine::reaper::{Reaper, ReaperConfig};
use redcron::schedule::Priority;
use redcron::store::{Ack, Enqueue, Enqueued, FailReason, Failure, Store};
use redis::Commands;

use crate::util::redis_server::RedisServer;
use crate::util::store::{claim_run, connect, declare, enqueue, jobs, replica, run_hash};
use crate::util::{cli, command_calls, keys, one_document};

/// `moved`, whose runs wait in `elsewhere` until a reload moves it to `default`, and `bulk`,
/// whose runs fill the namespace with keys.
const ELSEWHERE: &str = "[jobs.moved]\ncommand = \"true\"\nqueue = \"elsewhere\"\n\
                         [jobs.bulk]\ncommand = \"true\"\n";

/// Ticks a reaper, as a replica's does every 2 s, until its walk over every key has ended a
/// A Redis with the jobs of [`ELSEWHERE`] published, and a store on it.
async fn published() -> (RedisServer, Store) {
    let server = RedisServer::start();
    let store = connect(&server).await;
    store
        .publish_definitions(&jobs(ELSEWHERE))
        .await
        .expect("publish");
    (server, store)
}

/// round with each ready list it met in the index: from then on readers take the index alone.
async fn walk_every_key(server: &RedisServer, store: &Store) {
    let mut redis = server.connection();
    let keys_held: usize = redis::cmd("DBSIZE").query(&mut redis).expect("DBSIZE");
    let mut reaper = Reaper::new(store.clone(), ReaperConfig::default());
    // A page of the walk looks at about 1,000 keys; Redis may answer a page with fewer.
    for _ in 0..keys_held / 100 + 10 {
        reaper.tick().await.expect("reaper tick");
        if redis.exists(keys().ready_queues_walked()).expect("EXISTS") {
            return;
        }
    }
    panic!("no round of the walk over {keys_held} keys ended");
}

/// How many `SCAN` calls Redis ran while `read` ran.
async fn scans_during<F: std::future::Future<Output = ()>>(server: &RedisServer, read: F) -> u64 {
    let mut redis = server.connection();
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut redis)
        .expect("CONFIG RESETSTAT");
    read.await;
    command_calls(&mut redis)
        .get("scan")
        .copied()
        .unwrap_or_default()
}

/// What `status` and the runs listing show of the queue `queue`, holding the ready run `run` of
/// a job that no longer names it and served by no replica; and the overview's count.
async fn assert_shown_as_unserved(server: &RedisServer, store: &Store, queue: &str, run: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let status = one_document(&cli(server, dir.path(), &["status", "--json"]).stdout);
    let counted = status["ready"]
        .as_array()
        .and_then(|queues| queues.iter().find(|row| row["queue"] == queue))
        .unwrap_or_else(|| panic!("no queue {queue} in {status}"));
    assert_eq!(counted["normal"], 1, "{status}");
    assert_eq!(counted["served_by"], 0, "{status}");
    let text = cli(server, dir.path(), &["status"]).stdout;
    assert!(
        text.contains(&format!(
            "queue {queue}: 1 ready run(s) and no live replica serves it"
        )),
        "{text}"
    );
    let listed = cli(server, dir.path(), &["runs", "list", "--json"]).stdout;
    assert!(listed.contains(run), "{listed}");
    let overview = store.overview().await.expect("overview");
    assert!(
        overview
            .counts
            .ready
            .iter()
            .any(|(name, lengths)| name == queue && lengths[1] == 1),
        "{:?}",
        overview.counts.ready
    );
}

/// A run enqueued to `elsewhere`, whose job a reload then moved to `default`, among 20,000
/// runs due later: once a reaper has walked the keys, `status`, the overview and the runs
/// listing show it and warn of its queue without one `SCAN`, where they walked every key
/// before.
#[tokio::test]
async fn status_and_the_runs_listing_show_a_queue_no_job_names_without_walking_the_keys() {
    let (server, store) = published().await;
    replica(&store, "r1", ELSEWHERE, 0).await;
    let run = enqueue(&store, "moved", None).await;
    let moved = ELSEWHERE.replace("queue = \"elsewhere\"\n", "");
    store
        .publish_definitions(&jobs(&moved))
        .await
        .expect("publish the reload");
    let later = store.now_ms().await.expect("TIME") + 86_400_000;
    for _ in 0..2 {
        let requests: Vec<Enqueue> = (0..10_000)
            .map(|_| Enqueue {
                job: "bulk".to_owned(),
                due_ms: Some(later),
                payload: None,
                priority: None,
                unique: None,
            })
            .collect();
        let made = store.enqueue_many(&requests).await.expect("enqueue many");
        assert!(
            made.iter()
                .all(|made| matches!(made, Enqueued::Scheduled { .. }))
        );
    }

    // What a namespace whose keys no reaper has walked yet costs: a walk of its own.
    let before = scans_during(
        &server,
        assert_shown_as_unserved(&server, &store, "elsewhere", &run),
    )
    .await;
    assert!(before >= 20, "{before} SCAN calls over 20,000 keys");

    walk_every_key(&server, &store).await;
    let scans = scans_during(
        &server,
        assert_shown_as_unserved(&server, &store, "elsewhere", &run),
    )
    .await;
    assert_eq!(
        scans, 0,
        "status, the overview and the runs listing walked the keys"
    );
}

/// A ready list written as a version before the index wrote it (no index, no walk recorded) is
/// found by walking the keys; once a reaper has walked every key its queue is in the index, and
/// the readers find it there without a walk.
#[tokio::test]
async fn a_ready_list_written_before_the_index_is_found_before_and_after_a_reaper_walked_it() {
    let (server, store) = published().await;
    replica(&store, "r1", ELSEWHERE, 0).await;
    let mut redis = server.connection();
    let run = "0190b2e0-0000-7000-8000-000000000001";
    let () = redis
        .hset_multiple(
            keys().run(run),
            &[
                ("job", "moved"),
                ("kind", "adhoc"),
                ("state", "ready"),
                ("queue", "earlier"),
                ("priority", "normal"),
                ("attempt", "0"),
                ("max_attempts", "1"),
            ],
        )
        .expect("HSET");
    let () = redis
        .rpush(keys().ready("earlier", Priority::Normal), run)
        .expect("RPUSH");

    let before = scans_during(
        &server,
        assert_shown_as_unserved(&server, &store, "earlier", run),
    )
    .await;
    assert!(
        before > 0,
        "a namespace not walked yet read the index alone"
    );
    walk_every_key(&server, &store).await;
    let indexed: Vec<String> = redis.smembers(keys().ready_queues()).expect("SMEMBERS");
    assert_eq!(indexed, ["earlier"]);
    let scans = scans_during(
        &server,
        assert_shown_as_unserved(&server, &store, "earlier", run),
    )
    .await;
    assert_eq!(scans, 0);
}

/// An index of another type (damaged, or written by hand) fails no reader, which walks the keys
/// instead, nor the reaper, which replaces it with the queues its walk finds.
#[tokio::test]
async fn an_index_of_another_type_is_walked_around_and_replaced_by_the_reaper() {
    let (server, store) = published().await;
    replica(&store, "r1", ELSEWHERE, 0).await;
    let mut redis = server.connection();
    let run = enqueue(&store, "moved", None).await;
    let moved = ELSEWHERE.replace("queue = \"elsewhere\"\n", "");
    store
        .publish_definitions(&jobs(&moved))
        .await
        .expect("publish the reload");
    walk_every_key(&server, &store).await;
    let () = redis.set(keys().ready_queues(), "oops").expect("SET");

    let scans = scans_during(
        &server,
        assert_shown_as_unserved(&server, &store, "elsewhere", &run),
    )
    .await;
    assert!(scans > 0, "a damaged index was read as whole");
    walk_every_key(&server, &store).await;
    let indexed: Vec<String> = redis.smembers(keys().ready_queues()).expect("SMEMBERS");
    assert_eq!(indexed, ["elsewhere"]);
    let scans = scans_during(
        &server,
        assert_shown_as_unserved(&server, &store, "elsewhere", &run),
    )
    .await;
    assert_eq!(
        scans, 0,
        "the replaced index is not trusted once walked whole"
    );
}

/// An index of another type that no page of a round replaces (the namespace holds no ready
/// list) fails no tick of the reaper: the round's end deletes it, and the next round finds the
/// index whole, after which a run made ready is read from it alone.
#[tokio::test]
async fn an_index_of_another_type_no_page_replaces_is_deleted_when_the_round_ends() {
    let (server, store) = published().await;
    let mut redis = server.connection();
    let () = redis.set(keys().ready_queues(), "oops").expect("SET");
    let mut reaper = Reaper::new(store.clone(), ReaperConfig::default());
    let type_of = |redis: &mut redis::Connection| -> String {
        redis::cmd("TYPE")
            .arg(keys().ready_queues())
            .query(redis)
            .expect("TYPE")
    };
    // A round over this namespace's few keys is a page or two.
    for _ in 0..10 {
        reaper
            .tick()
            .await
            .expect("a reaper tick over a damaged index");
        if type_of(&mut redis) != "string" {
            break;
        }
    }
    assert_eq!(type_of(&mut redis), "none", "the damaged index was kept");
    walk_every_key(&server, &store).await;
    let run = enqueue(&store, "bulk", None).await;
    let indexed: Vec<String> = redis.smembers(keys().ready_queues()).expect("SMEMBERS");
    assert_eq!(indexed, ["default"], "run {run} added no queue");
    let scans = scans_during(&server, async {
        store.ready_queues().await.expect("ready queues");
    })
    .await;
    assert_eq!(
        scans, 0,
        "the index was not trusted once a round found it whole"
    );
}

/// A queue whose lists are empty leaves the index at the end of a round of the walk, and the
/// overview stops showing it; the next run made ready there puts it back, and a queue with a
/// run left stays.
#[tokio::test]
async fn an_emptied_queue_leaves_the_index_and_comes_back_with_its_next_run() {
    let (server, store) = published().await;
    replica(&store, "r1", ELSEWHERE, 0).await;
    let mut redis = server.connection();
    let indexed = |redis: &mut redis::Connection| -> Vec<String> {
        let mut queues: Vec<String> = redis.smembers(keys().ready_queues()).expect("SMEMBERS");
        queues.sort();
        queues
    };
    enqueue(&store, "moved", None).await;
    enqueue(&store, "bulk", None).await;
    assert_eq!(indexed(&mut redis), ["default", "elsewhere"]);
    let moved = ELSEWHERE.replace("queue = \"elsewhere\"\n", "");
    store
        .publish_definitions(&jobs(&moved))
        .await
        .expect("publish the reload");

    declare(&store, "replica", jobs(ELSEWHERE)).await;
    claim_run(&store, &["elsewhere"]).await;
    let forgotten = store.forget_empty_queues(true).await.expect("forget");
    assert_eq!(forgotten, Some(vec!["elsewhere".to_owned()]));
    assert_eq!(indexed(&mut redis), ["default"]);
    let overview = store.overview().await.expect("overview");
    let shown: Vec<&str> = overview
        .counts
        .ready
        .iter()
        .map(|(queue, _)| queue.as_str())
        .collect();
    assert_eq!(shown, ["default"]);

    // The reload is undone: its next run goes to `elsewhere` again.
    store
        .publish_definitions(&jobs(ELSEWHERE))
        .await
        .expect("publish");
    enqueue(&store, "moved", None).await;
    assert_eq!(indexed(&mut redis), ["default", "elsewhere"]);
    assert!(
        store
            .forget_empty_queues(true)
            .await
            .expect("forget")
            .is_some_and(|forgotten| forgotten.is_empty())
    );
}

/// A run handed back to the head of its list (its replica stopped while it ran) puts its queue
/// back in the index, which forgot it while the run ran with its lists empty.
#[tokio::test]
async fn a_run_handed_back_puts_its_queue_back_in_the_index_that_forgot_it_while_it_ran() {
    let (server, store) = published().await;
    declare(&store, "replica", jobs(ELSEWHERE)).await;
    let mut redis = server.connection();
    enqueue(&store, "moved", None).await;
    let running = claim_run(&store, &["elsewhere"]).await;
    assert_eq!(
        store.forget_empty_queues(true).await.expect("forget"),
        Some(vec!["elsewhere".to_owned()])
    );

    let failure = Failure::without_output(FailReason::Interrupted, "the replica stopped");
    store
        .fail_run(&running.id, Some(&running.worker), &failure, 0.0)
        .await
        .expect("hand back");
    let listed: Vec<String> = redis
        .lrange(keys().ready("elsewhere", Priority::Normal), 0, -1)
        .expect("LRANGE");
    assert_eq!(listed, [running.id]);
    let indexed: Vec<String> = redis.smembers(keys().ready_queues()).expect("SMEMBERS");
    assert_eq!(indexed, ["elsewhere"]);
}

/// A run made ready, claimed and recorded a success, with no slot to wait for and no run to hand
/// back, costs the index nothing: only what makes a run ready adds to it, once per queue per
/// call however many runs it makes.
#[tokio::test]
async fn the_claim_and_success_of_a_run_write_nothing_to_the_index() {
    let (server, store) = published().await;
    declare(&store, "replica", jobs(ELSEWHERE)).await;
    let mut redis = server.connection();
    let sadds = |redis: &mut redis::Connection| {
        command_calls(redis)
            .get("sadd")
            .copied()
            .unwrap_or_default()
    };
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut redis)
        .expect("CONFIG RESETSTAT");
    let requests: Vec<Enqueue> = (0..50)
        .map(|_| Enqueue {
            job: "bulk".to_owned(),
            due_ms: None,
            payload: None,
            priority: None,
            unique: None,
        })
        .collect();
    store.enqueue_many(&requests).await.expect("enqueue many");
    assert_eq!(sadds(&mut redis), 1, "one SADD for 50 runs of one queue");

    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut redis)
        .expect("CONFIG RESETSTAT");
    let run = claim_run(&store, &["default"]).await;
    let ack = Ack {
        run_id: run.id.clone(),
        worker: run.worker.clone(),
        attempt: run.attempt,
        exit_code: Some(0),
        output: String::new(),
    };
    store.ack_runs(&[&ack]).await.expect("ack");
    assert_eq!(run_hash(&server, &run.id)["state"], "succeeded");
    assert_eq!(sadds(&mut redis), 0);
}
