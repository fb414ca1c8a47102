//! Whether a crontab line's command is about the machine it ran on, so that the importer can
//! say so: such a line run once per fire on any one replica would do its work on the wrong
//! machine, or on one machine where it did it on each.
//!
//! The signs, kept short so that each mark is one a reader agrees with:
//! - the programs `run-parts`, `certbot`, `logrotate` and `systemctl`, which act on this
//!   machine's scripts, certificates, logs and services;
//! - `localhost` or `127.0.0.1`, this machine's own services;
//! - a path under `/etc`, `/home`, `/tmp`, `/var/backups` or `/var/log`, this machine's files.

/// The programs whose work is this machine's, and what each does here.
const PROGRAMS: [(&str, &str); 4] = [
    ("run-parts", "runs the scripts of this machine's"),
    ("certbot", "renews this machine's certificates"),
    ("logrotate", "rotates this machine's logs"),
    ("systemctl", "acts on this machine's services"),
];

/// The directories whose files are this machine's own.
const DIRECTORIES: [&str; 5] = ["/etc", "/home", "/tmp", "/var/backups", "/var/log"];

/// The names of this machine on the network.
const LOOPBACK: [&str; 2] = ["localhost", "127.0.0.1"];

/// Why `command` looks like work on the machine it runs on (`run-parts runs the scripts of
/// this machine's /etc/cron.daily`), or `None`. Programs are named first: they say what is
/// done, a path only where.
pub(super) fn reason(command: &str) -> Option<String> {
    let words = words(command);
    for (program, what) in PROGRAMS {
        let Some(at) = words.iter().position(|word| program_name(word) == program) else {
            continue;
        };
        if program != "run-parts" {
            return Some(format!("{program} {what}"));
        }
        // run-parts is about the directory it is given, its last argument.
        let directory = words[at + 1..]
            .iter()
            .take_while(|word| !is_operator(word))
            .filter(|word| word.starts_with('/'))
            .last();
        return Some(match directory {
            Some(directory) => format!("run-parts {what} {directory}"),
            None => "run-parts runs the scripts of a directory of this machine".to_owned(),
        });
    }
    if let Some(name) = words
        .iter()
        .flat_map(|word| word.split(['@', ':', '=', '/']))
        .find(|part| LOOPBACK.contains(part))
    {
        return Some(format!("talks to {name}, this machine's own services"));
    }
    words.iter().find_map(|word| {
        let path = local_path(word)?;
        Some(format!("uses {path} on this machine"))
    })
}

/// The shell words of `command`, split at blanks, quotes and the characters that end a word
/// (`;`, `|`, `&`, `<`, `>`, `(`, `)`, `` ` ``), each operator a word of its own. Rough as shell
/// parsing goes, but a sign is all that is asked of it.
fn words(command: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start = None;
    for (at, c) in command.char_indices() {
        let ends = c.is_whitespace() || matches!(c, '\'' | '"' | ';' | '|' | '&' | '<' | '>');
        let ends = ends || matches!(c, '(' | ')' | '`');
        if ends {
            if let Some(from) = start.take() {
                words.push(&command[from..at]);
            }
            if !c.is_whitespace() && !matches!(c, '\'' | '"') {
                words.push(&command[at..at + c.len_utf8()]);
            }
        } else if start.is_none() {
            start = Some(at);
        }
    }
    if let Some(from) = start {
        words.push(&command[from..]);
    }
    words
}

/// Whether `word` ends a command: what follows it is another command's.
fn is_operator(word: &str) -> bool {
    matches!(word, ";" | "|" | "&" | "(" | ")" | "`")
}

/// The program `word` runs, without its directory (`/usr/bin/certbot` is `certbot`).
fn program_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// The path under one of [`DIRECTORIES`] that `word` is or gives as an option's value
/// (`--log=/var/log/app.log`).
fn local_path(word: &str) -> Option<&str> {
    let path = word.rsplit_once('=').map_or(word, |(_, value)| value);
    DIRECTORIES
        .iter()
        .any(|directory| {
            path.strip_prefix(directory)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
        .then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signs_of_work_on_this_machine_are_named() {
        for (command, expected) in [
            (
                "cd / && run-parts --report /etc/cron.daily",
                "run-parts runs the scripts of this machine's /etc/cron.daily",
            ),
            (
                "test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.weekly )",
                "run-parts runs the scripts of this machine's /etc/cron.weekly",
            ),
            (
                "test -x /usr/bin/certbot && certbot -q renew",
                "certbot renews this machine's certificates",
            ),
            (
                "/usr/sbin/logrotate /etc/logrotate.conf",
                "logrotate rotates this machine's logs",
            ),
            (
                "systemctl restart php-fpm",
                "systemctl acts on this machine's services",
            ),
            (
                "curl -fsS http://localhost:8080/tasks/flush",
                "talks to localhost, this machine's own services",
            ),
            (
                "redis-cli -h 127.0.0.1 bgsave",
                "talks to 127.0.0.1, this machine's own services",
            ),
            (
                "find /var/log/nginx -name '*.gz' -mtime +14 -delete",
                "uses /var/log/nginx on this machine",
            ),
            (
                "pg_dump app >/var/backups/app.sql",
                "uses /var/backups/app.sql on this machine",
            ),
            (
                "app --log=/tmp/app.log",
                "uses /tmp/app.log on this machine",
            ),
            (
                "rsync -a \"/home/deploy/site\" backup:/srv",
                "uses /home/deploy/site on this machine",
            ),
        ] {
            assert_eq!(reason(command).as_deref(), Some(expected), "{command}");
        }
    }

    #[test]
    fn commands_about_no_machine_in_particular_are_not_marked() {
        for command in [
            "/usr/local/bin/backup-db --to s3://backups/app",
            "/usr/local/etc/report.sh",
            "/opt/report/run --etc /srv/etc",
            "curl -fsS https://hooks.example.com/localhost-check",
            "echo /etcetera /tmpl /var/logs",
        ] {
            assert_eq!(reason(command), None, "{command}");
        }
    }
}
