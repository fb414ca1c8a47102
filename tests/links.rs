//! Every link between the project's documents leads somewhere: a relative link names a file
//! that exists, and a `#fragment` names a heading of the page it points into (as GitHub makes
//! heading anchors), so that moving a section cannot leave a reader at a dead end.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The documents a reader follows links between: the Markdown files at the top of the
/// repository and under docs/ and contrib/.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in [root.to_path_buf(), root.join("docs"), root.join("contrib")] {
        let mut pending = vec![dir];
        while let Some(dir) = pending.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() && dir != root {
                    pending.push(path);
                } else if path.extension().is_some_and(|extension| extension == "md") {
                    found.push(path);
                }
            }
        }
    }
    found.sort();
    found
}

/// The lines of `text` outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push((index + 1, line));
        }
    }
    lines
}

/// `line` without its inline code spans, which hold text such as `[jobs.x](...)` that is no
/// link.
fn without_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(index, _)| index % 2 == 0)
        .map(|(_, part)| part)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The targets of the inline links `[text](target)` of `line`.
fn link_targets(line: &str) -> Vec<String> {
    let prose = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else {
            break;
        };
        targets.push(after[..end].trim().to_owned());
        rest = &after[end..];
    }
    targets
}

/// The anchor GitHub gives a heading: lower case, punctuation but `-` and `_` dropped, spaces
/// made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of the headings of `text`, a repeated heading's second anchor ending in `-1`.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = HashSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let count = seen.entry(base.clone()).or_default();
        anchors.insert(if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    anchors
}

#[test]
fn every_link_between_the_documents_leads_to_a_file_and_a_heading_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let documents = documents(root);
    assert!(
        documents.iter().any(|path| path.ends_with("README.md")),
        "no README.md found under {}",
        root.display()
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for document in &documents {
        let text = fs::read_to_string(document).expect("a document is readable");
        for (number, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                    continue;
                }
                checked += 1;
                let (file, fragment) = match target.split_once('#') {
                    Some((file, fragment)) => (file, Some(fragment)),
                    None => (target.as_str(), None),
                };
                let linked = if file.is_empty() {
                    document.clone()
                } else {
                    document
                        .parent()
                        .expect("a document has a directory")
                        .join(file)
                };
                let place = format!(
                    "{}:{number}: ({target})",
                    document.strip_prefix(root).unwrap_or(document).display()
                );
                if !linked.exists() {
                    broken.push(format!("{place}: no file {file}"));
                    continue;
                }
                let Some(fragment) = fragment else {
                    continue;
                };
                if linked
                    .extension()
                    .is_some_and(|extension| extension == "md")
                {
                    let linked_text = fs::read_to_string(&linked).expect("a document is readable");
                    if !anchors(&linked_text).contains(fragment) {
                        broken.push(format!("{place}: no heading with the anchor #{fragment}"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 0,
        "no relative link found: the scan reads nothing"
    );
    assert!(
        broken.is_empty(),
        "{} broken links:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn headings_get_the_anchors_github_gives_them() {
    let text = "# redcron\n## How a fire runs, and when it can run twice\n### Per-host jobs: every replica, or the replicas you choose\n## Notices\n## Notices\n```\n## not a heading\n```\n";
    let anchors = anchors(text);
    for anchor in [
        "redcron",
        "how-a-fire-runs-and-when-it-can-run-twice",
        "per-host-jobs-every-replica-or-the-replicas-you-choose",
        "notices",
        "notices-1",
    ] {
        assert!(
            anchors.contains(anchor),
            "{anchor} missing from {anchors:?}"
        );
    }
    assert!(!anchors.contains("not-a-heading"));
}

/// The README is a front page: the two commands first, short enough to read in five minutes,
/// and a link to every document under docs/ and to CONTRIBUTING.md, so that nothing moved out
/// of it is out of reach.
#[test]
fn the_readme_is_a_front_page_that_leads_to_every_document() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = fs::read_to_string(root.join("README.md")).expect("README.md is readable");
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines, more than 250");
    let opening: Vec<&str> = readme.lines().take(5).collect();
    assert_eq!(opening[..2], ["# redcron", ""], "{opening:?}");
    assert!(
        opening[3].starts_with("cargo run --release -- run ")
            && opening[4].starts_with("./scripts/test "),
        "README.md does not open with the two commands: {opening:?}"
    );
    let linked: HashSet<String> = prose_lines(&readme)
        .into_iter()
        .flat_map(|(_, line)| link_targets(line))
        .map(|target| target.split('#').next().unwrap_or_default().to_owned())
        .collect();
    let mut expected = vec!["CONTRIBUTING.md".to_owned()];
    for entry in fs::read_dir(root.join("docs")).expect("docs/ is readable") {
        let entry = entry.expect("an entry of docs/");
        // A directory holds what the documents show (docs/images), not a document.
        if entry.path().is_dir() {
            continue;
        }
        expected.push(format!("docs/{}", entry.file_name().to_string_lossy()));
    }
    let unlinked: Vec<&String> = expected
        .iter()
        .filter(|document| !linked.contains(*document))
        .collect();
    assert!(
        unlinked.is_empty(),
        "README.md links to none of {unlinked:?}"
    );
}

/// The fenced blocks of `text` opened with ```` ```language ````, in order.
fn fenced_blocks<'a>(text: &'a str, language: &str) -> Vec<&'a str> {
    let fence = format!("```{language}\n");
    text.split(fence.as_str())
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .collect()
}

/// Every schedule file the documents show (a `toml` block that declares a job or a workflow)
/// loads as shown: `redcron check` accepts it alone, so that an example copied from a page
/// works.
#[test]
fn every_schedule_file_the_documents_show_loads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let mut refused = Vec::new();
    for document in documents(root) {
        let text = fs::read_to_string(&document).expect("a document is readable");
        let name = document
            .strip_prefix(root)
            .unwrap_or(&document)
            .display()
            .to_string();
        for (index, block) in fenced_blocks(&text, "toml").into_iter().enumerate() {
            if !block.contains("[jobs.") && !block.contains("[workflows.") {
                continue;
            }
            checked += 1;
            let dir = tempfile::tempdir().expect("temp dir");
            fs::create_dir(dir.path().join("schedules")).expect("schedules dir");
            fs::write(dir.path().join("schedules/shown.toml"), block).expect("write the block");
            let done = crate::util::redcron_in(dir.path(), &["check"], "");
            if done.code != Some(0) {
                refused.push(format!(
                    "{name}, toml block {}: {}",
                    index + 1,
                    done.stderr.trim()
                ));
            }
        }
    }
    assert!(
        checked >= 3,
        "only {checked} schedule files found in the documents"
    );
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}
