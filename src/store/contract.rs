//! The words the scripts and the Rust side share: a run's states, why a fire is skipped and why
//! a run fails, how a workflow instance and its steps stand. The scripts write them into run hashes, events and replies; Rust compares and
//! shows them through these enums only, and a test reads every script for a word they lack.

/// Defines a closed set of words: the enum, its text, every value, and parsing.
macro_rules! words {
    ($(#[$doc:meta])* $name:ident { $($(#[$variant_doc:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$variant_doc])* $variant,)+
        }

        impl $name {
            /// Every value, in the order of the state machine or of the docs.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The word as the scripts write it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value the scripts wrote as `text`, if it is one.
            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|value| value.as_str() == text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str(self.as_str())
            }
        }
    };
}

words! {
    /// Where a run is in its state machine (DESIGN.md, section 5): the `state` field of its hash
    /// and of its events.
    RunState {
        /// Planned or delayed: waiting in `due` for its time.
        Scheduled => "scheduled",
        /// On a ready list, to be claimed.
        Ready => "ready",
        /// Claimed, but its job is at its limit: waits for a slot.
        Waiting => "waiting",
        /// Claimed by a worker, under a lease.
        Active => "active",
        /// Ended well.
        Succeeded => "succeeded",
        /// Failed, due again after a backoff.
        Retrying => "retrying",
        /// Never ran, for a [`SkipReason`].
        Skipped => "skipped",
        /// In the dead letters.
        Dead => "dead",
    }
}

impl RunState {
    /// Whether a run in this state has ended (its hash is kept for the retention only, or it is
    /// in the dead letters).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            RunState::Succeeded | RunState::Skipped | RunState::Dead
        )
    }
}

words! {
    /// Why a fire (or run) was skipped: the `reason` of a skipped run.
    SkipReason {
        /// Its job is paused.
        Paused => "paused",
        /// A run with the same fingerprint ran (or runs) already.
        Duplicate => "duplicate",
        /// `overlap = "forbid"` and a run of its job had started by its due time and still ran.
        Overlap => "overlap",
        /// Missed by more than the misfire threshold, and the job's `misfire` policy says so.
        Missed => "missed",
        /// Past its `starting_deadline`.
        Deadline => "deadline",
        /// No live replica declared its job for the grace, or the last one withdrew it.
        Undeclared => "undeclared",
        /// A fire of an every-replica job that no replica declared within the misfire threshold.
        NoTarget => "no-target",
        /// A replica's run of an every-replica fire whose replica did not come back to claim it
        /// within the misfire threshold of its due time.
        ReplicaDown => "replica-down",
    }
}

words! {
    /// Why a run failed: decides whether it runs again or goes to the dead letters.
    FailReason {
        /// The command or handler failed: retried while attempts are left.
        Failed => "failed",
        /// It ran past its timeout: retried while attempts are left.
        Timeout => "timeout",
        /// It failed in a way retrying cannot fix: dead at once.
        Permanent => "permanent",
        /// Its worker died (lease expired), or its replica does not run it although Redis says
        /// it does (the replica restarted, Redis was restored from an older copy): run again at
        /// once for at-least-once jobs (a few times at most), dead for at-most-once jobs. Uses
        /// no attempt.
        Lost => "lost",
        /// Its replica shut down while it ran and stopped it: run again at once for
        /// at-least-once jobs, dead for at-most-once jobs (it may have done part of its work).
        /// Uses no attempt.
        Interrupted => "interrupted",
        /// Its replica shut down before starting it (it was claimed ahead): run again at once,
        /// whatever its delivery. Uses no attempt.
        NotStarted => "not-started",
        /// Its hash cannot be decoded: dead at once.
        Corrupt => "corrupt",
    }
}

words! {
    /// Where a workflow instance is: the `state` field of its hash.
    WorkflowState {
        /// Some step is yet to run or runs.
        Running => "running",
        /// Every step succeeded.
        Succeeded => "succeeded",
        /// A step failed or was skipped, and nothing is left to run.
        Failed => "failed",
    }
}

words! {
    /// How a step of an instance stands, as `redcron workflow status` shows it.
    StepStatus {
        /// Waiting for the steps it needs.
        Pending => "pending",
        /// Its run waits to start: for a worker, a slot of its job, or a replica serving its
        /// queue (`redcron runs show` of its run says which).
        Queued => "queued",
        /// Its run runs, or waits to be tried again.
        Running => "running",
        /// Its run succeeded.
        Succeeded => "succeeded",
        /// Its run is dead (or its job could not be enqueued).
        Failed => "failed",
        /// Its run was skipped, or it never ran because the instance stopped at a failure.
        Skipped => "skipped",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_parses_back_and_no_two_are_alike() {
        let mut seen = std::collections::HashSet::new();
        for state in RunState::ALL {
            assert_eq!(RunState::parse(state.as_str()), Some(*state));
            assert!(seen.insert(("state", state.as_str())));
        }
        for reason in SkipReason::ALL {
            assert_eq!(SkipReason::parse(reason.as_str()), Some(*reason));
            assert!(seen.insert(("reason", reason.as_str())));
        }
        for reason in FailReason::ALL {
            assert_eq!(FailReason::parse(&reason.to_string()), Some(*reason));
            assert!(seen.insert(("reason", reason.as_str())));
        }
        assert_eq!(RunState::parse("done"), None);
    }

    /// The script without its comments.
    fn code(script: &str) -> String {
        script
            .lines()
            .map(|line| line.find("--").map_or(line, |comment| &line[..comment]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The arguments of every call of `function` in `code`, split at top-level commas.
    fn calls<'a>(code: &'a str, function: &str) -> Vec<Vec<&'a str>> {
        let mut found = Vec::new();
        for (at, _) in code.match_indices(function) {
            let start = at + function.len();
            let (mut depth, mut quoted, mut arg_start) = (1, false, start);
            let mut args = Vec::new();
            for (offset, byte) in code[start..].bytes().enumerate() {
                let here = start + offset;
                match byte {
                    b'\'' => quoted = !quoted,
                    b'(' | b'{' if !quoted => depth += 1,
                    b')' | b'}' if !quoted => {
                        depth -= 1;
                        if depth == 0 {
                            args.push(code[arg_start..here].trim());
                            break;
                        }
                    }
                    b',' if !quoted && depth == 1 => {
                        args.push(code[arg_start..here].trim());
                        arg_start = here + 1;
                    }
                    _ => {}
                }
            }
            found.push(args);
        }
        found
    }

    /// A quoted literal's text.
    fn literal(arg: &str) -> Option<&str> {
        arg.strip_prefix('\'')?.strip_suffix('\'')
    }

    /// The literal values given to `field` in field-value pairs starting at `args[from]`.
    fn values_of<'a>(args: &[&'a str], from: usize, field: &str) -> Vec<&'a str> {
        args.get(from..)
            .unwrap_or_default()
            .chunks(2)
            .filter(|pair| pair.len() == 2 && literal(pair[0]) == Some(field))
            .filter_map(|pair| literal(pair[1]))
            .collect()
    }

    /// The literals compared with `name` (`name == '...'`, `name ~= '...'`) or given to it.
    fn compared<'a>(code: &'a str, name: &str) -> Vec<&'a str> {
        [" == '", " ~= '", " = '"]
            .iter()
            .flat_map(|operator| {
                let marker = format!("{name}{operator}");
                code.match_indices(&marker)
                    .filter(|(at, _)| {
                        !code[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                    })
                    .filter_map(|(at, _)| {
                        let word = &code[at + marker.len()..];
                        Some(&word[..word.find('\'')?])
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn every_state_and_reason_a_script_writes_or_reads_is_one_of_the_enums() {
        // Words of the scripts' own that Rust never reads back: the event reasons of a re-drive
        // and of a run put back in its list, and promote_due's marks of a fire left due (for a
        // damaged definition, or awaiting the leader's plan until it reaches now: never stored).
        const SCRIPT_ONLY_REASONS: [&str; 4] = ["redrive", "stray", "deferred", "awaiting-plan"];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("lua/")
            .map(|entry| entry.expect("lua/ entry").path())
            .filter(|path| path.extension().is_some_and(|extension| extension == "lua"))
            .collect();
        files.push(dir.join("include/common.lua"));
        files.push(dir.join("include/slots.lua"));
        files.push(dir.join("include/workflows.lua"));
        let mut checked = 0;
        for path in files {
            // Scripts that write workflow instances write their states beside runs' states.
            let workflows = path
                .file_name()
                .is_some_and(|name| name.to_string_lossy().contains("workflow"));
            let script = code(&std::fs::read_to_string(&path).expect("a script"));
            let name = path.display();
            let mut states = compared(&script, "state");
            let mut reasons = compared(&script, "reason");
            for args in calls(&script, "redis.call('HSET',") {
                states.extend(values_of(&args, 1, "state"));
                reasons.extend(values_of(&args, 1, "reason"));
            }
            for args in calls(&script, "record_event(") {
                states.extend(args.get(3).and_then(|state| literal(state)));
                reasons.extend(values_of(&args, 4, "reason"));
            }
            for function in ["skip_run(", "skip("] {
                for args in calls(&script, function) {
                    reasons.extend(args.get(3).and_then(|reason| literal(reason)));
                }
            }
            for state in states {
                assert!(
                    RunState::parse(state).is_some()
                        || (workflows && WorkflowState::parse(state).is_some()),
                    "state {state:?} in {name}"
                );
                checked += 1;
            }
            for reason in reasons {
                assert!(
                    SkipReason::parse(reason).is_some()
                        || FailReason::parse(reason).is_some()
                        || SCRIPT_ONLY_REASONS.contains(&reason),
                    "reason {reason:?} in {name}"
                );
                checked += 1;
            }
        }
        assert!(
            checked > 40,
            "only {checked} words found: are the markers right?"
        );
    }
}
