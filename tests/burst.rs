//! `enqueue --from`: many runs from JSON lines, each line checked before any run is sent, each
//! refusal named by its line.

use redcron::schedule::Priority;
use redis::Commands;

use crate::util::schemas::Schemas;
use crate::util::{cli, keys, one_document, redcron_in};

#[tokio::test]
async fn enqueue_from_lines_sends_nothing_for_a_bad_line_and_names_each_line_refused() {
    let (server, dir, _store) = crate::operate::published().await;
    let enqueue = |input: &str| {
        redcron_in(
            dir.path(),
            &[
                "enqueue",
                "--from",
                "-",
                "--json",
                "--redis",
                &server.url(),
                "--namespace",
                "test",
            ],
            input,
        )
    };
    let ready_or_due = || {
        let mut redis = server.connection();
        let ready: usize = redis
            .llen(keys().ready("default", Priority::Normal))
            .expect("LLEN");
        let due: usize = redis.zcard(keys().due()).expect("ZCARD");
        ready + due
    };

    // A line that is not a run: named with its number, and no line's run is sent.
    let errors = enqueue(
        "{\"job\": \"greet\"}\n{\"job\": \"greet\", \"in\": \"soon\"}\n\n{bad\n\
         {\"job\": \"greet\", \"when\": \"now\"}\n{\"job\": \"greet\", \"in\": \"1h\", \"at\": \"2030-01-01T00:00:00Z\"}\n",
    )
    .failure(2);
    for expected in [
        "standard input: 4 lines are not a run, so no run was enqueued",
        "line 2: \"in\": ",
        "line 4: key must be a string",
        "line 5: unknown field `when`",
        "line 6: \"in\" and \"at\" both say when",
    ] {
        assert!(errors.contains(expected), "{expected}: {errors}");
    }
    assert!(!errors.contains("line 1:"), "{errors}");
    assert_eq!(ready_or_due(), 0, "a run was enqueued: {errors}");

    // Runs Redis refuses are listed with their lines; every other line's run is enqueued.
    let run = enqueue(
        "{\"job\": \"greet\", \"payload\": {\"n\": 1}}\n{\"job\": \"nope\"}\n\
         {\"job\": \"greet\", \"in\": \"1h\", \"unique_key\": \"k\", \"priority\": \"normal\"}\n\
         {\"job\": \"greet\", \"in\": \"2h\", \"unique_key\": \"k\"}\n",
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    for expected in [
        "2 lines of 4 refused; every other line's run was enqueued",
        "line 2: unknown job \"nope\"",
        "line 4: ",
    ] {
        assert!(run.stderr.contains(expected), "{expected}: {}", run.stderr);
    }
    let document = one_document(&run.stdout);
    Schemas::of_the_docs().assert_matches("enqueued-lines.json", &document);
    let lines = |list: &str| -> Vec<u64> {
        document[list]
            .as_array()
            .expect("a list")
            .iter()
            .map(|entry| entry["line"].as_u64().expect("a line"))
            .collect()
    };
    assert_eq!((lines("runs"), lines("refused")), (vec![1, 3], vec![2, 4]));
    assert_eq!(ready_or_due(), 2);
    let first = document["runs"][0]["id"].as_str().expect("an id");
    let shown =
        one_document(&cli(&server, dir.path(), &["runs", "show", first, "--json"]).success());
    assert_eq!(shown["payload"], "{\"n\":1}", "{shown}");
}
