//! A site of several nodes (a Roost cluster whose keyspace replicates the
//! site's rows): every node runs the site's links over the same rows, on
//! its own address. Either node serves the site's counters and reads what
//! the other wrote; the other sites reach the site through whichever of its
//! nodes is up, so a site that loses a node still donates and merges.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roost_escrow::peer::{link_of, member_node, site_node, MAX_SITE_MEMBERS};
use roost_escrow::roost_store::RowFuture;
use roost_escrow::site::PlantedSiteBugs;
use roost_escrow::{
    Bound, EscrowCounters, Flag, Outcome, ReplicaRow, ReplicaRows, Site, SiteConfig,
};
use roost_net::ClusterSecret;
use tokio::net::TcpListener;

/// A site's rows, shared by its nodes (what the cluster's keyspace is).
#[derive(Default)]
struct SharedRows {
    rows: Mutex<HashMap<String, ReplicaRow>>,
}

impl ReplicaRows for SharedRows {
    fn load(&self, key: &str) -> RowFuture<'_, Result<Option<ReplicaRow>, String>> {
        let row = self.rows.lock().unwrap().get(key).cloned();
        Box::pin(async move { Ok(row) })
    }

    fn cas(
        &self,
        key: &str,
        expected: Option<&str>,
        row: ReplicaRow,
    ) -> RowFuture<'_, Result<bool, String>> {
        let mut rows = self.rows.lock().unwrap();
        let done = if rows.get(key).map(|r| r.token.as_str()) == expected {
            rows.insert(key.to_owned(), row);
            true
        } else {
            false
        };
        Box::pin(async move { Ok(done) })
    }

    fn keys(&self) -> RowFuture<'_, Result<Vec<String>, String>> {
        let keys = self.rows.lock().unwrap().keys().cloned().collect();
        Box::pin(async move { Ok(keys) })
    }
}

async fn bind() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

fn config(
    site: usize,
    member: usize,
    members: usize,
    peers: &[Vec<SocketAddr>],
    secret: &ClusterSecret,
) -> SiteConfig {
    planted_config(
        site,
        member,
        members,
        peers,
        secret,
        PlantedSiteBugs::default(),
    )
}

fn planted_config(
    site: usize,
    member: usize,
    members: usize,
    peers: &[Vec<SocketAddr>],
    secret: &ClusterSecret,
    planted: PlantedSiteBugs,
) -> SiteConfig {
    SiteConfig {
        site,
        sites: peers.len(),
        redis_url: String::new(),
        peers: peers.to_vec(),
        member,
        members,
        timing: common::fast_timing(),
        policy: common::fast_policy(),
        secret: secret.clone(),
        client_listen: None,
        planted,
    }
}

/// Retries `dec` with GLOBAL until it is `Ok` (a transfer may first go to a
/// node not yet known to be down, and time out).
async fn dec_until_ok(client: &mut impl EscrowCounters, key: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let outcome = client.dec(key, n, Flag::Global).await;
        if matches!(outcome, Ok(Outcome::Ok)) {
            return;
        }
        assert!(Instant::now() < deadline, "dec {n}: {outcome:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn read_until(client: &mut impl EscrowCounters, key: &str, value: i64, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let read = client.read(key).await;
        if matches!(read, Ok(v) if v == value) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{who} reads {read:?}, not {value}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn link_ids_name_a_site_and_its_node() {
    assert_eq!(site_node(5), member_node(5, 0));
    assert_eq!(site_node(5).0, 5, "a site of one node keeps id = site");
    for (site, member) in [(0, 0), (3, 1), (1023, MAX_SITE_MEMBERS - 1)] {
        assert_eq!(link_of(member_node(site, member)), Some((site, member)));
    }
    assert_eq!(link_of(roost_escrow::peer::client_node(0)), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_of_two_nodes_serves_from_either_and_survives_losing_one() {
    let secret = ClusterSecret::random();
    let (la, a_addr) = bind().await;
    let (lb, b_addr) = bind().await;
    let (lc, c_addr) = bind().await;
    let peers = vec![vec![a_addr, b_addr], vec![c_addr]];
    let rows0 = Arc::new(SharedRows::default());
    let site0a = Site::start_over_rows(config(0, 0, 2, &peers, &secret), la, rows0.clone())
        .await
        .unwrap();
    let site0b = Site::start_over_rows(config(0, 1, 2, &peers, &secret), lb, rows0.clone())
        .await
        .unwrap();
    let site1 = Site::start_over_rows(
        config(1, 0, 1, &peers, &secret),
        lc,
        Arc::new(SharedRows::default()),
    )
    .await
    .unwrap();
    let mut a = site0a.server_client().unwrap();
    let mut b = site0b.server_client().unwrap();
    let mut c = site1.server_client().unwrap();

    a.create("stock", Bound::Lower, 0).await.unwrap();
    assert_eq!(
        a.inc("stock", 100, Flag::StrictLocal).await.unwrap(),
        Outcome::Ok
    );
    // Node b reads what node a wrote (its engine reloads the shared row),
    // and writes on top of it.
    assert_eq!(b.read("stock").await.unwrap(), 100);
    assert_eq!(
        b.dec("stock", 10, Flag::StrictLocal).await.unwrap(),
        Outcome::Ok
    );
    assert_eq!(
        a.read("stock").await.unwrap(),
        90,
        "node a reads node b's write"
    );

    // Site 1 learns the counter and takes rights from site 0, through
    // whichever of its nodes is up.
    read_until(&mut c, "stock", 90, "site 1").await;
    dec_until_ok(&mut c, "stock", 20).await;
    read_until(&mut a, "stock", 70, "site 0's node a").await;

    // Site 0 loses node a: site 1 still gets rights (from node b) and its
    // decrements still reach site 0.
    drop(a);
    drop(site0a);
    dec_until_ok(&mut c, "stock", 30).await;
    read_until(&mut b, "stock", 40, "site 0's node b").await;
    read_until(&mut c, "stock", 40, "site 1").await;
    // Every right is accounted for: what is left can still be spent, all
    // of it, and not a unit more.
    dec_until_ok(&mut b, "stock", 40).await;
    assert_eq!(
        c.dec("stock", 1, Flag::Global).await.unwrap(),
        Outcome::Fail,
        "the bound holds"
    );
    read_until(&mut c, "stock", 0, "site 1").await;
}

/// The read above catches nodes that trust their cache: with the planted
/// bug, node a answers the value it wrote itself, not node b's write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_stale_shared_rows_read_a_stale_value() {
    let secret = ClusterSecret::random();
    let (la, a_addr) = bind().await;
    let (lb, b_addr) = bind().await;
    let (_lc, c_addr) = bind().await;
    let peers = vec![vec![a_addr, b_addr], vec![c_addr]];
    let rows = Arc::new(SharedRows::default());
    let planted = PlantedSiteBugs {
        stale_shared_rows: true,
        ..PlantedSiteBugs::default()
    };
    let site0a = Site::start_over_rows(
        planted_config(0, 0, 2, &peers, &secret, planted),
        la,
        rows.clone(),
    )
    .await
    .unwrap();
    let site0b = Site::start_over_rows(planted_config(0, 1, 2, &peers, &secret, planted), lb, rows)
        .await
        .unwrap();
    let mut a = site0a.server_client().unwrap();
    let mut b = site0b.server_client().unwrap();
    a.create("stock", Bound::Lower, 0).await.unwrap();
    assert_eq!(
        a.inc("stock", 100, Flag::StrictLocal).await.unwrap(),
        Outcome::Ok
    );
    assert_eq!(
        b.dec("stock", 10, Flag::StrictLocal).await.unwrap(),
        Outcome::Ok
    );
    assert_eq!(
        a.read("stock").await.unwrap(),
        100,
        "with the planted bug node a reads its stale cache"
    );
}
