//! The Strong baseline: one Redis site (US-East), clients in all three
//! regions (remote ones through a proxy with a tenth of Table I's delays),
//! many clients decrementing a counter of 600 until `Fail`: exactly 600
//! succeed, never more, the value ends at the bound, and remote clients pay
//! the wide-area round trip.

mod common;

use std::time::{Duration, Instant};

use roost_escrow::proxy::one_way;
use roost_escrow::{excess_decrements, Bound, EscrowCounters, Flag, Outcome, StrongDeployment};

const INITIAL: u64 = 600;
const CLIENTS_PER_SITE: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strong_never_exceeds_the_bound() {
    common::require_redis();
    let _one = common::exclusive().await;
    let deployment = StrongDeployment::three_regions(common::rtt_scale())
        .await
        .expect("deployment starts");
    let key = "stock";
    for site in 0..deployment.sites() {
        let mut client = deployment.client(site).await.expect("client");
        client.create(key, Bound::Lower, 0).await.expect("create");
    }
    let mut client = deployment.client(1).await.expect("client");
    assert!(client.create(key, Bound::Upper, 0).await.is_err());
    assert_eq!(
        client.inc(key, INITIAL, Flag::Global).await.expect("inc"),
        Outcome::Ok
    );
    assert_eq!(deployment.value(key).await.expect("value"), INITIAL as i64);

    let mut tasks = tokio::task::JoinSet::new();
    for site in 0..deployment.sites() {
        for _ in 0..CLIENTS_PER_SITE {
            let mut client = deployment.client(site).await.expect("client");
            tasks.spawn(async move {
                let mut ok = 0u64;
                let mut slowest_ok = Duration::ZERO;
                loop {
                    let started = Instant::now();
                    match client.dec("stock", 1, Flag::Global).await.expect("dec") {
                        Outcome::Ok => {
                            ok += 1;
                            slowest_ok = slowest_ok.max(started.elapsed());
                        }
                        Outcome::Fail => return (site, ok, started.elapsed()),
                        Outcome::Retry { .. } => panic!("strong never answers Retry"),
                    }
                }
            });
        }
    }
    let mut ok = 0;
    while let Some(joined) = tasks.join_next().await {
        let (site, done, last) = joined.expect("client task");
        ok += done;
        if deployment.is_remote(site) {
            let rtt = one_way(
                deployment.region(site),
                deployment.region(0),
                common::rtt_scale(),
            ) * 2;
            assert!(
                last >= rtt,
                "a remote client's operation took {last:?}, under the round trip {rtt:?}"
            );
        }
    }
    assert_eq!(excess_decrements(INITIAL, ok), 0);
    assert_eq!(ok, INITIAL);
    assert_eq!(deployment.value(key).await.expect("value"), 0);
    let mut client = deployment.client(2).await.expect("client");
    assert_eq!(
        client.dec(key, 1, Flag::StrictLocal).await.expect("dec"),
        Outcome::Fail
    );
    assert_eq!(client.read(key).await.expect("read"), 0);
    assert!(client.dec("missing", 1, Flag::Global).await.is_err());
}
