//! The redcron-schedule(5) page: the guide's sections on schedule files and on the cron dialect,
//! turned into roff when the pages are written, so that the page cannot say other than the guide.

use clap_mangen::roff::{Inline, Roff, bold, roman};

/// The guide (docs/guide.md), whose sections the page is made of.
const GUIDE: &str = include_str!("../../docs/guide.md");

/// The guide's `## ` sections the page holds, in its order.
const SECTIONS: [&str; 2] = ["Schedule files", "The cron dialect"];

/// The page's name, as `man` finds it.
pub(super) const NAME: &str = "redcron-schedule";

/// The page, in roff.
///
/// # Panics
/// Never on the guide this binary was built with: a test renders it; a section missing from
/// it is a build that must not ship, which that test catches.
pub(super) fn render(version: &str) -> Roff {
    let mut page = Roff::new();
    page.control("TH", [NAME, "5", "", &format!("redcron {version}")]);
    page.control("SH", ["NAME"]);
    page.text([roman(format!(
        "{NAME} - the schedule files redcron reads: jobs, defaults, queues and the cron dialect"
    ))]);
    page.control("SH", ["SYNOPSIS"]);
    page.text([
        bold("/etc/redcron/schedules/*.toml"),
        roman(" (the package's --schedules; "),
        bold("schedules/*.toml"),
        roman(" by default)"),
    ]);
    for title in SECTIONS {
        let body =
            section(title).unwrap_or_else(|| panic!("docs/guide.md has no \"## {title}\" section"));
        page.control("SH", [title.to_uppercase().as_str()]);
        markdown(&mut page, body);
    }
    page.control("SH", ["SEE ALSO"]);
    page.text([
        bold("redcron"),
        roman("(1), "),
        bold("redcron-check"),
        roman("(1), "),
        bold("redcron-next"),
        roman("(1), "),
        bold("redcron-import-crontab"),
        roman("(1), "),
        bold("crontab"),
        roman("(5)"),
    ]);
    page
}

/// The text of the guide's `## {title}` section, up to the next `## ` heading.
fn section(title: &str) -> Option<&'static str> {
    let heading = format!("\n## {title}\n");
    let start = GUIDE.find(&heading)? + heading.len();
    let rest = &GUIDE[start..];
    Some(rest.find("\n## ").map_or(rest, |end| &rest[..end]))
}

/// Writes the blocks of `text` (paragraphs, lists, code, tables and `### ` headings, the
/// Markdown the guide uses) into `page`.
fn markdown(page: &mut Roff, text: &str) {
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(heading) = line.strip_prefix("### ") {
            page.control("SS", [heading]);
        } else if line.starts_with("```") {
            page.control("RS", ["4"]).control("nf", []);
            for code in lines.by_ref().take_while(|code| !code.starts_with("```")) {
                page.text([roman(code)]);
            }
            page.control("fi", []).control("RE", []);
        } else if line.starts_with('|') {
            let header = cells(line);
            // The line of dashes under the header.
            lines.next();
            while let Some(row) = lines.next_if(|row| row.starts_with('|')) {
                let row = cells(row);
                page.control("TP", []);
                page.text(inline(row.first().copied().unwrap_or_default()));
                for (name, cell) in header.iter().zip(&row).skip(1) {
                    let mut text = vec![roman(format!("{name}: "))];
                    text.extend(inline(cell));
                    page.text(text).control("br", []);
                }
            }
        } else if let Some(item) = list_item(line) {
            page.control("IP", [item.0.as_str(), "4"]);
            let mut text = item.1.to_owned();
            while let Some(more) = lines.next_if(|more| more.starts_with("  ")) {
                text.push(' ');
                text.push_str(more.trim());
            }
            page.text(inline(&text));
        } else {
            page.control("PP", []);
            let mut text = line.to_owned();
            while let Some(more) = lines.next_if(|more| is_paragraph(more)) {
                text.push(' ');
                text.push_str(more.trim());
            }
            page.text(inline(&text));
        }
    }
}

/// Whether `line` goes on the paragraph before it.
fn is_paragraph(line: &str) -> bool {
    !line.trim().is_empty()
        && !line.starts_with("```")
        && !line.starts_with('|')
        && !line.starts_with('#')
        && list_item(line).is_none()
}

/// A list item's mark as roff draws it, and its text: `- text` or `1. text`.
fn list_item(line: &str) -> Option<(String, &str)> {
    if let Some(text) = line.strip_prefix("- ") {
        return Some(("\\(bu".to_owned(), text));
    }
    let (number, text) = line.split_once(". ")?;
    (!number.is_empty() && number.chars().all(|c| c.is_ascii_digit()))
        .then(|| (format!("{number}."), text))
}

/// The cells of a table row, trimmed.
fn cells(row: &str) -> Vec<&str> {
    row.trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .split('|')
        .map(str::trim)
        .collect()
}

/// `text` with its inline Markdown: `code` and **strong** in bold, links as their text.
fn inline(text: &str) -> Vec<Inline> {
    let mut parts = Vec::new();
    let mut plain = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(['`', '*', '[']) {
        plain.push_str(&rest[..at]);
        let marked = &rest[at..];
        let (part, after) = if let Some(code) = marked.strip_prefix('`') {
            match code.split_once('`') {
                Some((code, after)) => (Some(bold(code)), after),
                None => (None, code),
            }
        } else if let Some(strong) = marked.strip_prefix("**") {
            match strong.split_once("**") {
                Some((strong, after)) => (Some(bold(strong)), after),
                None => (None, strong),
            }
        } else if let Some(link) = marked.strip_prefix('[')
            && let Some((label, after)) = link.split_once("](")
            && let Some((_, after)) = after.split_once(')')
        {
            plain.push_str(label);
            (None, after)
        } else {
            plain.push_str(&marked[..1]);
            (None, &marked[1..])
        };
        if let Some(part) = part {
            parts.push(roman(std::mem::take(&mut plain)));
            parts.push(part);
        }
        rest = after;
    }
    plain.push_str(rest);
    parts.push(roman(plain));
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guide_sections_become_the_page() {
        let page = render("0.0.0").render();
        assert!(page.contains(".TH redcron-schedule 5"), "{page}");
        assert!(page.contains(".SH \"SCHEDULE FILES\""), "{page}");
        assert!(page.contains(".SH \"THE CRON DIALECT\""), "{page}");
        assert!(page.contains(".SS \"Daylight saving time\""), "{page}");
        // A row of the fields' table, with its default.
        assert!(
            page.contains(".TP\n\\fBmisfire\\fR\ndefault: \\fBrun\\-once\\fR"),
            "{page}"
        );
        // No Markdown left outside code blocks: links are their text, code is bold.
        assert!(!page.contains("]("), "{page}");
        assert!(
            page.contains("default: \\fBforbid\\fR") && !page.contains("`forbid`"),
            "{page}"
        );
    }

    #[test]
    fn inline_markdown_becomes_roff() {
        assert_eq!(
            inline("see [How a fire runs](#how) and `forbid`, **once** * 2"),
            vec![
                roman("see How a fire runs and "),
                bold("forbid"),
                roman(", "),
                bold("once"),
                roman(" * 2"),
            ]
        );
    }
}
