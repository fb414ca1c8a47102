//! The configuration files: defaults for the options that name the Redis, the namespace and the
//! schedule directory, so that a server's `redcron` needs none of them on every command.
//!
//! Precedence, as kubectl's and psql's: an option on the command line, then its environment
//! variable, then the user's file, then the system's, then the built-in default. A file's
//! values become the options' defaults, so clap applies the first two steps as it always did.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use clap::Command;
use serde::Deserialize;
use thiserror::Error;
use toml::Spanned;

/// The system's file, installed by the package: every `redcron` on the machine reads it, the
/// service's replica too.
pub const SYSTEM_FILE: &str = "/etc/redcron/redcron.toml";

/// Names a file read instead of the user's and the system's (`--config` wins over it).
pub const CONFIG_ENV: &str = "REDCRON_CONFIG";

/// The user's file, below `$XDG_CONFIG_HOME` (or `~/.config`).
const USER_FILE: &str = "redcron/redcron.toml";

/// `--config FILE`: a global option, read before the rest of the command line is parsed, since
/// the rest takes its defaults from the file.
pub(super) fn arg() -> clap::Arg {
    clap::Arg::new("config")
        .long("config")
        .value_name("FILE")
        .value_parser(clap::value_parser!(PathBuf))
        .global(true)
        .help_heading("Connection")
        .help(format!(
            "Read the defaults of --schedules and of the connection and TLS options from FILE \
             instead of {SYSTEM_FILE} and ~/.config/redcron/redcron.toml [env: {CONFIG_ENV}]"
        ))
}

/// A configuration file that cannot be used. Nothing runs on a file half read: a mistyped key
/// would otherwise send a command to another Redis or namespace than the one meant.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file exists (or was named) but cannot be read.
    #[error("cannot read the configuration file {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        source: io::Error,
    },
    /// The file says something wrong: bad TOML, a key it may not set, a bad value.
    #[error("{}:{line}: {}{message}", path.display(), key.as_ref().map(|key| format!("key \"{key}\": ")).unwrap_or_default())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The 1-based line of the offending text.
        line: usize,
        /// The key at fault, when there is one.
        key: Option<String>,
        /// What is wrong and what was expected.
        message: String,
    },
}

/// The keys a file may set, as the file spells them: each is the long option of that name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawFile {
    redis: Option<Spanned<String>>,
    namespace: Option<Spanned<String>>,
    schedules: Option<Spanned<PathBuf>>,
    data_dir: Option<Spanned<PathBuf>>,
    tls_ca_cert: Option<Spanned<PathBuf>>,
    tls_cert: Option<Spanned<PathBuf>>,
    tls_key: Option<Spanned<PathBuf>>,
    replicated_writes: Option<Spanned<u32>>,
    replicated_writes_timeout: Option<Spanned<String>>,
}

/// The ids of the options a file sets (the keys of `RawFile`): those whose environment variable
/// stands over the files. Every other option's variable is its only default.
pub(super) const FILE_OPTIONS: [&str; 9] = [
    "redis",
    "namespace",
    "schedules",
    "data_dir",
    "tls_ca_cert",
    "tls_cert",
    "tls_key",
    "replicated_writes",
    "replicated_writes_timeout",
];

/// One value a file sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Setting {
    /// The value, as the option would be given it (a relative path already resolved).
    pub(super) value: OsString,
    /// The file it comes from.
    pub(super) file: PathBuf,
}

/// The values the configuration files set, keyed by the id of the option they stand for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Settings {
    values: BTreeMap<&'static str, Setting>,
}

impl Settings {
    /// The files `args` (the whole command line) and the environment ask for, read in order.
    ///
    /// # Errors
    /// A file that cannot be read or says something wrong; a file that does not exist is an
    /// error only when it was named.
    pub(super) fn load(args: &[OsString]) -> Result<Self, ConfigError> {
        let named = named_file(args).or_else(|| {
            std::env::var_os(CONFIG_ENV)
                .filter(|value| !value.is_empty())
                .map(PathBuf::from)
        });
        match named {
            Some(path) => Self::read(&[(path, true)]),
            None => {
                let mut files = vec![(PathBuf::from(SYSTEM_FILE), false)];
                files.extend(user_file().map(|path| (path, false)));
                Self::read(&files)
            }
        }
    }

    /// Reads `files` in order, a later one's values replacing an earlier one's; a file marked
    /// `true` must exist.
    fn read(files: &[(PathBuf, bool)]) -> Result<Self, ConfigError> {
        let mut settings = Self::default();
        for (path, required) in files {
            let text = match std::fs::read_to_string(path) {
                Ok(text) => text,
                Err(error) if error.kind() == io::ErrorKind::NotFound && !required => continue,
                // A default file behind a directory this user may not enter (another user's
                // home kept as $HOME by `setpriv` or `sudo -u`) cannot be known to exist: read
                // as absent. One that exists and cannot be read is still an error.
                Err(error)
                    if error.kind() == io::ErrorKind::PermissionDenied
                        && !required
                        && std::fs::metadata(path).is_err() =>
                {
                    continue;
                }
                Err(source) => {
                    return Err(ConfigError::Unreadable {
                        path: path.clone(),
                        source,
                    });
                }
            };
            settings.values.extend(parse(path, &text)?);
        }
        Ok(settings)
    }

    /// The value set for the option `id`, if a file sets one.
    pub(super) fn get(&self, id: &str) -> Option<&Setting> {
        self.values.get(id)
    }

    /// `command`, with the values set as the defaults of the options they stand for, in every
    /// subcommand that has them.
    pub(super) fn apply(&self, mut command: Command) -> Command {
        for (id, setting) in &self.values {
            if command.get_arguments().any(|arg| arg.get_id() == id) {
                // A value from a file is a default like a built-in one: an option that had to be
                // given (`bench --redis`) no longer has to.
                command = command.mut_arg(id, |arg| {
                    arg.default_value(setting.value.clone())
                        .required(false)
                        // `--help` must not show a password in a Redis URL.
                        .hide_default_value(*id == "redis")
                });
            }
        }
        command.mut_subcommands(|sub| self.apply(sub))
    }
}

/// The value of `--config` on the command line, if given (before a `--`, which ends options).
fn named_file(args: &[OsString]) -> Option<PathBuf> {
    let mut words = args.iter().skip(1).take_while(|word| *word != "--");
    while let Some(word) = words.next() {
        if word == "--config" {
            return words.next().map(PathBuf::from);
        }
        if let Some(value) = word
            .to_str()
            .and_then(|word| word.strip_prefix("--config="))
        {
            return Some(PathBuf::from(value));
        }
    }
    None
}

/// `$XDG_CONFIG_HOME/redcron/redcron.toml`, else `~/.config/redcron/redcron.toml`. A relative
/// `XDG_CONFIG_HOME` is ignored, as the XDG specification asks.
fn user_file() -> Option<PathBuf> {
    let absolute = |value: OsString| Some(PathBuf::from(value)).filter(|path| path.is_absolute());
    std::env::var_os("XDG_CONFIG_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|home| home.join(".config"))
        })
        .map(|dir| dir.join(USER_FILE))
}

/// The settings of the file at `path`, whose text is `text`, every value checked.
fn parse(path: &Path, text: &str) -> Result<BTreeMap<&'static str, Setting>, ConfigError> {
    let invalid = |offset: usize, key: Option<&str>, message: String| ConfigError::Invalid {
        path: path.to_owned(),
        line: text[..offset.min(text.len())].matches('\n').count() + 1,
        key: key.map(str::to_owned),
        message,
    };
    let raw: RawFile = toml::from_str(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start);
        let message = super::error::one_line(error.message());
        // "unknown field `x`" names its key already.
        let key = key_at(text, offset).filter(|key| !message.contains(&format!("`{key}`")));
        invalid(offset, key, message)
    })?;
    let directory = path.parent().unwrap_or(Path::new(""));
    let mut values = BTreeMap::new();
    let mut set = |id: &'static str, value: OsString| {
        values.insert(
            id,
            Setting {
                value,
                file: path.to_owned(),
            },
        );
    };
    if let Some(url) = raw.redis {
        if url.get_ref().trim().is_empty() {
            return Err(invalid(
                url.span().start,
                Some("redis"),
                "empty: give a Redis URL (redis://host:6379/) or leave the key out".to_owned(),
            ));
        }
        set("redis", url.into_inner().into());
    }
    if let Some(namespace) = raw.namespace {
        super::connect::namespaces(namespace.get_ref())
            .map_err(|message| invalid(namespace.span().start, Some("namespace"), message))?;
        set("namespace", namespace.into_inner().into());
    }
    let lonely = match (&raw.tls_cert, &raw.tls_key) {
        (Some(cert), None) => Some(("tls-cert", cert.span().start)),
        (None, Some(key)) => Some(("tls-key", key.span().start)),
        _ => None,
    };
    if let Some((key, offset)) = lonely {
        return Err(invalid(
            offset,
            Some(key),
            "tls-cert and tls-key go together: set both or neither".to_owned(),
        ));
    }
    for (id, key, file) in [
        ("schedules", "schedules", raw.schedules),
        ("data_dir", "data-dir", raw.data_dir),
        ("tls_ca_cert", "tls-ca-cert", raw.tls_ca_cert),
        ("tls_cert", "tls-cert", raw.tls_cert),
        ("tls_key", "tls-key", raw.tls_key),
    ] {
        let Some(file) = file else { continue };
        if file.get_ref().as_os_str().is_empty() {
            return Err(invalid(
                file.span().start,
                Some(key),
                "empty: give a path or leave the key out".to_owned(),
            ));
        }
        // Relative to the file, as kubectl reads its kubeconfig: the same file means the same
        // paths from whatever directory a command runs in.
        set(id, directory.join(file.into_inner()).into_os_string());
    }
    if let Some(replicas) = raw.replicated_writes {
        set(
            "replicated_writes",
            replicas.into_inner().to_string().into(),
        );
    }
    if let Some(timeout) = raw.replicated_writes_timeout {
        humantime::parse_duration(timeout.get_ref()).map_err(|error| {
            invalid(
                timeout.span().start,
                Some("replicated-writes-timeout"),
                format!(
                    "{:?} is not a duration ({error}): expected one such as \"1s\" or \"500ms\"",
                    timeout.get_ref()
                ),
            )
        })?;
        set("replicated_writes_timeout", timeout.into_inner().into());
    }
    Ok(values)
}

/// The key of the `key = value` line `offset` falls on, if it is one: the TOML reader's messages
/// about a value (a number where a string was expected) do not name its key.
fn key_at(text: &str, offset: usize) -> Option<&str> {
    let start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |newline| newline + 1);
    let line = text[start..].lines().next().unwrap_or_default();
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    (!key.is_empty() && !key.starts_with('#') && !key.starts_with('[')).then_some(key)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("written");
        path
    }

    fn value<'a>(settings: &'a Settings, id: &str) -> Option<&'a OsStr> {
        settings
            .values
            .get(id)
            .map(|setting| setting.value.as_os_str())
    }

    #[test]
    fn the_users_file_wins_over_the_systems_key_by_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let system = write(
            dir.path(),
            "system.toml",
            "redis = \"redis://shared:6379/\"\nnamespace = \"prod\"\n",
        );
        let user = write(dir.path(), "user.toml", "namespace = \"staging\"\n");
        let missing = dir.path().join("missing.toml");
        let settings = Settings::read(&[
            (system.clone(), false),
            (user.clone(), false),
            (missing, false),
        ])
        .expect("read");
        assert_eq!(
            value(&settings, "redis"),
            Some(OsStr::new("redis://shared:6379/"))
        );
        assert_eq!(
            settings.values.get("redis").map(|s| s.file.clone()),
            Some(system)
        );
        assert_eq!(value(&settings, "namespace"), Some(OsStr::new("staging")));
        assert_eq!(
            settings.values.get("namespace").map(|s| s.file.clone()),
            Some(user)
        );
    }

    #[test]
    fn a_named_file_must_exist() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("missing.toml");
        let error = Settings::read(&[(missing.clone(), true)]).expect_err("refused");
        assert!(
            error.to_string().starts_with(&format!(
                "cannot read the configuration file {}",
                missing.display()
            )),
            "{error}"
        );
    }

    #[test]
    fn paths_are_read_relative_to_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = write(
            dir.path(),
            "redcron.toml",
            "schedules = \"jobs\"\ndata-dir = \"/var/lib/redcron/redis\"\n",
        );
        let settings = Settings::read(&[(file, true)]).expect("read");
        assert_eq!(
            value(&settings, "schedules"),
            Some(dir.path().join("jobs").as_os_str())
        );
        assert_eq!(
            value(&settings, "data_dir"),
            Some(OsStr::new("/var/lib/redcron/redis"))
        );
    }

    #[test]
    fn a_bad_file_is_refused_with_its_line_and_key() {
        for (text, expected) in [
            (
                "redis = \"redis://a/\"\nnamespace = \"a b\"\n",
                ":2: key \"namespace\": ",
            ),
            (
                "\n\nreplicated-writes = \"two\"\n",
                ":3: key \"replicated-writes\": ",
            ),
            (
                "redis-url = \"redis://a/\"\n",
                ":1: unknown field `redis-url`",
            ),
            (
                "tls-key = \"key.pem\"\n",
                ":1: key \"tls-key\": tls-cert and tls-key go together",
            ),
            (
                "replicated-writes-timeout = \"soon\"\n",
                ":1: key \"replicated-writes-timeout\": \"soon\" is not a duration",
            ),
            ("redis = \"\"\n", ":1: key \"redis\": empty"),
            ("redis = \"redis://a/\n", ":1: "),
        ] {
            let dir = tempfile::tempdir().expect("temp dir");
            let file = write(dir.path(), "redcron.toml", text);
            let error = Settings::read(&[(file.clone(), true)])
                .expect_err(text)
                .to_string();
            assert!(
                error.starts_with(&format!("{}{expected}", file.display())),
                "{text:?}: {error}"
            );
        }
    }

    #[test]
    fn the_config_option_is_found_before_parsing() {
        let words = |line: &str| {
            line.split(' ')
                .map(OsString::from)
                .collect::<Vec<OsString>>()
        };
        assert_eq!(
            named_file(&words("redcron status --config /a.toml")),
            Some(PathBuf::from("/a.toml"))
        );
        assert_eq!(
            named_file(&words("redcron --config=/b.toml status")),
            Some(PathBuf::from("/b.toml"))
        );
        assert_eq!(named_file(&words("redcron trigger -- --config")), None);
    }
}
