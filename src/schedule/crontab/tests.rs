//! The importer on crontabs written for it: what each line becomes, and what is reported.

use super::*;
use crate::schedule::parse_file;
use std::path::Path;

fn options(system: bool) -> ImportOptions {
    ImportOptions {
        system,
        zone: chrono_tz::UTC,
        source: "crontab".to_owned(),
        selector: Selector::default(),
        on: Reach::One,
    }
}

/// The jobs of the imported file, loaded without their `user` lines: the users must
/// exist and need root, which is checked apart (see `check_user`).
fn jobs(text: &str, system: bool) -> Vec<crate::schedule::Job> {
    let import = import(text, &options(system));
    parse_file(Path::new("imported.toml"), &without_users(&import.toml))
        .unwrap_or_else(|errors| panic!("imported file does not load: {errors:?}\n{}", import.toml))
}

fn without_users(toml: &str) -> String {
    toml.lines()
        .filter(|line| !line.starts_with("user = "))
        .map(|line| format!("{line}\n"))
        .collect()
}

#[test]
fn percent_starts_standard_input_and_later_ones_are_newlines() {
    assert_eq!(
        split_input("mail -s hi root%line one%line two"),
        (
            "mail -s hi root".to_owned(),
            Some("line one\nline two".to_owned())
        )
    );
    assert_eq!(
        split_input(r"date +\%Y-\%m-\%d >> /tmp/d"),
        ("date +%Y-%m-%d >> /tmp/d".to_owned(), None)
    );
    assert_eq!(
        split_input(r"cat%100\% sure%"),
        ("cat".to_owned(), Some("100% sure\n".to_owned()))
    );
}

#[test]
fn input_is_piped_to_the_command_unexpanded() {
    let job = jobs("0 9 * * * mail -s 'it''s $HOME' root%Hi $USER%bye\n", false).remove(0);
    assert_eq!(
        job.command,
        "printf '%s' 'Hi $USER\nbye' | (\nmail -s 'it''s $HOME' root\n)"
    );
}

#[test]
fn names_are_unique_within_a_crontab() {
    let names: Vec<String> = jobs("* * * * * true\n* * * * * true\n@daily true\n", false)
        .into_iter()
        .map(|job| job.name)
        .collect();
    assert_eq!(names, ["true", "true-2", "true-3"]);
}

#[test]
fn names_are_unique_across_the_crontabs_of_one_importer() {
    let mut names = JobNames::new(Some("db")).expect("a valid prefix");
    names
        .reserve_declared("[jobs.db-backup-sh]\ncommand = \"x\"\n")
        .expect("a schedule file");
    let mut importer = Importer::new(names);
    let first = importer.import("@daily /bin/backup.sh\n", &options(false));
    let second = importer.import("@daily /bin/backup.sh\n", &options(false));
    assert!(
        first.toml.contains("[jobs.db-backup-sh-2]"),
        "{}",
        first.toml
    );
    assert!(
        second.toml.contains("[jobs.db-backup-sh-3]"),
        "{}",
        second.toml
    );
}

#[test]
fn environment_zone_and_shell_apply_to_the_lines_below() {
    let text = "\
* * * * * first
SHELL=/bin/bash
MAILTO = \"ops@example.com\"
CRON_TZ=Europe/Paris
30 2 * * * second
";
    let jobs = jobs(text, false);
    assert!(jobs[0].env.is_empty());
    assert_eq!(jobs[0].timezone, chrono_tz::UTC);
    assert_eq!(jobs[1].timezone, chrono_tz::Europe::Paris);
    assert!(!jobs[1].env.contains_key("MAILTO"), "MAILTO is a notice");
    assert_eq!(
        jobs[1].env.get("SHELL").map(String::as_str),
        Some("/bin/bash")
    );
    assert_eq!(jobs[1].command, "exec '/bin/bash' -c 'second'");
    assert!(!jobs[1].env.contains_key("CRON_TZ"));
}

#[test]
fn imported_jobs_keep_crons_delivery() {
    use crate::schedule::{Delivery, Misfire, Overlap};
    let job = jobs("*/5 * * * * true\n", false).remove(0);
    assert_eq!(job.retries, 0);
    assert_eq!(job.delivery, Delivery::AtMostOnce);
    assert_eq!(job.overlap, Overlap::Allow);
    assert_eq!(job.misfire, Misfire::Skip);
}

#[test]
fn system_crontab_reads_the_user_field() {
    let text = "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n@daily www-data php /srv/cron.php\n";
    let import = import(text, &options(true));
    assert!(
        import.toml.contains("\nuser = \"root\"\n"),
        "{}",
        import.toml
    );
    assert!(
        import.toml.contains("\nuser = \"www-data\"\n"),
        "{}",
        import.toml
    );
    let jobs = jobs(text, true);
    assert_eq!(
        jobs[0].command,
        "cd / && run-parts --report /etc/cron.hourly"
    );
    assert_eq!(jobs[1].command, "php /srv/cron.php");
    assert_eq!(
        jobs[1].schedule.as_ref().map(|s| s.as_str()),
        Some("@daily")
    );
}

#[test]
fn a_line_with_a_nul_character_is_a_problem_and_no_job() {
    let text = "PATH=\0/usr/bin\n0 0 * * * echo \0x\n0 1 * * * ok\n";
    let import = import(text, &options(false));
    assert_eq!(import.jobs, 1);
    let problems: Vec<String> = import.problems.iter().map(Problem::to_string).collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("line 1: not imported: the line contains a NUL"));
    assert!(problems[1].starts_with("line 2: not imported: the line contains a NUL"));
    assert_eq!(jobs(text, false).len(), 1);
}

#[test]
fn unconvertible_lines_become_comments_and_problems() {
    let text =
        "@reboot /usr/bin/startup\n61 * * * * bad\n* * * * *\nCRON_TZ=Nowhere/City\n0 0 * * * ok\n";
    let import = import(text, &options(false));
    assert_eq!(import.jobs, 1);
    let problems: Vec<String> = import.problems.iter().map(Problem::to_string).collect();
    assert_eq!(problems.len(), 4, "{problems:?}");
    assert!(problems[0].starts_with("line 1: not imported: @reboot is not supported"));
    assert!(problems[1].contains("minute field \"61\""));
    assert!(problems[2].contains("no command"));
    assert!(problems[3].starts_with("line 4: unknown time zone \"Nowhere/City\""));
    assert!(
        import
            .toml
            .contains("# redcron: line 1: not imported: @reboot is not supported"),
        "{}",
        import.toml
    );
    assert!(import.toml.contains("# @reboot /usr/bin/startup"));
    assert!(
        import.toml.contains(
            "# redcron: line 4: unknown time zone \"Nowhere/City\"; the jobs below keep \
             UTC\n# CRON_TZ=Nowhere/City\n"
        ),
        "{}",
        import.toml
    );
    assert_eq!(jobs(text, false).len(), 1);
}

#[test]
fn mailto_becomes_an_output_notice_for_the_jobs_below() {
    let text = "\
* * * * * before
MAILTO=\"ops@example.com\"
* * * * * one
MAILTO=ops@example.com, dev@example.com
* * * * * two
MAILTO=\"\"
* * * * * three
MAILTO=
* * * * * four
";
    let import = import(text, &options(false));
    assert!(import.problems.is_empty(), "{:?}", import.problems);
    let jobs = jobs(text, false);
    let notices = |index: usize| {
        jobs[index]
            .notify
            .as_ref()
            .map(|notices| (notices.targets.clone(), notices.on.clone()))
    };
    assert_eq!(notices(0), None);
    assert_eq!(
        notices(1),
        Some((
            vec![Target::Mail {
                to: vec!["ops@example.com".into()],
                from: None,
                cron_subject: false,
            }],
            vec![crate::schedule::Event::Output]
        ))
    );
    assert_eq!(
        notices(2).map(|(targets, _)| targets),
        Some(vec![Target::Mail {
            to: vec!["ops@example.com".into(), "dev@example.com".into()],
            from: None,
            cron_subject: false,
        }])
    );
    assert_eq!(notices(3), None);
    assert_eq!(notices(4), None);
    assert!(jobs.iter().all(|job| !job.env.contains_key("MAILTO")));
    assert_eq!(
        import.toml.matches("\nnotify_on = [\"output\"]\n").count(),
        2
    );
    assert!(
        import
            .toml
            .contains("# Jobs with no MAILTO above them send no notice"),
        "one job ran before any MAILTO:\n{}",
        import.toml
    );
}

#[test]
fn the_header_says_nothing_of_mailto_when_every_job_has_one() {
    let import = import("MAILTO=\"\"\n* * * * * one\n", &options(false));
    assert!(!import.toml.contains("no MAILTO"), "{}", import.toml);
}

#[test]
fn a_mailto_the_schedule_file_would_refuse_is_a_problem_and_sends_nothing() {
    let text = "MAILTO=-oQ/tmp\n* * * * * one\nMAILTO=a b@example.com\n* * * * * two\n";
    let import = import(text, &options(false));
    let lines: Vec<usize> = import.problems.iter().map(|problem| problem.line).collect();
    assert_eq!(lines, [1, 3], "{:?}", import.problems);
    assert!(
        import.problems[0]
            .message
            .starts_with("bad MAILTO: \"-oQ/tmp\" is not a mail address"),
        "{:?}",
        import.problems
    );
    assert!(
        import.toml.contains("# redcron: line 3: bad MAILTO"),
        "{}",
        import.toml
    );
    assert!(jobs(text, false).iter().all(|job| job.notify.is_none()));
}

#[test]
fn users_the_check_refuses_are_problems_and_their_jobs_are_kept() {
    let mut importer = Importer::new(JobNames::default()).checking_users(|user| {
        if user == "root" {
            Ok(())
        } else {
            Err(format!("no user \"{user}\""))
        }
    });
    let import = importer.import(
        "@daily root /bin/a\n@daily nobody-here /bin/b\n",
        &options(true),
    );
    assert_eq!(import.jobs, 2);
    assert_eq!(
        import.problems,
        [Problem {
            line: 2,
            message: "no user \"nobody-here\"".to_owned()
        }]
    );
    assert!(
        import
            .toml
            .contains("# redcron: line 2: no user \"nobody-here\"\n[jobs.b]\n"),
        "{}",
        import.toml
    );
    assert!(user_exists_here("root").is_ok());
    assert!(user_exists_here("no-such-user-here").is_err());
}

proptest::proptest! {
    /// Whatever the crontab holds and wherever its jobs are placed, the importer does not
    /// panic, its output loads, and every job runs where it was placed.
    #[test]
    fn output_always_loads(
        lines in proptest::collection::vec(
            "([0-9*/,-]{1,4} ){5}[ -~]{0,20}|@[a-z]{4,8} [ -~]{0,12}|[A-Z_]{1,6} ?= ?[ -~]{0,10}|#[ -~]{0,10}|[ -~]{0,30}",
            0..12,
        ),
        system in proptest::bool::ANY,
        terms in proptest::collection::vec("[a-z][a-z0-9]{0,4}=[a-z0-9@.]{1,5}", 0..3),
        every in proptest::bool::ANY,
    ) {
        let text = lines.join("\n");
        let selector = Selector::parse(&terms).expect("the strategy makes valid terms");
        // `import-crontab` refuses a where that no replica takes, before importing.
        proptest::prop_assume!(selector.impossible().is_none());
        proptest::prop_assume!(every || selector.other_queue("default").is_none());
        let options = ImportOptions {
            selector,
            on: if every { Reach::Every } else { Reach::One },
            ..options(system)
        };
        let import = import(&text, &options);
        let loaded = parse_file(Path::new("fuzz.toml"), &without_users(&import.toml));
        proptest::prop_assert!(loaded.is_ok(), "{:?}\n{}", loaded.err(), import.toml);
        let jobs = loaded.unwrap_or_default();
        proptest::prop_assert_eq!(jobs.len(), import.jobs);
        for job in &jobs {
            proptest::prop_assert_eq!(&job.selector, &options.selector);
            proptest::prop_assert_eq!(job.on, options.on);
        }
    }
}

#[test]
fn a_bare_percent_is_split_as_cron_splits_it_and_said() {
    let import = import(
        "0 0 * * * tar czf /b/$(date +%Y-%m-%d).tgz /srv\n\
         0 1 * * * mail -s hi root%line one\n\
         0 2 * * * date +\\%s >> /tmp/stamp\n",
        &options(false),
    );
    let lines: Vec<usize> = import.problems.iter().map(|problem| problem.line).collect();
    assert_eq!(lines, [1, 2], "{:?}", import.problems);
    assert!(
        import.problems[0]
            .message
            .contains("write \\% for a literal %, as in date +\\%s"),
        "{}",
        import.problems[0]
    );
    assert!(
        import.problems[1]
            .message
            .contains("is the command's standard input"),
        "{}",
        import.problems[1]
    );
    // Still cron's reading: the first job runs what cron ran.
    let job = parse_file(Path::new("imported.toml"), &import.toml)
        .expect("loads")
        .remove(0);
    assert_eq!(
        job.command,
        "printf '%s' 'Y-\nm-\nd).tgz /srv' | (\ntar czf /b/$(date +\n)"
    );
}

#[test]
fn random_delay_becomes_jitter_and_mailfrom_the_sender() {
    let text = "MAILTO=ops@example.com\nMAILFROM=cron@web1.example.com\nRANDOM_DELAY=15\n\
                0 3 * * * /srv/bin/backup\nRANDOM_DELAY=0\nMAILFROM=\n0 4 * * * /srv/bin/report\n";
    let import = import(text, &options(false));
    assert!(import.problems.is_empty(), "{:?}", import.problems);
    let jobs = jobs(text, false);
    assert_eq!(jobs[0].jitter, std::time::Duration::from_secs(15 * 60));
    assert_eq!(
        jobs[0]
            .notify
            .as_ref()
            .map(|notices| notices.targets.clone()),
        Some(vec![Target::Mail {
            to: vec!["ops@example.com".into()],
            from: Some("cron@web1.example.com".into()),
            cron_subject: false,
        }])
    );
    assert!(!jobs[0].env.contains_key("MAILFROM") && !jobs[0].env.contains_key("RANDOM_DELAY"));
    assert_eq!(jobs[1].jitter, std::time::Duration::ZERO);
    assert_eq!(
        jobs[1]
            .notify
            .as_ref()
            .map(|notices| notices.targets.clone()),
        Some(vec![Target::Mail {
            to: vec!["ops@example.com".into()],
            from: None,
            cron_subject: false,
        }])
    );
}

#[test]
fn variables_only_cron_reads_are_named_and_left_out() {
    let text = "CONTENT_TYPE=text/html\nRANDOM_DELAY=soon\nMAILFROM=-oops\nFOO=bar\n\
                0 3 * * * /srv/bin/backup\n";
    let import = import(text, &options(false));
    let said: Vec<(usize, &str)> = import
        .problems
        .iter()
        .map(|problem| (problem.line, problem.message.as_str()))
        .collect();
    assert_eq!(said.len(), 3, "{said:?}");
    assert!(
        said[0].1.starts_with("only cron reads CONTENT_TYPE"),
        "{said:?}"
    );
    assert!(
        said[1].1.starts_with("bad RANDOM_DELAY \"soon\""),
        "{said:?}"
    );
    assert!(said[2].1.starts_with("bad MAILFROM"), "{said:?}");
    let job = jobs(text, false).remove(0);
    assert_eq!(
        job.env.keys().collect::<Vec<_>>(),
        ["FOO"],
        "only the command's variables stay"
    );
}

#[test]
fn a_command_starting_with_a_user_suggests_system() {
    fn root_is_a_user(word: &str, _path: Option<&str>) -> bool {
        word == "root"
    }
    let mut importer = Importer::new(JobNames::default()).suspecting_user_fields(root_is_a_user);
    let import = importer.import(
        "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n17 * * * * sync\n",
        &options(false),
    );
    assert_eq!(import.problems.len(), 1, "{:?}", import.problems);
    assert_eq!(import.problems[0].line, 1);
    assert!(
        import.problems[0]
            .message
            .contains("\"root\", a user on this machine")
            && import.problems[0]
                .message
                .ends_with("import it with --system"),
        "{}",
        import.problems[0]
    );
}

#[test]
fn a_user_that_is_also_a_program_is_not_taken_for_a_user_field() {
    // `root` exists on every Unix machine, and no directory holds a program of that name here.
    let empty = tempfile::tempdir().expect("temp dir");
    let path = empty.path().to_str().expect("UTF-8");
    assert!(user_not_program_here("root", Some(path)));
    std::fs::write(empty.path().join("root"), "#!/bin/sh\n").expect("program");
    std::fs::set_permissions(
        empty.path().join("root"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("mode");
    assert!(!user_not_program_here("root", Some(path)));
    assert!(!user_not_program_here("no-such-user-here", Some(path)));
    assert!(!user_not_program_here("/root", Some(path)));
}

#[test]
fn the_file_declares_the_machines_zone_and_cron_tz_lines_their_own() {
    let options = ImportOptions {
        zone: chrono_tz::Europe::Berlin,
        ..options(false)
    };
    let import = import(
        "0 3 * * * /srv/bin/backup\nCRON_TZ=Asia/Tokyo\n0 9 * * * /srv/bin/open\n",
        &options,
    );
    assert!(
        import
            .toml
            .contains("\n[defaults]\n# The zone cron read these lines in; a CRON_TZ line gives the jobs below it their own.\ntimezone = \"Europe/Berlin\"\n"),
        "{}",
        import.toml
    );
    assert_eq!(
        import.toml.matches("\ntimezone = ").count(),
        2,
        "{}",
        import.toml
    );
    let jobs = parse_file(Path::new("imported.toml"), &import.toml).expect("loads");
    assert_eq!(jobs[0].timezone, chrono_tz::Europe::Berlin);
    assert_eq!(jobs[1].timezone, chrono_tz::Asia::Tokyo);
}

/// The jobs of `text` imported with `where_terms` and `on`, loaded.
fn placed_jobs(text: &str, where_terms: &[&str], on: Reach) -> (Import, Vec<crate::schedule::Job>) {
    let terms: Vec<String> = where_terms.iter().map(|term| (*term).to_owned()).collect();
    let options = ImportOptions {
        selector: Selector::parse(&terms).expect("valid terms"),
        on,
        ..options(true)
    };
    let import = import(text, &options);
    let jobs = parse_file(Path::new("imported.toml"), &without_users(&import.toml)).unwrap_or_else(
        |errors| panic!("imported file does not load: {errors:?}\n{}", import.toml),
    );
    (import, jobs)
}

#[test]
fn where_and_every_replica_are_written_into_every_job() {
    let text = "0 4 * * * root /usr/local/bin/report\n@daily root /usr/local/bin/sync\n";
    let (import, jobs) = placed_jobs(text, &["role=web", "host=web1"], Reach::Every);
    assert_eq!(jobs.len(), 2, "{}", import.toml);
    for job in &jobs {
        assert_eq!(job.on, Reach::Every, "{}", import.toml);
        assert_eq!(job.selector.to_string(), "host=web1,role=web");
    }
    assert_eq!(
        import
            .toml
            .matches("\nwhere = [\"host=web1\", \"role=web\"]\non = \"every\"\n")
            .count(),
        2,
        "{}",
        import.toml
    );

    let (import, jobs) = placed_jobs(text, &["host=web1"], Reach::One);
    assert!(
        jobs.iter()
            .all(|job| job.on == Reach::One && job.selector.to_string() == "host=web1"),
        "{}",
        import.toml
    );
    assert!(!import.toml.contains("\non = "), "{}", import.toml);

    // Unplaced, the file is as it was: neither field.
    let (import, jobs) = placed_jobs(text, &[], Reach::One);
    assert!(jobs.iter().all(|job| job.selector.is_empty()));
    assert!(
        !import.toml.contains("\nwhere = ") && !import.toml.contains("\non = "),
        "{}",
        import.toml
    );
}

#[test]
fn host_local_lines_are_marked_with_why_and_returned() {
    let text = "SHELL=/bin/sh\n\
                25 6 * * * root test -x /usr/sbin/anacron || run-parts --report /etc/cron.daily\n\
                0 3 * * * root /usr/local/bin/backup-db --to s3://backups/app\n\
                30 4 * * * root find /var/log/nginx -name '*.gz' -mtime +14 -delete\n";
    let (import, _) = placed_jobs(text, &[], Reach::One);
    assert_eq!(
        import.host_local,
        vec![
            HostLocal {
                line: 2,
                job: "run-parts-report-etc-cron-daily".to_owned(),
                reason: "run-parts runs the scripts of this machine's /etc/cron.daily".to_owned(),
            },
            HostLocal {
                line: 4,
                job: "find-var-log-nginx-name".to_owned(),
                reason: "uses /var/log/nginx on this machine".to_owned(),
            },
        ],
        "{}",
        import.toml
    );
    // Inside its job's table, with what placing it takes since nothing placed it.
    assert!(
        import.toml.contains(
            "# crontab line 4: 30 4 * * * root find /var/log/nginx -name '*.gz' -mtime +14 -delete\n\
             # host-local: uses /var/log/nginx on this machine: it runs on any one replica; \
             on = \"every\" runs it on each, where = [\"host=...\"] on one machine\n"
        ),
        "{}",
        import.toml
    );
    assert_eq!(import.toml.matches("# host-local: ").count(), 2);
    assert!(import.problems.is_empty(), "{:?}", import.problems);

    // Placed, the mark says why alone.
    let (import, _) = placed_jobs(text, &[], Reach::Every);
    assert_eq!(import.host_local.len(), 2);
    assert!(
        import
            .toml
            .contains("# host-local: uses /var/log/nginx on this machine\nschedule = "),
        "{}",
        import.toml
    );
}

#[test]
fn a_host_local_line_keeps_its_hint_until_a_machine_does_its_work() {
    let text = "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n";
    // A where that picks several machines only narrows which one runs each fire.
    let (import, _) = placed_jobs(text, &["role=web"], Reach::One);
    assert!(
        import.toml.contains(
            "# host-local: run-parts runs the scripts of this machine's /etc/cron.hourly: it runs \
             once per fire, on a replica with role=web; on = \"every\" runs it on each, \
             where = [\"host=...\"] on one machine\n"
        ),
        "{}",
        import.toml
    );
    // Pinned to one machine, or run on every replica, the mark says why alone.
    for (terms, on) in [
        (&["role=web", "host=web1"][..], Reach::One),
        (&["replica=web1-a"][..], Reach::One),
        (&["role=web"][..], Reach::Every),
    ] {
        let (import, _) = placed_jobs(text, terms, on);
        assert_eq!(import.host_local.len(), 1, "{}", import.toml);
        assert!(
            import.toml.contains("/etc/cron.hourly\nschedule = "),
            "{terms:?} {on:?}:\n{}",
            import.toml
        );
    }
}
