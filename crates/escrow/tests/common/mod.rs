//! Shared by the escrow integration tests: fast timers, the redis-server
//! check, and a lock so that one deployment runs at a time on a small
//! machine.

#![allow(dead_code)]

use std::time::Duration;

use roost_bcounter::{ProactiveConfig, RateLimit, RequestMode};
use roost_escrow::peer::LinkConfig;
use roost_escrow::redis_server::redis_server_available;
use roost_escrow::{DeploymentConfig, Design, Region, Timing};

/// Table I's round trips scaled by a tenth: 8 to 16 ms
/// (`ROOST_ESCROW_RTT_SCALE=1` runs the tests with the paper's).
pub const RTT_SCALE: f64 = 0.1;

pub fn rtt_scale() -> f64 {
    std::env::var("ROOST_ESCROW_RTT_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
        .unwrap_or(RTT_SCALE)
}

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Serializes the tests that start deployments (each test has its own
/// runtime; tokio's mutex works across them).
pub async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().await
}

/// Fails the test, saying what to install, when redis-server is missing
/// (`scripts/test.sh` installs it first): a missing peer is never a silent pass.
pub fn require_redis() {
    assert!(
        redis_server_available(),
        "redis-server is not installed: run scripts/install-deps.sh (or apt-get install redis-server)"
    );
}

pub fn fast_timing() -> Timing {
    Timing {
        propagate_every: Duration::from_millis(10),
        resync_every: Duration::from_millis(500),
        proactive_every: Duration::from_millis(20),
        transfer_timeout: Duration::from_millis(400),
        link: LinkConfig {
            heartbeat_every: Duration::from_millis(10),
            down_after: Duration::from_millis(80),
            handshake_timeout: Duration::from_millis(300),
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
        },
        max_batch: 256,
    }
}

pub fn fast_policy() -> ProactiveConfig {
    ProactiveConfig {
        threshold_rights: 50,
        shortfall_mode: RequestMode::Sync,
        rate_limit: RateLimit::new(4, 20).unwrap(),
    }
}

/// Three sites (US-East, US-West, EU) with a tenth of Table I's delays.
pub fn fast_config(design: Design) -> DeploymentConfig {
    DeploymentConfig {
        design,
        regions: Region::ALL.to_vec(),
        rtt_scale: rtt_scale(),
        timing: fast_timing(),
        policy: fast_policy(),
        planted: Default::default(),
    }
}

/// Waits (up to 5 s) until every site holds rights for `key`; returns them.
pub async fn wait_rights_everywhere(deployment: &roost_escrow::Deployment, key: &str) -> Vec<u64> {
    let started = std::time::Instant::now();
    loop {
        let rights = deployment.rights(key).await.expect("rights");
        if rights.iter().all(|&r| r > 0) {
            return rights;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the proactive policy did not provision every site: {rights:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A raw connection to a site's port as node `me`: with `secret`, after
/// the `roost-net` handshake (`Err` if the site refused it); without, the
/// bare stream, on which the site expects a handshake first.
pub async fn impostor(
    addr: std::net::SocketAddr,
    me: roost_net::NodeId,
    site: roost_net::NodeId,
    secret: Option<&roost_net::ClusterSecret>,
) -> Result<tokio::net::TcpStream, String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(secret) = secret {
        roost_net::auth::dial(&mut stream, secret, me, site, 2_000)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(stream)
}

/// Writes `frame` on `stream` as an envelope `me` → `site` (errors ignored:
/// the site may have closed the connection already).
pub async fn send_frame(
    stream: &mut tokio::net::TcpStream,
    me: roost_net::NodeId,
    site: roost_net::NodeId,
    frame: &roost_escrow::wire::Frame,
) {
    let _ = roost_escrow::peer::write_message(stream, me, site, frame).await;
}

/// Whether the site closed `stream` (EOF or an error within 2 s).
pub async fn closed(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// A delta from site `from` to site `to` of a 3-site lower-bound counter in
/// which `from` incremented by `rights` and gave them all to `to`: rights
/// nobody gave, if `from` did not really do it.
pub fn forged_delta(from: u32, to: u32, rights: u64) -> roost_escrow::wire::Delta {
    use roost_bcounter::ReplicaId;
    let mut forged =
        roost_escrow::Counter::new(roost_escrow::Bound::Lower, 0, ReplicaId(from), 3).unwrap();
    forged.increment(rights).unwrap();
    forged.transfer(rights, ReplicaId(to)).unwrap();
    forged.message_for(ReplicaId(to)).unwrap()
}
