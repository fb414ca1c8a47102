//! Tables for people: columns that line up whatever the cells hold, and a long last column cut
//! to the terminal's width.

use std::io;

use chrono::{DateTime, Utc};

use super::{output, times};
use crate::schedule::Job;

/// Writes a table: columns padded to their widest cell, two spaces apart. Control characters in
/// a cell (a line break in an error, a tab or an escape sequence in a command's output) are
/// written escaped, so that they can neither break the columns nor steer the terminal.
pub(super) fn write_table(
    out: &mut impl io::Write,
    header: &[&str],
    rows: &[Vec<String>],
) -> io::Result<()> {
    write_table_within(out, header, rows, None)
}

/// Like [`write_table`], each row's last cell cut (`…` where it was) so that the row fits in
/// `width` characters when given, keeping at least [`SHORTEST_CUT`] of it: for a long column
/// last (a command) on a terminal.
pub(super) fn write_table_within(
    out: &mut impl io::Write,
    header: &[&str],
    rows: &[Vec<String>],
    width: Option<usize>,
) -> io::Result<()> {
    let mut rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| output::printable_cell(cell).into_owned())
                .collect()
        })
        .collect();
    if let Some(width) = width {
        let widths = column_widths(header, &rows);
        let before_last: usize = widths.iter().rev().skip(1).map(|width| width + 2).sum();
        let room = width.saturating_sub(before_last).max(SHORTEST_CUT);
        for cell in rows.iter_mut().filter_map(|row| row.last_mut()) {
            if cell.chars().count() > room {
                *cell = cell.chars().take(room - 1).chain(['…']).collect();
            }
        }
    }
    write_padded(out, header, &rows)
}

/// Writes one row per job: name, schedule, zone and its next `count` fires after `now`.
pub(super) fn write_jobs(
    out: &mut impl io::Write,
    jobs: &[Job],
    now: DateTime<Utc>,
    count: usize,
) -> io::Result<()> {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            let schedule = job
                .schedule
                .as_ref()
                .map_or_else(|| "(on demand)".to_owned(), ToString::to_string);
            let next = if !job.enabled {
                "(disabled)".to_owned()
            } else if job.schedule.is_none() {
                "-".to_owned()
            } else {
                let fires: Vec<String> = job
                    .schedule
                    .iter()
                    .flat_map(|schedule| schedule.fires_after(now, job.timezone))
                    .take(count)
                    .map(|fire| times::format_fire(fire, job.timezone))
                    .collect();
                fires.join(", ")
            };
            vec![
                job.name.clone(),
                schedule,
                job.timezone.name().to_owned(),
                next,
            ]
        })
        .collect();
    write_table(out, &["JOB", "SCHEDULE", "ZONE", "NEXT FIRES"], &rows)
}

/// The fewest characters a cut cell keeps, however narrow the terminal: enough to tell
/// commands apart.
const SHORTEST_CUT: usize = 12;

/// The width of each column: its widest cell, header included.
fn column_widths(header: &[&str], rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    widths
}

/// Writes `rows`, already printable, under `header`: columns padded to their widest cell, two
/// spaces apart.
fn write_padded(out: &mut impl io::Write, header: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let widths = column_widths(header, rows);
    let header: Vec<String> = header.iter().map(|cell| (*cell).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (index, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if index + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  "));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// The width of the terminal standard output writes to: `COLUMNS` when set (as `ls` and `ps`
/// read it), else the terminal's own; `None` when standard output is no terminal (a pipe, a
/// file), where nothing is cut.
pub(super) fn terminal_width() -> Option<usize> {
    if let Some(columns) = std::env::var("COLUMNS")
        .ok()
        .and_then(|text| text.parse::<usize>().ok())
        .filter(|columns| *columns > 0)
    {
        return Some(columns);
    }
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes a `winsize` into the one given, which lives through the call;
    // on a descriptor that is no terminal it fails and writes nothing.
    let asked = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    (asked == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_columns_line_up_whatever_the_cells_hold() {
        let rows = [
            vec![
                "a-run".to_owned(),
                "line 1\nline 2\tend\u{1b}[31m".to_owned(),
            ],
            vec!["another-run".to_owned(), "ok".to_owned()],
        ];
        let mut out = Vec::new();
        write_table(&mut out, &["RUN", "OUTPUT"], &rows).expect("written");
        assert_eq!(
            String::from_utf8(out).expect("UTF-8"),
            "RUN          OUTPUT\n\
             a-run        line 1\\nline 2\\tend\\u{1b}[31m\n\
             another-run  ok\n"
        );
    }

    #[test]
    fn the_last_column_is_cut_to_the_width_and_says_so() {
        let rows = [
            vec![
                "backup".to_owned(),
                "pg_dump --format=custom mydb > /var/backups/db.dump".to_owned(),
            ],
            vec!["sync".to_owned(), "rsync -a /srv/ b:/srv/".to_owned()],
        ];
        let mut out = Vec::new();
        write_table_within(&mut out, &["JOB", "COMMAND"], &rows, Some(30)).expect("written");
        assert_eq!(
            String::from_utf8(out).expect("UTF-8"),
            "JOB     COMMAND\n\
             backup  pg_dump --format=cust…\n\
             sync    rsync -a /srv/ b:/srv/\n"
        );
        // However narrow the terminal, a cut cell keeps enough to be told apart.
        let mut out = Vec::new();
        write_table_within(&mut out, &["JOB", "COMMAND"], &rows, Some(5)).expect("written");
        assert!(
            String::from_utf8(out)
                .expect("UTF-8")
                .contains("backup  pg_dump --f…\n"),
        );
    }
}
