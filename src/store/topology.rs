//! Where redcron's Redis is, read from a URL: one server, a primary that Sentinel names, or a
//! Redis Cluster.
//!
//! - `redis://`, `rediss://`, `redis+unix://`, `unix://`: one server (or a proxy in front of
//!   several), as the `redis` crate reads them.
//! - `redis+sentinel://[user:password@]host:port,host:port/master[?db=N]`: the sentinels at
//!   those addresses (port 26379 when left out) name the primary of `master`; the credentials
//!   and `db` are the primary's. Sentinels with a password of their own take
//!   `sentinel_username` and `sentinel_password` parameters. `rediss+sentinel://` speaks TLS to
//!   sentinels and primary alike.
//! - `redis+cluster://[user:password@]host:port,host:port[/]`: seed nodes of a Redis Cluster
//!   (port 6379 when left out); the client discovers the rest. `rediss+cluster://` for TLS.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError, TlsMode};

/// How long connecting to one Redis (or sentinel) may take.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a command or script may take to answer: a promotion or a catch-up plan of thousands
/// of runs is one script call.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The Redis a store talks to, and how to reach it.
#[derive(Clone)]
pub enum Topology {
    /// One server.
    Single(redis::Client),
    /// The primary that a group of sentinels names.
    Sentinel(SentinelTarget),
    /// A Redis Cluster, found from its seed nodes.
    Cluster(Box<ClusterTarget>),
}

/// A group of sentinels and the master name they watch.
#[derive(Clone)]
pub struct SentinelTarget {
    /// The sentinels' addresses, for messages.
    pub(super) sentinels: Vec<String>,
    /// The master name.
    pub(super) master: String,
    /// How to ask the sentinels and reach what they name: rebuilt for every lookup, since a
    /// lookup needs the client mutably and several connections may look at once.
    builder: Arc<SentinelSettings>,
}

/// What a [`SentinelClient`] is built from (its builder is not `Clone`).
#[derive(Clone)]
struct SentinelSettings {
    addresses: Vec<ConnectionAddr>,
    tls: bool,
    certificates: Option<redis::TlsCertificates>,
    username: Option<String>,
    password: Option<String>,
    db: i64,
    sentinel_username: Option<String>,
    sentinel_password: Option<String>,
}

/// A Redis Cluster's seed nodes.
#[derive(Clone)]
pub struct ClusterTarget {
    /// The client the store's connections come from.
    pub(super) client: ClusterClient,
    /// The seed nodes, each reachable alone: subscriptions go to one of them.
    pub(super) seeds: Vec<redis::Client>,
}

impl Topology {
    /// Reads `url` (see the module's documentation for the forms), with `certificates` for TLS
    /// (a private CA, a client certificate) when given.
    ///
    /// # Errors
    /// An [`ErrorKind::InvalidClientConfig`] error when the URL is not one of the forms.
    pub fn open(
        url: &str,
        certificates: Option<redis::TlsCertificates>,
    ) -> Result<Self, RedisError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return single(url, certificates);
        };
        match scheme {
            "redis+sentinel" | "rediss+sentinel" => Ok(Self::Sentinel(SentinelTarget::parse(
                scheme.starts_with("rediss"),
                rest,
                certificates,
            )?)),
            "redis+cluster" | "rediss+cluster" => Ok(Self::Cluster(Box::new(
                ClusterTarget::parse(scheme.starts_with("rediss"), rest, certificates)?,
            ))),
            _ => single(url, certificates),
        }
    }

    /// What the topology is, in a word, for logs and `status`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Single(_) => "single",
            Self::Sentinel(_) => "sentinel",
            Self::Cluster(_) => "cluster",
        }
    }
}

fn single(url: &str, certificates: Option<redis::TlsCertificates>) -> Result<Topology, RedisError> {
    let client = match certificates {
        Some(certificates) => redis::Client::build_with_tls(url, certificates)?,
        None => redis::Client::open(url)?,
    };
    Ok(Topology::Single(client))
}

/// The parts of `user:password@host:port,host:port/path?query`.
struct Parts<'a> {
    userinfo: Option<&'a str>,
    hosts: Vec<&'a str>,
    path: &'a str,
    query: Vec<(&'a str, &'a str)>,
}

impl<'a> Parts<'a> {
    fn split(rest: &'a str) -> Result<Self, RedisError> {
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
        if hosts.iter().any(|host| host.is_empty()) {
            return Err(invalid("a host is missing in the list of addresses"));
        }
        let query = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
            .collect();
        Ok(Self {
            userinfo,
            hosts,
            path,
            query,
        })
    }

    /// The connection info of each host, as `scheme://userinfo@host` reads, with `port` when the
    /// host names none.
    fn nodes(&self, tls: bool, default_port: u16) -> Result<Vec<ConnectionInfo>, RedisError> {
        let scheme = if tls { "rediss" } else { "redis" };
        let userinfo = self
            .userinfo
            .map(|userinfo| format!("{userinfo}@"))
            .unwrap_or_default();
        self.hosts
            .iter()
            .map(|host| {
                let has_port = match host.rsplit_once(']') {
                    Some((_, after)) => after.starts_with(':'),
                    None => host.contains(':'),
                };
                let port = if has_port {
                    String::new()
                } else {
                    format!(":{default_port}")
                };
                format!("{scheme}://{userinfo}{host}{port}/").into_connection_info()
            })
            .collect()
    }
}

impl SentinelTarget {
    fn parse(
        tls: bool,
        rest: &str,
        certificates: Option<redis::TlsCertificates>,
    ) -> Result<Self, RedisError> {
        let parts = Parts::split(rest)?;
        let master = parts.path.trim_end_matches('/');
        if master.is_empty() || master.contains('/') {
            return Err(invalid(
                "a Sentinel URL names the master after the addresses: \
                 redis+sentinel://host:26379,host:26380/mymaster",
            ));
        }
        let nodes = parts.nodes(tls, 26379)?;
        let mut settings = SentinelSettings {
            addresses: nodes.iter().map(|node| node.addr().clone()).collect(),
            tls,
            certificates,
            username: nodes[0].redis_settings().username().map(str::to_owned),
            password: nodes[0].redis_settings().password().map(str::to_owned),
            db: 0,
            sentinel_username: None,
            sentinel_password: None,
        };
        for (name, value) in parts.query {
            let value = percent_decoded(name, value)?;
            match name {
                "db" => {
                    settings.db = value
                        .parse()
                        .map_err(|_| invalid(&format!("db={value} is not a database number")))?;
                }
                "sentinel_username" => settings.sentinel_username = Some(value),
                "sentinel_password" => settings.sentinel_password = Some(value),
                other => {
                    return Err(invalid(&format!(
                        "a Sentinel URL takes db, sentinel_username and sentinel_password, not \
                         {other}"
                    )));
                }
            }
        }
        let target = Self {
            sentinels: parts.hosts.iter().map(|host| (*host).to_owned()).collect(),
            master: master.to_owned(),
            builder: Arc::new(settings),
        };
        target.client()?;
        Ok(target)
    }

    /// The database of the primary that the store uses.
    pub(super) fn db(&self) -> i64 {
        self.builder.db
    }

    /// A client that asks the sentinels for the primary.
    pub(super) fn client(&self) -> Result<SentinelClient, RedisError> {
        let settings = &self.builder;
        let mut builder = SentinelClientBuilder::new(
            settings.addresses.clone(),
            &self.master,
            SentinelServerType::Master,
        )?
        .set_client_to_redis_db(settings.db);
        if let Some(username) = &settings.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &settings.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(username) = &settings.sentinel_username {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = &settings.sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if settings.tls {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if let Some(certificates) = &settings.certificates {
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates.clone());
            }
        }
        builder.build()
    }
}

impl ClusterTarget {
    fn parse(
        tls: bool,
        rest: &str,
        certificates: Option<redis::TlsCertificates>,
    ) -> Result<Self, RedisError> {
        let parts = Parts::split(rest)?;
        if !parts.path.trim_end_matches('/').is_empty() || !parts.query.is_empty() {
            return Err(invalid(
                "a Cluster URL is only its seed nodes (a cluster has one database): \
                 redis+cluster://host:7000,host:7001",
            ));
        }
        let nodes = parts.nodes(tls, 6379)?;
        let mut builder = ClusterClientBuilder::new(nodes.clone())
            .connection_timeout(CONNECTION_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT);
        if let Some(certificates) = &certificates {
            builder = builder.certs(certificates.clone());
        }
        let seeds = nodes
            .into_iter()
            .map(|node| match &certificates {
                Some(certificates) => redis::Client::build_with_tls(node, certificates.clone()),
                None => redis::Client::open(node),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            client: builder.build()?,
            seeds,
        })
    }
}

/// The value `text` of query parameter `name` with its `%XX` escapes decoded. An error names the
/// parameter, never the value, which may be a password.
fn percent_decoded(name: &str, text: &str) -> Result<String, RedisError> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let byte = text
                .get(index + 1..index + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| invalid(&format!("the value of {name} has a bad %-escape")))?;
            decoded.push(byte);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded)
        .map_err(|_| invalid(&format!("the value of {name} is not UTF-8 once decoded")))
}

fn invalid(detail: &str) -> RedisError {
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "invalid Redis URL",
        detail.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::Topology;

    fn kind(url: &str) -> Result<&'static str, String> {
        Topology::open(url, None)
            .map(|topology| topology.kind())
            .map_err(|error| error.to_string())
    }

    #[test]
    fn each_scheme_names_its_topology() {
        assert_eq!(kind("redis://127.0.0.1:6379/0"), Ok("single"));
        assert_eq!(kind("redis+unix:///run/redis.sock"), Ok("single"));
        assert_eq!(
            kind("redis+sentinel://10.0.0.1:26379,10.0.0.2,[::1]:26381/mymaster?db=2"),
            Ok("sentinel")
        );
        assert_eq!(
            kind("redis+cluster://user:pa%40ss@10.0.0.1:7000,10.0.0.2:7001"),
            Ok("cluster")
        );
    }

    #[test]
    fn a_sentinel_url_reads_credentials_db_and_the_sentinels_own_password() {
        let Ok(Topology::Sentinel(target)) = Topology::open(
            "redis+sentinel://app:s%40cret@h1:26379,h2/mymaster?db=3&sentinel_password=x%26y",
            None,
        ) else {
            panic!("a Sentinel URL");
        };
        assert_eq!(target.master, "mymaster");
        assert_eq!(target.sentinels, ["h1:26379", "h2"]);
        let settings = &target.builder;
        assert_eq!(settings.username.as_deref(), Some("app"));
        assert_eq!(settings.password.as_deref(), Some("s@cret"));
        assert_eq!(settings.db, 3);
        assert_eq!(settings.sentinel_password.as_deref(), Some("x&y"));
        assert_eq!(settings.addresses.len(), 2);
    }

    #[test]
    fn malformed_sentinel_and_cluster_urls_say_what_is_wrong() {
        let error = kind("redis+sentinel://h1:26379,h2:26380").expect_err("no master name");
        assert!(error.contains("names the master"), "{error}");
        let error = kind("redis+sentinel://h1,,h2/m").expect_err("an empty host");
        assert!(error.contains("host is missing"), "{error}");
        let error = kind("redis+sentinel://h1/m?db=x").expect_err("a bad db");
        assert!(error.contains("db=x"), "{error}");
        let error = kind("redis+sentinel://h1/m?timeout=3").expect_err("an unknown parameter");
        assert!(error.contains("not timeout"), "{error}");
        let error =
            kind("redis+sentinel://h1/m?sentinel_password=s3cret%zz").expect_err("a bad escape");
        assert!(error.contains("sentinel_password"), "{error}");
        assert!(
            !error.contains("s3cret"),
            "the password is not shown: {error}"
        );
        let error = kind("redis+cluster://h1:7000/2").expect_err("a database on a cluster");
        assert!(error.contains("one database"), "{error}");
        let error = kind("redis+cluster://h1:notaport").expect_err("a bad port");
        assert!(!error.is_empty());
    }
}
