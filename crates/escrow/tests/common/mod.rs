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
