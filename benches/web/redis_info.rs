//! What Redis says it did: commands run (`INFO commandstats`, those scripts call included) and
//! CPU spent (`INFO cpu`), read before and after what is measured.

use redis::aio::MultiplexedConnection;

/// A connection of its own, so that reading the counters waits behind no one.
pub struct RedisInfo {
    connection: MultiplexedConnection,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Counters {
    /// Every command's `calls`, summed.
    pub calls: u64,
    /// `used_cpu_sys` plus `used_cpu_user`, seconds.
    pub cpu_s: f64,
}

impl Counters {
    /// Commands run between `self` and `later`, less the `INFO` that read `later`'s.
    pub fn calls_until(&self, later: &Counters) -> u64 {
        later.calls.saturating_sub(self.calls).saturating_sub(1)
    }
}

impl RedisInfo {
    /// Connects to the Redis measured; the bench cannot go on without it. No response timeout:
    /// a Redis busy with what is measured answers late, and its counters are still the figure.
    pub async fn connect(url: &str) -> Self {
        let client = redis::Client::open(url).expect("a redis URL");
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect to the benchmark redis");
        Self { connection }
    }

    /// The counters now.
    pub async fn counters(&mut self) -> Counters {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .query_async(&mut self.connection)
            .await
            .expect("INFO commandstats cpu");
        let mut counters = Counters {
            calls: 0,
            cpu_s: 0.0,
        };
        for line in info.lines() {
            if let Some(stats) = line.strip_prefix("cmdstat_") {
                counters.calls += stats
                    .split([':', ','])
                    .find_map(|field| field.strip_prefix("calls="))
                    .and_then(|calls| calls.parse::<u64>().ok())
                    .unwrap_or_default();
            } else if let Some(seconds) = line
                .strip_prefix("used_cpu_sys:")
                .or_else(|| line.strip_prefix("used_cpu_user:"))
            {
                counters.cpu_s += seconds.trim().parse::<f64>().unwrap_or_default();
            }
        }
        counters
    }

    /// How many keys Redis holds (`DBSIZE`): what a `SCAN` of it walks.
    pub async fn keys(&mut self) -> u64 {
        redis::cmd("DBSIZE")
            .query_async(&mut self.connection)
            .await
            .expect("DBSIZE")
    }
}
