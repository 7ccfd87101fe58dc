//! A partitioned site (§IV-E): every link to and from site 2 (EU) is cut.
//! Both sides keep operating within their rights: site 2 spends its own
//! rights and cannot spend more, the other two never use site 2's (the
//! unreachable site keeps its rights; they see `Retry`, not `Fail`). After
//! healing, all sites converge to the same value, the rights site 2 kept are
//! usable again, every right is used exactly once, and the bound holds.

mod common;

use std::time::Duration;

use roost_escrow::{excess_decrements, Bound, Deployment, Design, EscrowCounters, Flag, Outcome};

const INITIAL: u64 = 600;

async fn partitioned_site_keeps_its_rights(design: Design) {
    let deployment = Deployment::start(common::fast_config(design))
        .await
        .expect("deployment starts");
    let key = "seats";
    for site in 0..3 {
        let mut client = deployment.client(site).await.expect("client");
        client.create(key, Bound::Lower, 0).await.expect("create");
    }
    let mut client = deployment.client(0).await.expect("client");
    assert_eq!(
        client
            .inc(key, INITIAL, Flag::StrictLocal)
            .await
            .expect("inc"),
        Outcome::Ok
    );
    common::wait_rights_everywhere(&deployment, key).await;

    deployment.partition(2);
    // Let transfers that were already on their way land (or be lost).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let held = deployment.rights(key).await.expect("rights");
    let minority_rights = held[2];
    assert!(minority_rights > 0, "site 2 held rights when cut: {held:?}");
    // The links notice once the heartbeats stop coming back.
    let cut_at = std::time::Instant::now();
    let cut_off =
        || (0..2).all(|p| !deployment.site(2).link_up(p) && !deployment.site(p).link_up(2));
    while !cut_off() {
        assert!(
            cut_at.elapsed() < Duration::from_secs(2),
            "site 2 is cut off, but its links are still up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Both sides operate during the partition. Site 2 spends two thirds of
    // what it holds, strictly locally, and cannot spend more than it holds;
    // sites 0 and 1 decrement globally until they run out (their requests to
    // site 2 fail).
    let keep = minority_rights / 3;
    let spend = minority_rights - keep;
    let minority = async {
        let mut client = deployment.client(2).await.expect("client");
        for _ in 0..spend {
            assert_eq!(
                client.dec(key, 1, Flag::StrictLocal).await.expect("dec"),
                Outcome::Ok,
                "site 2 operates with its own rights"
            );
        }
        for flag in [Flag::StrictLocal, Flag::Global] {
            let beyond = client.dec(key, keep + 1, flag).await.expect("dec");
            assert!(
                matches!(beyond, Outcome::Retry { .. }),
                "site 2 cannot spend more than it holds ({flag:?}): {beyond:?}"
            );
        }
    };
    let majority = deployment.decrement_until_exhausted(
        key,
        &[0, 1],
        2,
        Flag::Global,
        true,
        Duration::from_secs(5),
    );
    let ((), majority) = tokio::join!(minority, majority);
    let majority = majority.expect("sites 0 and 1 run");
    let ok01 = majority.ok();
    println!(
        "{}: cut with rights {held:?}; during the partition site 2 did {spend}, sites 0 and 1 \
         did {ok01} ({:?}, {} retries); stats {:?}",
        design.variant(),
        majority.ok_per_site,
        majority.retries,
        deployment.stats()
    );
    assert!(ok01 > 0, "the majority side keeps operating");
    assert!(
        ok01 <= INITIAL - minority_rights,
        "the majority side never used site 2's rights ({ok01} > {INITIAL} - {minority_rights})"
    );
    assert_eq!(majority.errors, 0);
    assert_eq!(
        majority.fails, 0,
        "site 2's rights still exist: retry, not fail"
    );
    assert!(
        majority.retries > 0,
        "the majority ran out of reachable rights"
    );
    let rights = deployment.rights(key).await.expect("rights");
    assert_eq!(rights[2], keep, "site 2 still holds what it did not spend");
    if matches!(design, Design::ServerBased | Design::Roost) {
        let stats = deployment.stats();
        assert!(
            stats[0].sync_requests_failed + stats[1].sync_requests_failed > 0,
            "requests to the cut site failed: {stats:?}"
        );
    }

    // Heal: everything converges, and what site 2 did is counted everywhere.
    deployment.heal(2);
    let during = ok01 + spend;
    let value = deployment
        .wait_converged(key, Some((INITIAL - during) as i64), Duration::from_secs(5))
        .await
        .unwrap_or_else(|values| panic!("sites did not converge: {values:?}"));
    assert!(value >= 0);

    // The rights left anywhere, site 2's included, are usable again.
    let after = deployment
        .decrement_until_exhausted(
            key,
            &[0, 1, 2],
            2,
            Flag::Global,
            false,
            Duration::from_secs(10),
        )
        .await
        .expect("clients run");
    let total = during + after.ok();
    println!(
        "{}: after healing {} more; total {total}, excess decrements {}",
        design.variant(),
        after.ok(),
        excess_decrements(INITIAL, total)
    );
    assert_eq!(after.timed_out, 0);
    assert_eq!(excess_decrements(INITIAL, total), 0);
    assert_eq!(total, INITIAL, "no right was lost to the partition");
    assert!(
        after.ok() >= keep,
        "site 2's kept rights came back into use"
    );
    let value = deployment
        .wait_converged(key, Some(0), Duration::from_secs(5))
        .await
        .unwrap_or_else(|values| panic!("sites did not converge: {values:?}"));
    assert_eq!(value, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_based_partitioned_site_keeps_its_rights() {
    common::require_redis();
    let _one = common::exclusive().await;
    partitioned_site_keeps_its_rights(Design::ServerBased).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_based_partitioned_site_keeps_its_rights() {
    common::require_redis();
    let _one = common::exclusive().await;
    partitioned_site_keeps_its_rights(Design::ClientBased).await;
}

/// The same with the site's counters inside Roost (no Redis needed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roost_partitioned_site_keeps_its_rights() {
    let _one = common::exclusive().await;
    partitioned_site_keeps_its_rights(Design::Roost).await;
}
