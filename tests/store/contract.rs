//! What the scripts and the Rust side share: key names, cron run ids and the fields of a published
//! definition.

use redcron::store::{canonical_json, cron_run_id};

use crate::util::redis_server::RedisServer;
use crate::util::store::jobs;

/// The helpers every script is loaded with, to run on their own.
fn common_lua() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/lua/include/common.lua"
    ))
    .expect("common.lua")
}

#[test]
fn the_scripts_build_keys_and_cron_run_ids_as_the_rust_side_does() {
    let server = RedisServer::start();
    let common = common_lua();
    let script = format!(
        "{common}\nlocal prefix = ARGV[1]\nreturn {{key_run(prefix, 'r@1'), \
         key_running(prefix, 'j'), key_waiting(prefix, 'j'), key_undeclared(prefix, 'j'), \
         key_wake(prefix, 'q'), key_fingerprint(prefix, 'f'), key_replica_jobs(prefix, 'r1'), \
         key_wake_replica(prefix, 'r1'), cron_run_id('nightly', 1767225600000), \
         ready_list(prefix, 'cron', 'q', 'high'), ready_list(prefix, 'adhoc', 'q', 'low'), \
         key_notices(prefix), key_notice(prefix, 'r@1:1:dead'), key_notices_of(prefix, 'r1'), \
         key_dead_jobs(prefix), key_paused(prefix), key_due_runs(prefix), key_rewind(prefix), \
         key_latest_fires(prefix), key_targets(prefix, 'j'), key_replicas(prefix), \
         key_ready_queues(prefix), \
         key_archive(prefix), \
         private_route('r1'), \
         replica_run_id('nightly@1767225600000', 'r1'), slot_name('j', 'j@1767225600000:r1'), \
         slot_name('j', 'j@1767225600000'), slot_name('j', 'k@1:r1')}}"
    );
    let keys = redcron::store::Keys::new("test");
    let built: Vec<String> = redis::Script::new(&script)
        .arg(keys.prefix())
        .invoke(&mut server.connection())
        .expect("the helpers run");
    assert_eq!(
        built,
        [
            keys.run("r@1"),
            keys.running("j"),
            keys.waiting("j"),
            keys.undeclared("j"),
            keys.wake("q"),
            keys.fingerprint("f"),
            keys.replica_jobs("r1"),
            keys.wake_replica("r1"),
            cron_run_id("nightly", 1_767_225_600_000),
            keys.ready_fires("q", redcron::schedule::Priority::High),
            keys.ready("q", redcron::schedule::Priority::Low),
            keys.notices(),
            keys.notice("r@1:1:dead"),
            keys.notices_of("r1"),
            keys.dead_jobs(),
            keys.paused(),
            keys.due_runs(),
            keys.rewind(),
            keys.latest_fires(),
            keys.targets("j"),
            keys.replicas(),
            keys.ready_queues(),
            keys.archive(),
            redcron::store::keys::private_route("r1"),
            redcron::store::keys::replica_run_id("nightly@1767225600000", "r1"),
            redcron::store::keys::slot_group("j", "j@1767225600000:r1").into_owned(),
            redcron::store::keys::slot_group("j", "j@1767225600000").into_owned(),
            redcron::store::keys::slot_group("j", "k@1:r1").into_owned(),
        ]
    );
}

#[test]
fn the_scripts_read_every_field_of_a_published_definition_and_refuse_one_that_lacks_any() {
    let server = RedisServer::start();
    let common = common_lua();
    let script = redis::Script::new(&format!(
        "{common}\nlocal d = decode_definition(ARGV[1])\nif not d then return 'refused' end\n\
         return cjson.encode({{d.queue, d.priority, d.delivery, d.overlap, d.misfire, d.retries, \
         d.backoff, d.max_backoff, d.max_concurrency, d.starting_deadline}})"
    ));
    let decode = |definition: &str| -> String {
        script
            .arg(definition)
            .invoke(&mut server.connection())
            .expect("the script runs")
    };
    let declared = jobs(
        "[jobs.full]\nschedule = \"* * * * *\"\ncommand = \"true\"\nqueue = \"mail\"\n\
         priority = \"high\"\nretries = 2\nbackoff = \"5s\"\nmax_backoff = \"1m\"\n\
         overlap = \"allow\"\nmax_concurrency = 3\nstarting_deadline = \"30s\"\nmisfire = \"run-all\"\n\
         delivery = \"at-most-once\"\n\
         [jobs.plain]\ncommand = \"true\"\n",
    );
    let read: Vec<serde_json::Value> = declared
        .iter()
        .map(|job| {
            let text = canonical_json(job).expect("canonical JSON");
            serde_json::from_str(&decode(&text)).expect("the fields, as JSON")
        })
        .collect();
    assert_eq!(
        read[0],
        serde_json::json!([
            "mail",
            "high",
            "at-most-once",
            "allow",
            "run-all",
            2,
            5000,
            60000,
            3,
            30000
        ])
    );
    // No limit and no deadline read as false: none, not a made-up number.
    assert_eq!(
        read[1],
        serde_json::json!([
            "default",
            "normal",
            "at-least-once",
            "allow",
            "run-once",
            0,
            30000,
            3600000,
            false,
            false
        ])
    );

    // A definition without one of those fields is no definition: no default is made up.
    let mut partial: serde_json::Value =
        serde_json::from_str(&canonical_json(&declared[1]).expect("JSON")).expect("JSON");
    partial
        .as_object_mut()
        .expect("an object")
        .remove("backoff");
    assert_eq!(decode(&partial.to_string()), "refused");
    assert_eq!(decode("{not json"), "refused");
}
