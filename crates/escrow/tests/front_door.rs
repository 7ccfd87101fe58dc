//! The server-based designs' clients over the network: each site node's
//! RESP front door (`FrontDoor`, BC.*) and `FrontDoorClient`, one TCP
//! connection per client, as `roost bench escrow` measures them. The
//! outcomes a client reads back are the node's (`Ok`, `Fail` from `BOUND`,
//! `Retry` with its hint from `RETRY`), errors stay errors, and many clients
//! at every site never pass the bound.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use roost_escrow::{
    excess_decrements, Bound, Client, Deployment, Design, EscrowCounters, EscrowError, Flag,
    FrontDoor, FrontDoorClient, Op, Outcome,
};

const INITIAL: u64 = 600;
const CLIENTS_PER_SITE: usize = 4;

async fn network_client(deployment: &Deployment, site: usize) -> Client {
    let client = deployment
        .network_client(site)
        .await
        .expect("network client");
    assert!(
        matches!(client, Client::FrontDoor(_)),
        "a server-based design's network client goes through the front door"
    );
    client
}

async fn outcomes_and_errors_cross_the_front_door(design: Design) {
    // No proactive transfers: site 0 keeps exactly the rights it creates.
    let mut config = common::fast_config(design);
    config.policy.threshold_rights = 0;
    let deployment = Deployment::start(config).await.expect("deployment starts");
    let name = design.variant();
    for site in 0..3 {
        let mut client = deployment.client(site).await.expect("client");
        client.create("k", Bound::Lower, 0).await.expect("create");
    }
    let mut in_process = deployment.client(0).await.expect("client");
    assert_eq!(
        in_process
            .inc("k", 10, Flag::StrictLocal)
            .await
            .expect("inc"),
        Outcome::Ok
    );
    assert!(
        deployment
            .wait_value_everywhere("k", 10, Duration::from_secs(5))
            .await
    );
    let mut at_0 = network_client(&deployment, 0).await;
    let mut at_1 = network_client(&deployment, 1).await;
    assert_eq!(at_1.read("k").await.expect("read"), 10, "{name}");
    // Site 1 has no rights, site 0 is believed to hold them: RETRY, hint
    // true.
    assert_eq!(
        at_1.dec("k", 1, Flag::StrictLocal).await.expect("dec"),
        Outcome::Retry {
            global_may_succeed: true
        },
        "{name}"
    );
    // BC.DEC replies with the value after it, this decrement included.
    let Client::FrontDoor(door) = &mut at_0 else {
        unreachable!("checked by network_client")
    };
    assert_eq!(
        door.apply("k", Op::dec(3), Flag::StrictLocal)
            .await
            .expect("dec"),
        (Outcome::Ok, Some(7)),
        "{name}"
    );
    assert_eq!(
        at_0.dec("k", 1, Flag::StrictLocal).await.expect("dec"),
        Outcome::Ok,
        "{name}"
    );
    assert_eq!(at_0.read("k").await.expect("read"), 6, "{name}");
    // GLOBAL at site 1 takes site 0's rights; then the bound: BOUND, Fail.
    assert_eq!(
        at_1.dec("k", 6, Flag::Global).await.expect("dec"),
        Outcome::Ok,
        "{name}"
    );
    assert_eq!(
        at_1.dec("k", 1, Flag::Global).await.expect("dec"),
        Outcome::Fail,
        "{name}"
    );
    assert_eq!(
        at_0.inc("k", 3, Flag::StrictLocal).await.expect("inc"),
        Outcome::Ok,
        "{name}"
    );

    // Errors are errors, not outcomes.
    assert!(
        matches!(
            at_0.read("nope").await,
            Err(EscrowError::UnknownCounter { .. })
        ),
        "{name}"
    );
    match at_0.dec("nope", 1, Flag::Global).await {
        Err(EscrowError::FrontDoor { reason }) => {
            assert!(reason.contains("does not exist"), "{name}: {reason}")
        }
        other => panic!("{name}: decrementing an unknown counter gave {other:?}"),
    }
    assert!(
        matches!(
            at_0.create("k", Bound::Lower, 0).await,
            Err(EscrowError::FrontDoor { .. })
        ),
        "{name}: the front door refuses a counter that exists"
    );
    assert!(
        matches!(
            at_0.dec("", 1, Flag::Global).await,
            Err(EscrowError::InvalidKey { .. })
        ),
        "{name}"
    );
    // A counter created through the front door starts at its bound.
    at_0.create("fresh", Bound::Upper, 5).await.expect("create");
    assert_eq!(at_0.read("fresh").await.expect("read"), 5, "{name}");
    assert_eq!(
        at_0.inc("fresh", 1, Flag::StrictLocal).await.expect("inc"),
        Outcome::Fail,
        "{name}"
    );
    assert_eq!(
        at_0.dec("fresh", 2, Flag::StrictLocal).await.expect("dec"),
        Outcome::Ok,
        "{name}"
    );
    // The connection still serves after all of that.
    assert_eq!(at_0.read("fresh").await.expect("read"), 3, "{name}");
}

/// A front door serves only clients that know its password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_door_refuses_clients_without_its_password() {
    let _one = common::exclusive().await;
    let deployment = Deployment::start(common::fast_config(Design::Roost))
        .await
        .expect("deployment starts");
    let node = deployment.site(0).server_client().expect("a node");
    let bind = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    assert!(matches!(
        FrontDoor::start(node.clone(), 3, bind, "").await,
        Err(EscrowError::Config { .. })
    ));
    let door = FrontDoor::start(node, 3, bind, "s3cret")
        .await
        .expect("front door");
    match FrontDoorClient::connect(door.addr(), "wrong").await {
        Err(EscrowError::FrontDoor { reason }) => assert!(
            reason.to_lowercase().contains("authentication failed"),
            "{reason}"
        ),
        Err(other) => panic!("a wrong password gave {other:?}"),
        Ok(_) => panic!("a wrong password was accepted"),
    }
    // Without AUTH every command is refused (NOAUTH).
    let mut stream = tokio::net::TcpStream::connect(door.addr())
        .await
        .expect("connects");
    stream
        .write_all(b"*2\r\n$6\r\nBC.GET\r\n$1\r\nk\r\n")
        .await
        .expect("write");
    let mut reply = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut reply))
        .await
        .expect("a reply")
        .expect("read");
    let reply = String::from_utf8_lossy(&reply[..n]);
    assert!(reply.starts_with("-NOAUTH"), "{reply}");
    let mut client = FrontDoorClient::connect(door.addr(), "s3cret")
        .await
        .expect("the right password");
    assert!(matches!(
        client.read("k").await,
        Err(EscrowError::UnknownCounter { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_and_errors_cross_the_front_door_of_a_redis_site() {
    common::require_redis();
    let _one = common::exclusive().await;
    outcomes_and_errors_cross_the_front_door(Design::ServerBased).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_and_errors_cross_the_front_door_of_a_roost_site() {
    let _one = common::exclusive().await;
    outcomes_and_errors_cross_the_front_door(Design::Roost).await;
}

/// Counter at 600 (all rights at site 0), 4 network clients per site
/// decrementing with GLOBAL until `Fail`: exactly 600 succeed, no errors,
/// every site converges to 0.
async fn network_clients_keep_the_bound(design: Design) {
    let deployment = Deployment::start(common::fast_config(design))
        .await
        .expect("deployment starts");
    let name = design.variant();
    let key = "stock";
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

    let ok: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
    let errors = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut tasks = tokio::task::JoinSet::new();
    for site in 0..3 {
        for _ in 0..CLIENTS_PER_SITE {
            let mut client = network_client(&deployment, site).await;
            let (ok, errors) = (Arc::clone(&ok), Arc::clone(&errors));
            tasks.spawn(async move {
                while Instant::now() < deadline {
                    match client.dec(key, 1, Flag::Global).await {
                        Ok(Outcome::Ok) => {
                            ok[site].fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Outcome::Fail) => return true,
                        Ok(Outcome::Retry { .. }) => {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
                false
            });
        }
    }
    let mut finished = 0;
    while let Some(joined) = tasks.join_next().await {
        finished += usize::from(joined.expect("client task"));
    }
    let per_site: Vec<u64> = ok.iter().map(|n| n.load(Ordering::Relaxed)).collect();
    let total: u64 = per_site.iter().sum();
    println!(
        "{name}: {total} decrements ok through the front doors ({per_site:?} per site), {} errors",
        errors.load(Ordering::Relaxed)
    );
    assert_eq!(
        excess_decrements(INITIAL, total),
        0,
        "{name}: past the bound"
    );
    assert_eq!(errors.load(Ordering::Relaxed), 0, "{name}");
    assert_eq!(
        finished,
        3 * CLIENTS_PER_SITE,
        "{name}: every client read BOUND as Fail"
    );
    assert_eq!(total, INITIAL, "{name}: every right is usable");
    assert!(
        per_site.iter().all(|&n| n > 0),
        "{name}: every site's clients decremented: {per_site:?}"
    );
    let value = deployment
        .wait_converged(key, Some(0), Duration::from_secs(5))
        .await
        .unwrap_or_else(|values| panic!("{name}: sites did not converge: {values:?}"));
    assert_eq!(value, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_clients_of_redis_sites_keep_the_bound() {
    common::require_redis();
    let _one = common::exclusive().await;
    network_clients_keep_the_bound(Design::ServerBased).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_clients_of_roost_sites_keep_the_bound() {
    let _one = common::exclusive().await;
    network_clients_keep_the_bound(Design::Roost).await;
}
