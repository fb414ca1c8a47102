//! Where the shared state is: the `--redis`, `--namespace` and TLS options every command that
//! reads or steers runs takes, and the store they connect to (the embedded Redis's socket when no
//! URL is given).

use std::path::PathBuf;

use super::error::{CliError, one_line};
use super::redact::without_password;

/// Where the shared state is: every command that reads or steers runs takes these. `--help`
/// shows them apart from the command's own options, since they are the same for every command.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct RedisArgs {
    /// The Redis the replicas share (redis://, rediss://, redis+unix://,
    /// redis+sentinel://host:port,.../master, redis+cluster://host:port,...) [default: the
    /// embedded Redis that `redcron run` started in --data-dir].
    #[arg(
        long,
        env = "REDIS_URL",
        value_name = "URL",
        hide_env_values = true,
        help_heading = "Connection"
    )]
    pub(super) redis: Option<String>,
    /// Keys live under {NS}: replicas cooperate within one namespace (1 to 64 letters, digits,
    /// '.', '_' or '-'). `run` takes several, comma-separated: a replica for each in one
    /// process, each on the subdirectory NS of --schedules.
    #[arg(
        long,
        value_name = "NS",
        default_value = "redcron",
        value_parser = namespaces,
        help_heading = "Connection"
    )]
    pub(super) namespace: String,
    /// Where the embedded Redis keeps its data and socket.
    #[arg(
        long,
        value_name = "DIR",
        default_value = ".redcron",
        help_heading = "Connection"
    )]
    pub(super) data_dir: PathBuf,
    /// The CA certificate (PEM) a rediss:// server's certificate is checked against, instead
    /// of the system's roots.
    #[arg(long, env = "REDIS_CA_CERT", value_name = "FILE", help_heading = "TLS")]
    tls_ca_cert: Option<PathBuf>,
    /// A client certificate (PEM) for a Redis with tls-auth-clients.
    #[arg(
        long,
        env = "REDIS_CLIENT_CERT",
        value_name = "FILE",
        requires = "tls_key",
        help_heading = "TLS"
    )]
    tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "REDIS_CLIENT_KEY",
        value_name = "FILE",
        requires = "tls_cert",
        help_heading = "TLS"
    )]
    tls_key: Option<PathBuf>,
    /// Every state change must reach N replicas of the primary (WAIT) before it counts as
    /// done, so that a failover loses no claim, outcome or planned fire; 0 does not wait.
    #[arg(
        long,
        env = "REDIS_REPLICATED_WRITES",
        value_name = "N",
        default_value_t = 0,
        help_heading = "Connection"
    )]
    pub(super) replicated_writes: u32,
    /// How long a state change may take to reach those replicas before it counts as failed
    /// (and is retried).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1s",
        value_parser = humantime::parse_duration,
        help_heading = "Connection"
    )]
    replicated_writes_timeout: std::time::Duration,
}

impl RedisArgs {
    /// The URL to talk to: `--redis`, else the embedded Redis's socket.
    fn url(&self) -> String {
        self.redis
            .clone()
            .unwrap_or_else(|| crate::store::embedded::socket_url(&self.data_dir))
    }

    pub(super) async fn connect(&self) -> Result<crate::store::Store, CliError> {
        self.connect_with(crate::store::StoreSettings::default())
            .await
    }

    pub(super) async fn connect_with(
        &self,
        settings: crate::store::StoreSettings,
    ) -> Result<crate::store::Store, CliError> {
        self.connect_namespace(self.namespace()?, settings).await
    }

    /// The one namespace a command reads or steers: a list is for `run` only.
    pub(super) fn namespace(&self) -> Result<&str, CliError> {
        match self.namespaces().as_slice() {
            [one] => Ok(one),
            _ => Err(CliError::Argument(format!(
                "--namespace {}: only `run` serves several namespaces; give this command one \
                 (run it once for each)",
                self.namespace
            ))),
        }
    }

    /// The namespaces of `--namespace`, in the order given.
    pub(super) fn namespaces(&self) -> Vec<&str> {
        self.namespace.split(',').collect()
    }

    /// A store for `namespace` on the Redis these arguments name.
    pub(super) async fn connect_namespace(
        &self,
        namespace: &str,
        settings: crate::store::StoreSettings,
    ) -> Result<crate::store::Store, CliError> {
        let url = self.url();
        let topology = self.client(&url)?;
        let settings = crate::store::StoreSettings {
            replicated_writes: (self.replicated_writes > 0).then_some(
                crate::store::ReplicatedWrites {
                    replicas: self.replicated_writes,
                    timeout: self.replicated_writes_timeout,
                },
            ),
            ..settings
        };
        crate::store::Store::connect_to(topology, namespace, settings)
            .await
            .map_err(|source| self.unreachable(&url, source))
    }

    fn unreachable(&self, url: &str, source: crate::store::StoreError) -> CliError {
        CliError::unreachable(url, source, self.redis.is_some())
    }

    /// Where `url` says Redis is, with the TLS certificates given.
    fn client(&self, url: &str) -> Result<crate::store::Topology, CliError> {
        let certificates = if self.tls_ca_cert.is_none() && self.tls_cert.is_none() {
            None
        } else {
            let read = |path: &PathBuf| {
                std::fs::read(path).map_err(CliError::io(format!("reading {}", path.display())))
            };
            let client_tls = match (&self.tls_cert, &self.tls_key) {
                (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                    client_cert: read(cert)?,
                    client_key: read(key)?,
                }),
                _ => None,
            };
            let root_cert = self.tls_ca_cert.as_ref().map(read).transpose()?;
            Some(redis::TlsCertificates {
                client_tls,
                root_cert,
            })
        };
        crate::store::Topology::open(url, certificates).map_err(|error| {
            if error.kind() == redis::ErrorKind::InvalidClientConfig {
                return CliError::Argument(format!(
                    "{} is not a Redis URL ({}): expected redis://[user:password@]host[:port][/db], \
                     rediss://... for TLS, redis+unix:///path/to/socket, \
                     redis+sentinel://host:port,host:port/master or \
                     redis+cluster://host:port,host:port",
                    without_password(url),
                    one_line(&error.to_string())
                ));
            }
            self.unreachable(
                url,
                crate::store::StoreError::Redis {
                    operation: "connect",
                    source: error,
                },
            )
        })
    }
}

/// `--namespace`, checked as the store checks it, so that a bad one is refused with the usage.
/// Reads `--namespace`: one namespace, or (for `run`) several, comma-separated, each once.
pub(super) fn namespaces(value: &str) -> Result<String, String> {
    let several = value.contains(',');
    let mut seen = std::collections::BTreeSet::new();
    for namespace in value.split(',') {
        if several && namespace.is_empty() {
            return Err(format!(
                "{value:?} names an empty namespace: a comma at an end, or two in a row"
            ));
        }
        if several && namespace.trim() != namespace {
            return Err(format!(
                "{value:?}: separate namespaces with commas alone, without spaces"
            ));
        }
        crate::store::validate_namespace(namespace).map_err(|error| error.to_string())?;
        // Each of several namespaces is served from the subdirectory of --schedules named
        // after it: `..` would be the parent, `.x` a hidden directory.
        if several && namespace.starts_with('.') {
            return Err(format!(
                "namespace {namespace:?} cannot be served beside others: each names a \
                 subdirectory of --schedules, which cannot start with '.'"
            ));
        }
        if !seen.insert(namespace) {
            return Err(format!("namespace {namespace:?} is given twice"));
        }
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_namespaces_is_refused_with_what_is_wrong_in_it() {
        assert_eq!(namespaces("a,b-2,c.d"), Ok("a,b-2,c.d".to_owned()));
        // Alone, a namespace names no directory: a leading dot is only part of its hash tag.
        assert_eq!(namespaces(".hidden"), Ok(".hidden".to_owned()));
        for (value, expected) in [
            ("a,", "names an empty namespace"),
            ("a,,b", "names an empty namespace"),
            ("a, b", "without spaces"),
            ("a,..", "cannot start with '.'"),
            ("a,.b", "cannot start with '.'"),
            ("a,b,a", "namespace \"a\" is given twice"),
            ("a,b{c}", "invalid namespace \"b{c}\""),
        ] {
            let error = namespaces(value).expect_err(value);
            assert!(error.contains(expected), "{value}: {error}");
        }
    }
}
