//! The invariant across sites: three sites (US-East, US-West, EU) over real
//! redis-server processes, a tenth of Table I's delays between them, a
//! counter starting at 600 with bound 0, and many clients per site
//! decrementing until it is exhausted. The middleware never decrements past
//! the bound (excess decrements == 0) and all sites converge; the Weak
//! baseline, in the same setting, does decrement past it.

mod common;

use std::time::Duration;

use roost_escrow::{excess_decrements, Bound, Deployment, Design, EscrowCounters, Flag, Outcome};

const INITIAL: u64 = 600;
const CLIENTS_PER_SITE: usize = 4;

/// Creates `key` at every site and gives site 0 all `INITIAL` rights (an
/// increment), then waits until every site knows the value.
async fn setup(deployment: &Deployment, key: &str) {
    for site in 0..deployment.sites() {
        let mut client = deployment.client(site).await.expect("client");
        client
            .create(key, Bound::Lower, 0)
            .await
            .expect("create at every site");
    }
    let mut client = deployment.client(0).await.expect("client");
    assert_eq!(
        client
            .inc(key, INITIAL, Flag::StrictLocal)
            .await
            .expect("inc"),
        Outcome::Ok
    );
    assert!(
        deployment
            .wait_value_everywhere(key, INITIAL as i64, Duration::from_secs(5))
            .await,
        "the initial value reaches every site: {:?}",
        deployment.values(key).await
    );
}

async fn middleware_keeps_the_bound(design: Design) {
    let deployment = Deployment::start(common::fast_config(design))
        .await
        .expect("deployment starts");
    let key = "stock";
    setup(&deployment, key).await;
    // The proactive policy provisions every site before the clients start
    // (the last rights then move by synchronous requests).
    let provisioned = common::wait_rights_everywhere(&deployment, key).await;
    println!(
        "{}: rights after provisioning {provisioned:?}",
        design.variant()
    );
    let report = deployment
        .decrement_until_exhausted(
            key,
            &[0, 1, 2],
            CLIENTS_PER_SITE,
            Flag::Global,
            false,
            Duration::from_secs(15),
        )
        .await
        .expect("clients run");
    let ok = report.ok();
    let excess = excess_decrements(INITIAL, ok);
    let stats = deployment.stats();
    println!(
        "{}: {ok} decrements ok ({:?} per site), excess decrements {excess}, {} fail, {} retry, \
         {} errors, {:?}; stats {stats:?}",
        design.variant(),
        report.ok_per_site,
        report.fails,
        report.retries,
        report.errors,
        report.elapsed
    );
    assert_eq!(excess, 0, "decrements in excess of the bound");
    assert_eq!(
        report.timed_out, 0,
        "every client saw the counter exhausted"
    );
    assert_eq!(report.errors, 0);
    assert_eq!(ok, INITIAL, "every right is eventually usable");
    for (site, &n) in report.ok_per_site.iter().enumerate() {
        assert!(n > 0, "site {site} got rights and used them: {report:?}");
    }
    assert!(
        stats.iter().map(|s| s.donations).sum::<u64>() > 0,
        "rights moved by transfers"
    );
    let value = deployment
        .wait_converged(
            key,
            Some(INITIAL as i64 - ok as i64),
            Duration::from_secs(5),
        )
        .await
        .unwrap_or_else(|values| panic!("sites did not converge: {values:?}"));
    assert_eq!(value, 0);
    let rights = deployment.rights(key).await.expect("rights");
    assert_eq!(rights, vec![0, 0, 0]);
    if matches!(design, Design::ServerBased | Design::Roost) {
        let (ops, writes): (u64, u64) = stats
            .iter()
            .fold((0, 0), |(o, w), s| (o + s.ops_ok, w + s.writes));
        println!(
            "{}: {ops} operations in {writes} conditional writes",
            design.variant()
        );
        assert!(writes > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_based_never_exceeds_the_bound() {
    common::require_redis();
    let _one = common::exclusive().await;
    middleware_keeps_the_bound(Design::ClientBased).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_based_never_exceeds_the_bound() {
    common::require_redis();
    let _one = common::exclusive().await;
    middleware_keeps_the_bound(Design::ServerBased).await;
}

/// Same setting, the Weak baseline: it must show violations (so the check
/// above can fail). Retried with more clients, boundedly, until it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_baseline_exceeds_the_bound() {
    common::require_redis();
    let _one = common::exclusive().await;
    let deployment = Deployment::start(common::fast_config(Design::Weak))
        .await
        .expect("deployment starts");
    for round in 0..5 {
        let key = format!("stock-{round}");
        setup(&deployment, &key).await;
        let clients = CLIENTS_PER_SITE * (round + 1);
        let report = deployment
            .decrement_until_exhausted(
                &key,
                &[0, 1, 2],
                clients,
                Flag::Global,
                false,
                Duration::from_secs(15),
            )
            .await
            .expect("clients run");
        let ok = report.ok();
        let excess = excess_decrements(INITIAL, ok);
        assert_eq!(report.timed_out, 0);
        assert_eq!(report.errors, 0);
        let value = deployment
            .wait_converged(
                &key,
                Some(INITIAL as i64 - ok as i64),
                Duration::from_secs(5),
            )
            .await
            .unwrap_or_else(|values| panic!("weak sites did not converge: {values:?}"));
        println!(
            "weak, {clients} clients per site: {ok} decrements ok ({:?} per site), excess \
             decrements {excess}, converged value {value}",
            report.ok_per_site
        );
        if excess > 0 {
            assert!(value < 0, "the violation is visible in the value");
            return;
        }
    }
    panic!("the Weak baseline never exceeded the bound in 5 rounds");
}

/// The same with the site's counters inside Roost (no Redis needed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roost_sites_never_exceed_the_bound() {
    let _one = common::exclusive().await;
    middleware_keeps_the_bound(Design::Roost).await;
}
