//! The links between sites are `roost-net` links authenticated with the
//! deployment's secret, over real sockets (sites inside Roost: no Redis):
//!
//! 1. a connection without the secret, or with another one, is refused and
//!    changes nothing at any site;
//! 2. a forged delta or request from a node that is not a site, or from a
//!    site claiming to be another, is refused and changes nothing;
//! 3. a flood of large valid-looking frames from a misbehaving (but
//!    authenticated) site keeps the site's memory and queues bounded.
//!
//! Each test also runs with the check it tests planted away
//! (`PlantedSiteBugs`) and asserts that its measure then catches the fault,
//! so none can pass vacuously.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roost_bcounter::{ReplicaId, RequestMode, TransferRequest};
use roost_escrow::peer::{client_node, site_node, LinkConfig};
use roost_escrow::roost_store::RowFuture;
use roost_escrow::site::{PlantedSiteBugs, MAX_WORK_IN_FLIGHT};
use roost_escrow::wire::{Frame, SiteMessage, StateEntry};
use roost_escrow::{
    Bound, Deployment, Design, EscrowCounters, EscrowError, Flag, Outcome, ReplicaRow, ReplicaRows,
    Site, SiteConfig,
};
use roost_net::{ClusterSecret, EpochId, NodeId, Transport};
use tokio::net::TcpListener;

const KEY: &str = "k";
const HELD: u64 = 10;

/// A deployment of three Roost sites where site 0 created `KEY` with
/// `HELD` rights and every site has it; no proactive transfers.
async fn deployment(planted: PlantedSiteBugs) -> Deployment {
    let mut config = common::fast_config(Design::Roost);
    config.policy.threshold_rights = 0;
    config.planted = planted;
    let deployment = Deployment::start(config).await.expect("deployment starts");
    let mut client = deployment.client(0).await.expect("client");
    client.create(KEY, Bound::Lower, 0).await.expect("create");
    assert_eq!(
        client.inc(KEY, HELD, Flag::StrictLocal).await.expect("inc"),
        Outcome::Ok
    );
    assert!(
        deployment
            .wait_value_everywhere(KEY, HELD as i64, Duration::from_secs(5))
            .await,
        "the counter reaches every site"
    );
    deployment
}

/// What the attacks changed: `KEY`'s value at each site and site 0's rights,
/// after a few propagation rounds.
async fn after_attack(deployment: &Deployment) -> (Vec<i64>, u64) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let values = deployment.values(KEY).await.expect("values");
    let rights = deployment.rights(KEY).await.expect("rights")[0];
    (values, rights)
}

fn unchanged() -> (Vec<i64>, u64) {
    (vec![HELD as i64; 3], HELD)
}

fn states(message: roost_escrow::wire::Delta) -> Frame {
    Frame::States {
        entries: vec![StateEntry {
            key: KEY.to_owned(),
            message,
        }],
    }
}

/// Forged deltas to site 0 over connections that do not prove the secret:
/// none at all (envelopes straight away, as site 1), and another
/// deployment's secret. Returns what changed.
async fn attack_without_the_secret(planted: PlantedSiteBugs) -> (Vec<i64>, u64) {
    let deployment = deployment(planted).await;
    let addr = deployment.site(0).addr();
    let (n0, n1) = (site_node(0), site_node(1));
    let forged = states(common::forged_delta(1, 0, 1000));
    let failures_before = deployment.site(0).link_metrics().auth_failures;

    let mut bare = common::impostor(addr, n1, n0, None)
        .await
        .expect("tcp connects");
    common::send_frame(&mut bare, n1, n0, &forged).await;
    let other = ClusterSecret::random();
    let refused = common::impostor(addr, n1, n0, Some(&other)).await;
    if !planted.no_auth {
        assert!(common::closed(&mut bare).await, "no handshake: closed");
        assert!(refused.is_err(), "another secret: refused");
        // The acceptor counts the second one once the dialer hung up.
        let started = Instant::now();
        while deployment.site(0).link_metrics().auth_failures < failures_before + 2 {
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{:?}",
                deployment.site(0).link_metrics()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    if let Ok(mut stream) = refused {
        common::send_frame(&mut stream, n1, n0, &forged).await;
    }
    let changes = after_attack(&deployment).await;
    if changes == unchanged() {
        // The site still serves.
        let mut client = deployment.client(0).await.expect("client");
        assert_eq!(
            client.dec(KEY, HELD, Flag::StrictLocal).await.expect("dec"),
            Outcome::Ok
        );
    }
    changes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_without_the_secret_are_refused_and_change_nothing() {
    let _one = common::exclusive().await;
    assert_eq!(
        attack_without_the_secret(PlantedSiteBugs::default()).await,
        unchanged()
    );
    // The same attack on sites whose links skip the handshake gets in.
    let planted = PlantedSiteBugs {
        no_auth: true,
        ..PlantedSiteBugs::default()
    };
    let (values, rights) = attack_without_the_secret(planted).await;
    assert_eq!(rights, HELD + 1000, "the planted fault must be caught");
    assert_ne!(values, vec![HELD as i64; 3]);
}

/// Forged messages from nodes that are not the site they claim: a node id
/// outside the site table and a client identity (both with the secret), and
/// site 1 (authenticated) sending a delta and a request as site 2.
async fn attack_as_another_node(planted: PlantedSiteBugs) -> (Vec<i64>, u64) {
    let deployment = deployment(planted).await;
    let addr = deployment.site(0).addr();
    let secret = deployment.secret().clone();
    let (n0, n1) = (site_node(0), site_node(1));
    for outsider in [NodeId(7), client_node(1), n0] {
        let refused = common::impostor(addr, outsider, n0, Some(&secret)).await;
        assert!(refused.is_err(), "{outsider} is not a site of the table");
    }
    let mut stream = common::impostor(addr, n1, n0, Some(&secret))
        .await
        .expect("site 1 authenticates");
    // An envelope claiming another sender than the one that authenticated
    // closes the connection in the transport; use a fresh one after it.
    let mut spoofer = common::impostor(addr, n1, n0, Some(&secret))
        .await
        .expect("site 1 authenticates");
    common::send_frame(
        &mut spoofer,
        site_node(2),
        n0,
        &states(common::forged_delta(2, 0, 1000)),
    )
    .await;
    assert!(
        common::closed(&mut spoofer).await,
        "a spoofed envelope closes it"
    );
    // Inside site 1's envelopes: a delta site 2 would have sent, and a
    // request as site 2.
    common::send_frame(
        &mut stream,
        n1,
        n0,
        &states(common::forged_delta(2, 0, 1000)),
    )
    .await;
    let request = TransferRequest {
        requester: ReplicaId(2),
        donor: ReplicaId(0),
        amount: 5,
        seen_transferred: 0,
        mode: RequestMode::Sync,
    };
    common::send_frame(
        &mut stream,
        n1,
        n0,
        &Frame::Transfer {
            id: 1,
            key: KEY.to_owned(),
            request,
        },
    )
    .await;
    let changes = after_attack(&deployment).await;
    if !planted.trust_claimed_sender {
        let stats = deployment.site(0).stats();
        assert!(stats.merges_rejected >= 1, "{stats:?}");
        assert_eq!(stats.donations, 0, "{stats:?}");
    }
    changes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_messages_from_non_sites_are_refused_and_change_nothing() {
    let _one = common::exclusive().await;
    assert_eq!(
        attack_as_another_node(PlantedSiteBugs::default()).await,
        unchanged()
    );
    // A site that believes what a message claims merges the forgery.
    let planted = PlantedSiteBugs {
        trust_claimed_sender: true,
        ..PlantedSiteBugs::default()
    };
    let (values, rights) = attack_as_another_node(planted).await;
    assert!(rights > HELD, "the planted fault must be caught");
    assert_ne!(values, vec![HELD as i64; 3]);
}

/// Replica rows in memory whose loads and writes wait until the gate opens:
/// a site whose store stalls, so that what arrives must queue.
struct GatedRows {
    open: tokio::sync::watch::Receiver<bool>,
    rows: Mutex<HashMap<String, ReplicaRow>>,
}

impl GatedRows {
    async fn wait(&self) {
        let mut open = self.open.clone();
        let _ = open.wait_for(|open| *open).await;
    }
}

impl ReplicaRows for GatedRows {
    fn load(&self, key: &str) -> RowFuture<'_, Result<Option<ReplicaRow>, String>> {
        let key = key.to_owned();
        Box::pin(async move {
            self.wait().await;
            Ok(self.rows.lock().unwrap().get(&key).cloned())
        })
    }

    fn cas(
        &self,
        key: &str,
        expected: Option<&str>,
        row: ReplicaRow,
    ) -> RowFuture<'_, Result<bool, String>> {
        let (key, expected) = (key.to_owned(), expected.map(str::to_owned));
        Box::pin(async move {
            self.wait().await;
            let mut rows = self.rows.lock().unwrap();
            if rows.get(&key).map(|r| r.token.clone()) != expected {
                return Ok(false);
            }
            rows.insert(key, row);
            Ok(true)
        })
    }

    fn keys(&self) -> RowFuture<'_, Result<Vec<String>, String>> {
        Box::pin(async move { Ok(self.rows.lock().unwrap().keys().cloned().collect()) })
    }
}

fn resident_bytes() -> u64 {
    roost_bench::sys::resident_bytes().expect("resident memory from /proc/self/statm")
}

/// Frames the flood sends at most, and counter states per frame.
const FLOOD_FRAMES: usize = 4_000;
const ENTRIES_PER_FRAME: usize = 150;

struct Flood {
    /// Frames the site took before the sender had to wait for a second.
    accepted: usize,
    work_in_flight_max: u64,
    rss_growth_bytes: u64,
    /// A reload while the counter's queue is full (stalled store).
    reload: Result<(), EscrowError>,
}

/// Site 0 of three, its store stalled, flooded by "site 1" (a transport
/// with the secret) with `FLOOD_FRAMES` frames of `ENTRIES_PER_FRAME` valid
/// deltas each, as fast as the site takes them.
async fn flood(planted: PlantedSiteBugs) -> Flood {
    let secret = ClusterSecret::random();
    let attacker_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let attacker_addr = attacker_listener.local_addr().expect("addr");
    let nobody = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let site_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let site_addr = site_listener.local_addr().expect("addr");
    let (gate, open) = tokio::sync::watch::channel(false);
    let rows = Arc::new(GatedRows {
        open,
        rows: Mutex::new(HashMap::new()),
    });
    let config = SiteConfig {
        site: 0,
        sites: 3,
        redis_url: String::new(),
        peers: vec![
            Vec::new(),
            vec![attacker_addr],
            vec![nobody.local_addr().expect("addr")],
        ],
        member: 0,
        members: 1,
        timing: common::fast_timing(),
        policy: common::fast_policy(),
        secret: secret.clone(),
        client_listen: None,
        planted,
    };
    let site = Site::start_over_rows(config, site_listener, rows)
        .await
        .expect("site starts");
    let mut attacker_config = LinkConfig::default().transport(Some(secret));
    attacker_config.outbound_queue_capacity = 16;
    let (attacker, _inbox) = Transport::<SiteMessage>::start(
        NodeId(1),
        attacker_listener,
        BTreeMap::from([(site_node(0), site_addr)]),
        attacker_config,
    )
    .expect("attacker starts");
    let message = SiteMessage::new(&Frame::States {
        entries: (0..ENTRIES_PER_FRAME)
            .map(|_| StateEntry {
                key: KEY.to_owned(),
                message: common::forged_delta(1, 0, 1000),
            })
            .collect(),
    })
    .expect("encode");
    assert!(message.body.len() > 20_000, "{} bytes", message.body.len());

    tokio::time::sleep(Duration::from_millis(100)).await;
    let rss_before = resident_bytes();
    let mut accepted = 0;
    for _ in 0..FLOOD_FRAMES {
        let sent = attacker.send_when_ready(site_node(0), EpochId(0), message.clone());
        match tokio::time::timeout(Duration::from_secs(1), sent).await {
            Ok(Ok(())) => accepted += 1,
            Ok(Err(error)) => panic!("attacker: {error}"),
            Err(_) => break, // The site stopped taking them: backpressure.
        }
        // A site that takes everything: stop before the machine suffers.
        if site.stats().work_in_flight_max > 4 * MAX_WORK_IN_FLIGHT {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_growth_bytes = resident_bytes().saturating_sub(rss_before);
    let reload = site.server_client().expect("node").reload(KEY);
    let work_in_flight_max = site.stats().work_in_flight_max;
    attacker.shutdown();
    // The store comes back: the site works through what it took.
    gate.send_replace(true);
    let started = Instant::now();
    while site.stats().work_in_flight > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            site.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Flood {
        accepted,
        work_in_flight_max,
        rss_growth_bytes,
        reload,
    }
}

/// At most this much resident memory for the whole flood (the bounded
/// queues hold a few MiB; taking every frame would hold 600,000 deltas).
const MAX_RSS_GROWTH_BYTES: u64 = 64 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_frames_keeps_the_site_bounded() {
    let _one = common::exclusive().await;
    let bounded = flood(PlantedSiteBugs::default()).await;
    println!(
        "bounded: accepted {} of {FLOOD_FRAMES} frames, work in flight at most {} (bound {MAX_WORK_IN_FLIGHT}), RSS +{} KiB",
        bounded.accepted,
        bounded.work_in_flight_max,
        bounded.rss_growth_bytes >> 10
    );
    assert!(
        bounded.accepted < FLOOD_FRAMES,
        "the stalled site took every frame"
    );
    assert!(bounded.work_in_flight_max <= MAX_WORK_IN_FLIGHT);
    assert!(
        bounded.rss_growth_bytes < MAX_RSS_GROWTH_BYTES,
        "RSS grew {} MiB",
        bounded.rss_growth_bytes >> 20
    );
    // The counter's own queue is full too, and says so.
    assert!(
        matches!(bounded.reload, Err(EscrowError::QueueFull { .. })),
        "{:?}",
        bounded.reload
    );
    // A task per frame takes whatever comes.
    let planted = flood(PlantedSiteBugs {
        task_per_frame: true,
        ..PlantedSiteBugs::default()
    })
    .await;
    println!(
        "task per frame: accepted {} frames, work in flight at most {}, RSS +{} KiB",
        planted.accepted,
        planted.work_in_flight_max,
        planted.rss_growth_bytes >> 10
    );
    assert!(
        planted.work_in_flight_max > MAX_WORK_IN_FLIGHT,
        "the planted fault must be caught"
    );
}

/// What connections to a client-based agent's client port achieved: the
/// agent's synchronous requests to donors, and its refused handshakes.
async fn attack_the_client_port(planted: PlantedSiteBugs) -> (u64, u64) {
    let mut config = common::fast_config(Design::ClientBased);
    config.policy.threshold_rights = 0;
    config.planted = planted;
    let deployment = Deployment::start(config).await.expect("deployment starts");
    let agent = deployment.site(0).client_addr().expect("a client port");
    let secret = deployment.secret().clone();
    let (n0, c0) = (site_node(0), client_node(0));
    let ask = |requester| Frame::AskDonor {
        id: 1,
        key: KEY.to_owned(),
        request: TransferRequest {
            requester: ReplicaId(requester),
            donor: ReplicaId(1),
            amount: 5,
            seen_transferred: 0,
            mode: RequestMode::Sync,
        },
    };
    // No handshake, another secret, another site's client identity, a site.
    let mut bare = common::impostor(agent, c0, n0, None)
        .await
        .expect("tcp connects");
    common::send_frame(&mut bare, c0, n0, &ask(0)).await;
    if !planted.no_auth {
        assert!(common::closed(&mut bare).await, "no handshake: closed");
        let other = ClusterSecret::random();
        for (who, with) in [
            (c0, &other),
            (client_node(1), &secret),
            (site_node(1), &secret),
        ] {
            let refused = common::impostor(agent, who, n0, Some(with)).await;
            assert!(refused.is_err(), "{who} is refused");
        }
        // A client of site 0 (with the secret) may ask only for site 0.
        let mut client = common::impostor(agent, c0, n0, Some(&secret))
            .await
            .expect("site 0's client authenticates");
        common::send_frame(&mut client, c0, n0, &ask(2)).await;
        let reply = tokio::time::timeout(
            Duration::from_secs(2),
            roost_escrow::peer::read_message(&mut client),
        )
        .await
        .expect("a reply")
        .expect("readable")
        .expect("not closed");
        match roost_escrow::wire::decode(&reply.msg.body) {
            Ok(Frame::TransferReply {
                result: roost_escrow::wire::TransferResult::Error { .. },
                ..
            }) => {}
            other => panic!("expected an error reply, got {other:?}"),
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = deployment.site(0).stats();
    (stats.sync_requests, stats.client_auth_failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_libraries_must_prove_the_secret_to_their_agent() {
    common::require_redis();
    let _one = common::exclusive().await;
    let (asked, refused) = attack_the_client_port(PlantedSiteBugs::default()).await;
    assert_eq!(asked, 0, "no request reached a donor");
    assert!(refused >= 4, "{refused} refused handshakes");
    // An agent that skips the handshake relays the bare request.
    let (asked, _) = attack_the_client_port(PlantedSiteBugs {
        no_auth: true,
        ..PlantedSiteBugs::default()
    })
    .await;
    assert!(asked >= 1, "the planted fault must be caught");
}

/// The links' fault layer reaches the sites: a partition set with
/// `Site::chaos` takes the links down both ways and healing brings them
/// back; with a third of messages dropped and a third duplicated, updates
/// still reach every site (resends, idempotent merges).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_links_fault_layer_partitions_drops_and_duplicates() {
    let _one = common::exclusive().await;
    let deployment = deployment(PlantedSiteBugs::default()).await;
    let wait = |up: bool| {
        let deployment = &deployment;
        async move {
            let started = Instant::now();
            while (0..2)
                .any(|p| deployment.site(2).link_up(p) != up || deployment.site(p).link_up(2) != up)
            {
                assert!(
                    started.elapsed() < Duration::from_secs(3),
                    "links to site 2 not {}",
                    if up { "up" } else { "down" }
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let cut = roost_net::ChaosSettings {
        partitioned: [site_node(0), site_node(1)].into(),
        ..Default::default()
    };
    deployment.site(2).chaos().set(cut).expect("valid settings");
    wait(false).await;
    deployment
        .site(2)
        .chaos()
        .set(Default::default())
        .expect("valid settings");
    wait(true).await;
    let lossy = roost_net::ChaosSettings {
        drop_probability: 0.33,
        duplicate_probability: 0.33,
        ..Default::default()
    };
    for site in 0..3 {
        deployment
            .site(site)
            .chaos()
            .set(lossy.clone())
            .expect("valid");
    }
    let mut client = deployment.client(1).await.expect("client");
    for _ in 0..5 {
        assert_eq!(
            client.inc(KEY, 10, Flag::StrictLocal).await.expect("inc"),
            Outcome::Ok
        );
    }
    assert!(
        deployment
            .wait_value_everywhere(KEY, HELD as i64 + 50, Duration::from_secs(10))
            .await,
        "{:?}",
        deployment.values(KEY).await
    );
    assert!(deployment.site(1).link_metrics().dropped_chaos > 0);
}
