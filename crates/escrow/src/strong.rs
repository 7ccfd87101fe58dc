//! The Strong baseline (§V-A, "Strongly Consistent Counters"): one Redis
//! site holds every counter; clients in every region talk to it, remote ones
//! through a [`DelayProxy`] (so they pay the wide-area round trip on every
//! operation). Each update is one conditional write: a Lua script that
//! reads the value, checks the bound and applies the delta atomically, so
//! the bound always holds, at the price of the round trip.
//!
//! Keys (in the single site's Redis): `strong:{key}`, a hash with `bound`
//! (`lower` or `upper`), `k` and `value`.

use std::net::SocketAddr;

use crate::api::{Bound, Direction, EscrowCounters, Flag, Op, Outcome};
use crate::error::{check_key, EscrowError};
use crate::harness::HarnessError;
use crate::proxy::{one_way, DelayProxy, Region};
use crate::redis_server::LocalRedis;
use crate::store::{self, LazyConnection};

pub fn strong_key(key: &str) -> String {
    format!("strong:{key}")
}

/// Creates the counter if absent. 1: created, 2: exists with the same
/// definition, 0: exists with another definition.
const CREATE_SCRIPT: &str = r"
local h = redis.call('HMGET', KEYS[1], 'bound', 'k')
if h[1] == false then
  redis.call('HSET', KEYS[1], 'bound', ARGV[1], 'k', ARGV[2], 'value', ARGV[2])
  return 1
end
if h[1] == ARGV[1] and h[2] == ARGV[2] then return 2 end
return 0
";

/// Check-and-apply, atomically. ARGV[1]: the signed delta. -1: no such
/// counter, 0: the bound would be crossed (nothing written), 1: applied.
const UPDATE_SCRIPT: &str = r"
local h = redis.call('HMGET', KEYS[1], 'bound', 'k', 'value')
if h[1] == false then return -1 end
local k = tonumber(h[2])
local v = tonumber(h[3])
local d = tonumber(ARGV[1])
if h[1] == 'lower' and d < 0 and v + d < k then return 0 end
if h[1] == 'upper' and d > 0 and v + d > k then return 0 end
redis.call('HINCRBY', KEYS[1], 'value', ARGV[1])
return 1
";

fn bound_name(bound: Bound) -> &'static str {
    match bound {
        Bound::Lower => "lower",
        Bound::Upper => "upper",
    }
}

/// A client of the Strong baseline: one connection to the single Redis
/// site (directly, or through a proxy when the client is remote).
pub struct StrongClient {
    con: LazyConnection,
}

impl StrongClient {
    /// `url`: the Redis site, or the proxy in front of it.
    pub async fn connect(url: &str) -> Result<StrongClient, EscrowError> {
        Ok(StrongClient {
            con: LazyConnection::new(url, Some(store::connect(url).await?)),
        })
    }

    async fn op(&mut self, key: &str, op: Op) -> Result<Outcome, EscrowError> {
        check_key(key)?;
        let delta = i64::try_from(op.delta)
            .map_err(|_| EscrowError::counter(key, "delta does not fit an i64"))?;
        let signed = match op.direction {
            Direction::Inc => delta,
            Direction::Dec => -delta,
        };
        let mut con = self.con.get().await?;
        let answer: Result<i64, _> = redis::cmd("EVAL")
            .arg(UPDATE_SCRIPT)
            .arg(1)
            .arg(strong_key(key))
            .arg(signed)
            .query_async(&mut con)
            .await;
        match self.con.failed(answer)? {
            1 => Ok(Outcome::Ok),
            0 => Ok(Outcome::Fail),
            _ => Err(EscrowError::UnknownCounter {
                key: key.to_owned(),
            }),
        }
    }
}

impl EscrowCounters for StrongClient {
    async fn create(&mut self, key: &str, bound: Bound, k: i64) -> Result<(), EscrowError> {
        check_key(key)?;
        let mut con = self.con.get().await?;
        let created: Result<i64, _> = redis::cmd("EVAL")
            .arg(CREATE_SCRIPT)
            .arg(1)
            .arg(strong_key(key))
            .arg(bound_name(bound))
            .arg(k)
            .query_async(&mut con)
            .await;
        if self.con.failed(created)? == 0 {
            let existing: Result<(Option<String>, Option<String>), _> = redis::cmd("HMGET")
                .arg(strong_key(key))
                .arg("bound")
                .arg("k")
                .query_async(&mut con)
                .await;
            let (b, existing_k) = self.con.failed(existing)?;
            return Err(EscrowError::Conflict {
                key: key.to_owned(),
                existing: format!(
                    "{} {}",
                    b.unwrap_or_default(),
                    existing_k.unwrap_or_default()
                ),
                requested: format!("{} {k}", bound_name(bound)),
            });
        }
        Ok(())
    }

    async fn read(&mut self, key: &str) -> Result<i64, EscrowError> {
        check_key(key)?;
        let mut con = self.con.get().await?;
        let value: Result<Option<i64>, _> = redis::cmd("HGET")
            .arg(strong_key(key))
            .arg("value")
            .query_async(&mut con)
            .await;
        self.con
            .failed(value)?
            .ok_or_else(|| EscrowError::UnknownCounter {
                key: key.to_owned(),
            })
    }

    async fn inc(&mut self, key: &str, delta: u64, _flag: Flag) -> Result<Outcome, EscrowError> {
        self.op(key, Op::inc(delta)).await
    }

    async fn dec(&mut self, key: &str, delta: u64, _flag: Flag) -> Result<Outcome, EscrowError> {
        self.op(key, Op::dec(delta)).await
    }
}

/// A Strong deployment: one `redis-server` in `regions[home]`, and for
/// every other region a [`DelayProxy`] with Table I's round trip (times
/// `rtt_scale`) through which that region's clients reach it.
pub struct StrongDeployment {
    regions: Vec<Region>,
    home: usize,
    // Dropped before the Redis process.
    proxies: Vec<Option<DelayProxy>>,
    redis: LocalRedis,
}

impl StrongDeployment {
    pub async fn start(
        regions: Vec<Region>,
        home: usize,
        rtt_scale: f64,
    ) -> Result<StrongDeployment, HarnessError> {
        let redis = tokio::task::spawn_blocking(LocalRedis::start)
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))??;
        let upstream: SocketAddr = redis.addr();
        let mut proxies = Vec::with_capacity(regions.len());
        for (site, &region) in regions.iter().enumerate() {
            proxies.push(if site == home {
                None
            } else {
                let delay = one_way(region, regions[home], rtt_scale);
                Some(DelayProxy::start(upstream, delay, delay).await?)
            });
        }
        Ok(StrongDeployment {
            regions,
            home,
            proxies,
            redis,
        })
    }

    /// Three regions (US-East, US-West, EU), the data in US-East.
    pub async fn three_regions(rtt_scale: f64) -> Result<StrongDeployment, HarnessError> {
        StrongDeployment::start(Region::ALL.to_vec(), 0, rtt_scale).await
    }

    pub fn sites(&self) -> usize {
        self.regions.len()
    }

    pub fn region(&self, site: usize) -> Region {
        self.regions[site]
    }

    /// The site whose region holds the data.
    pub fn home(&self) -> usize {
        self.home
    }

    /// Whether clients at `site` reach the data over the wide area.
    pub fn is_remote(&self, site: usize) -> bool {
        site != self.home
    }

    /// The proxy remote clients at `site` go through.
    pub fn proxy(&self, site: usize) -> Option<&DelayProxy> {
        self.proxies.get(site)?.as_ref()
    }

    /// Where clients at `site` connect: the Redis site itself, or the proxy.
    pub fn url_for(&self, site: usize) -> String {
        match self.proxy(site) {
            Some(proxy) => format!("redis://{}/", proxy.addr()),
            None => self.redis.url(),
        }
    }

    pub async fn client(&self, site: usize) -> Result<StrongClient, EscrowError> {
        StrongClient::connect(&self.url_for(site)).await
    }

    /// The value as stored (read directly, without delay).
    pub async fn value(&self, key: &str) -> Result<i64, EscrowError> {
        StrongClient::connect(&self.redis.url())
            .await?
            .read(key)
            .await
    }
}
