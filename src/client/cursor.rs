//! Where a listing of runs stands between pages ([`RunsCursor`]): a place in one state's
//! structure and the time window listed, as the text the API and the command line pass around.

use std::fmt;
use std::str::FromStr;

use super::ClientError;
use crate::store::ReadyMark;

/// Where a listing of runs stands: after one entry of one state's structure, by what orders
/// that structure (a run id among the leased; a list and a place in it among the ready; a due
/// time and a run id among the due; an entry of the events stream among the ended), and the
/// time window it lists. Opaque to callers: its text (`Display`, `FromStr`) is what the API and
/// the command line pass around.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsCursor {
    pub(super) mark: Mark,
    pub(super) window: Window,
}

/// The instants a listing keeps its runs within, ms, each bound inclusive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Window {
    pub(super) since_ms: Option<i64>,
    pub(super) until_ms: Option<i64>,
}

impl Window {
    /// Whether `at_ms` is within.
    pub(super) fn holds(self, at_ms: i64) -> bool {
        self.since_ms.is_none_or(|since| at_ms >= since)
            && self.until_ms.is_none_or(|until| at_ms <= until)
    }

    /// Whether it leaves any run out.
    pub(super) fn bounded(self) -> bool {
        self.since_ms.is_some() || self.until_ms.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Mark {
    Active(Vec<u8>),
    Ready(ReadyMark),
    Due(i64, Vec<u8>),
    /// An entry of the events stream: its id's milliseconds and sequence.
    Ended(u64, u64),
}

impl Mark {
    /// Its state's place in a listing: leased, then ready, then due, then ended.
    pub(super) fn section(&self) -> Section {
        match self {
            Self::Active(_) => Section::Active,
            Self::Ready(_) => Section::Ready,
            Self::Due(..) => Section::Due,
            Self::Ended(..) => Section::Ended,
        }
    }
}

/// The states a listing walks, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Section {
    Active,
    Ready,
    Due,
    Ended,
}

impl fmt::Display for RunsCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.mark.fmt(f)?;
        if let Some(since_ms) = self.window.since_ms {
            write!(f, ".s{since_ms}")?;
        }
        if let Some(until_ms) = self.window.until_ms {
            write!(f, ".u{until_ms}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Mark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mark::Active(entry) => write!(f, "a.{}", hex(entry)),
            Mark::Ready(mark) => write!(
                f,
                "r.{}.{}.{}.{}",
                mark.list_at,
                mark.index,
                hex(mark.list.as_bytes()),
                hex(&mark.entry)
            ),
            Mark::Due(due_ms, entry) => write!(f, "d.{due_ms}.{}", hex(entry)),
            Mark::Ended(ms, seq) => write!(f, "e.{ms}.{seq}"),
        }
    }
}

impl FromStr for RunsCursor {
    type Err = ClientError;

    fn from_str(text: &str) -> Result<Self, ClientError> {
        let bad = || ClientError::BadCursor(text.to_owned());
        let mut parts: Vec<&str> = text.split('.').collect();
        // The window's bounds follow the mark: no part of a mark starts with `s` or `u`.
        let mut window = Window::default();
        while let Some(last) = parts.last() {
            let bound = |digits: &str| digits.parse::<i64>().map_err(|_| bad());
            match last.split_at_checked(1) {
                Some(("u", digits)) if window.until_ms.is_none() && window.since_ms.is_none() => {
                    window.until_ms = Some(bound(digits)?);
                }
                Some(("s", digits)) if window.since_ms.is_none() => {
                    window.since_ms = Some(bound(digits)?);
                }
                _ => break,
            }
            parts.pop();
        }
        let mark = match parts[..] {
            ["a", entry] => Mark::Active(unhex(entry).ok_or_else(bad)?),
            ["r", list_at, index, list, entry] => Mark::Ready(ReadyMark {
                list_at: list_at.parse().map_err(|_| bad())?,
                index: index.parse().map_err(|_| bad())?,
                list: String::from_utf8(unhex(list).ok_or_else(bad)?).map_err(|_| bad())?,
                entry: unhex(entry).ok_or_else(bad)?,
            }),
            ["d", due_ms, entry] => Mark::Due(
                due_ms.parse().map_err(|_| bad())?,
                unhex(entry).ok_or_else(bad)?,
            ),
            ["e", ms, seq] => Mark::Ended(
                ms.parse().map_err(|_| bad())?,
                seq.parse().map_err(|_| bad())?,
            ),
            _ => return Err(bad()),
        };
        Ok(Self { mark, window })
    }
}

/// `bytes` in lower-case hex: a cursor names run ids and keys in text safe in a URL.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The bytes lower-case `hex` spells, if it spells any.
fn unhex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Mark, RunsCursor, Window};
    use crate::store::ReadyMark;

    #[test]
    fn a_cursor_reads_back_as_the_position_it_was_made_of() {
        let marks = [
            Mark::Active(b"job@1".to_vec()),
            Mark::Due(1_767_225_600_000, vec![0xff, b'.', 0]),
            Mark::Ended(1_767_225_600_000, 3),
            Mark::Ready(ReadyMark {
                list: "{test}:ready:default:normal".to_owned(),
                list_at: 3,
                index: 41,
                entry: b"a1b2".to_vec(),
            }),
        ];
        let windows = [
            Window::default(),
            Window {
                since_ms: Some(1_767_225_600_000),
                until_ms: None,
            },
            Window {
                since_ms: Some(0),
                until_ms: Some(1_767_225_600_000),
            },
        ];
        for mark in marks {
            for window in windows {
                let cursor = RunsCursor {
                    mark: mark.clone(),
                    window,
                };
                let text = cursor.to_string();
                assert_eq!(text.parse::<RunsCursor>().ok(), Some(cursor), "{text}");
            }
        }
    }

    #[test]
    fn a_cursor_no_page_gave_is_refused() {
        for forged in [
            "",
            "job@1",
            "a.6",
            "a.zz",
            "a.6A",
            "d.soon.61",
            "r.1.2.61",
            "x.61",
            "e.1.x",
            "a.61.sx",
            "a.61.u1.s2.u3",
        ] {
            assert!(forged.parse::<RunsCursor>().is_err(), "{forged}");
        }
    }
}
