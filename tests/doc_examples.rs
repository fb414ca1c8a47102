//! Every example a reader may copy out of the documents works as written: each schedule file
//! loads, each configuration and auth file is read, and each `redcron` command line parses as
//! the command line parses it, so that renaming an option or a field cannot leave an example
//! behind. (The crontab-moving walk-through of the README is run whole in `crontab_hosts`; the
//! reference's synopsis is held against `--help` in `cli_reference`.)

use std::path::Path;

use clap::Parser;
use redcron::cli::Cli;
use redcron::schedule::file::parse_file;
use redcron::web::Auth;

use crate::util::redcron_in_with_env;

/// The documents whose examples are checked.
const DOCUMENTS: [&str; 8] = [
    "README.md",
    "CONTRIBUTING.md",
    "docs/guide.md",
    "docs/operations.md",
    "docs/semantics.md",
    "docs/cli.md",
    "docs/web.md",
    "docs/library.md",
];

/// A fenced block of a document: its language, the line its text starts on, and its text.
struct Block {
    document: &'static str,
    language: String,
    line: usize,
    text: String,
}

impl Block {
    fn place(&self) -> String {
        format!("{}:{}", self.document, self.line)
    }
}

fn blocks() -> Vec<Block> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut blocks = Vec::new();
    for document in DOCUMENTS {
        let text = std::fs::read_to_string(root.join(document))
            .unwrap_or_else(|error| panic!("{document}: {error}"));
        let mut open: Option<Block> = None;
        for (index, line) in text.lines().enumerate() {
            let fence = line.trim_start().strip_prefix("```");
            match (&mut open, fence) {
                (None, Some(language)) => {
                    open = Some(Block {
                        document,
                        language: language.trim().to_owned(),
                        line: index + 2,
                        text: String::new(),
                    });
                }
                (Some(_), Some(_)) => blocks.extend(open.take()),
                (Some(block), None) => {
                    block.text.push_str(line);
                    block.text.push('\n');
                }
                (None, None) => {}
            }
        }
        assert!(open.is_none(), "{document}: a code block is never closed");
    }
    blocks
}

/// A TOML block is a schedule file when it declares jobs, workflows, queues or defaults.
fn is_schedule_file(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start();
        ["[jobs.", "[workflows.", "[queues.", "[defaults]"]
            .iter()
            .any(|table| line.starts_with(table))
    })
}

#[test]
fn every_schedule_file_in_the_documents_loads() {
    let mut checked = 0;
    for block in blocks() {
        if block.language != "toml" || !is_schedule_file(&block.text) {
            continue;
        }
        let path = Path::new("example.toml");
        if let Err(problems) = parse_file(path, &block.text) {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            panic!(
                "{}: the schedule file does not load:\n{}\n{}",
                block.place(),
                problems.join("\n"),
                block.text
            );
        }
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} schedule files found");
}

#[test]
fn every_auth_and_configuration_file_in_the_documents_is_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut auth_files, mut config_files) = (0, 0);
    for block in blocks() {
        if block.language != "toml" || is_schedule_file(&block.text) {
            continue;
        }
        let file = dir.path().join("example.toml");
        std::fs::write(&file, &block.text).expect("write the example");
        if block.text.contains("[[token]]") || block.text.contains("[[user]]") {
            if let Err(error) = Auth::load(&file) {
                panic!("{}: the auth file is refused: {error}", block.place());
            }
            auth_files += 1;
        } else {
            // A configuration file is read before any command runs: one that needs no Redis.
            redcron_in_with_env(
                dir.path(),
                &["completions", "bash"],
                "",
                &[("REDCRON_CONFIG", file.as_os_str())],
            )
            .success();
            config_files += 1;
        }
    }
    assert!(
        auth_files >= 1 && config_files >= 1,
        "auth files {auth_files}, configuration files {config_files}"
    );
}

/// The `redcron` command lines of a shell block: a prompt, `sudo` and variables set before it
/// taken off, lines continued with `\` joined, and what follows a comment, a pipe or a
/// redirection cut. Lines with a placeholder in brackets (a synopsis) are not command lines.
fn command_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(continued) = line.strip_suffix('\\') {
            pending.push_str(continued.trim_end());
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let whole = std::mem::take(&mut pending);
        let mut words = whole.trim_start_matches("$ ").trim();
        words = words.strip_prefix("sudo ").unwrap_or(words);
        while let Some((first, rest)) = words.split_once(' ') {
            if first.contains('=') && !first.starts_with('-') {
                words = rest.trim_start();
            } else {
                break;
            }
        }
        if !words.starts_with("redcron ") || words.contains(" [") || words.contains("...") {
            continue;
        }
        let cut = words
            .find(['#', '|', '<', '>', ';', '&'])
            .unwrap_or(words.len());
        lines.push(words[..cut].trim().to_owned());
    }
    lines
}

/// The words a shell makes of `line` (single and double quotes; no expansion).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(open), c) if c == open => quote = None,
            (Some(_), c) => word.get_or_insert_default().push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_default();
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_default().push(c),
        }
    }
    words.extend(word);
    words
}

#[test]
fn every_command_line_in_the_documents_parses() {
    let mut checked = 0;
    let mut refused = Vec::new();
    for block in blocks() {
        if !matches!(block.language.as_str(), "sh" | "console" | "bash" | "") {
            continue;
        }
        for line in command_lines(&block.text) {
            if let Err(error) = Cli::try_parse_from(shell_words(&line))
                && !matches!(
                    error.kind(),
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                )
            {
                refused.push(format!("{}: {line}\n{error}", block.place()));
            }
            checked += 1;
        }
    }
    assert!(refused.is_empty(), "{}", refused.join("\n"));
    assert!(checked >= 30, "only {checked} command lines found");
}

#[test]
fn a_command_line_is_read_as_a_shell_reads_it() {
    assert_eq!(
        command_lines("$ REDIS_URL=redis://x redcron runs list \\\n  --job a # the runs of a\n"),
        ["redcron runs list --job a"]
    );
    assert_eq!(
        shell_words(r#"redcron trigger greet --payload '{"to": "x"}'"#),
        ["redcron", "trigger", "greet", "--payload", r#"{"to": "x"}"#]
    );
    assert!(command_lines("redcron bench [--jobs 20000]").is_empty());
}
