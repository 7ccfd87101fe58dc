//! Cost of a small root transaction on a hash-indexed relation
//! (`RelationDef::point_access_only`), served on its executor with no
//! hand-off (as a RESP connection is): 64 reactors sharing 100,000 keys;
//! per transaction a get, a get and a put of an existing key, or an insert
//! of a new key and a delete of the previous one (two transactions per
//! iteration). Median over rounds.
//! `cargo run --release -p roost-reactor --example point_cost [-- TXNS ROUNDS [KIND]]`
//! (defaults 200000, 7, all three kinds). Executors do not spin, so that
//! instructions per transaction under callgrind are the difference of two
//! runs of one kind with different TXNS, divided by the difference.

use std::sync::{mpsc, Arc};
use std::time::Instant;

use roost_reactor::{Database, Deployment, ReactorId, RelationDef, Schema};

static HASHED: RelationDef<u64, u64> = RelationDef::new("shard", "kv").point_access_only();
/// With `POINT_COST_ORDERED=1`: the same on a B+-tree (another reactor type).
static ORDERED: RelationDef<u64, u64> = RelationDef::new("ordered_shard", "kv");
static KV: std::sync::OnceLock<&'static RelationDef<u64, u64>> = std::sync::OnceLock::new();

fn kv() -> &'static RelationDef<u64, u64> {
    KV.get().expect("chosen in main")
}
const REACTORS: u64 = 64;
const KEYS: u64 = 100_000;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 33)
}

async fn round(db: &Database, reactors: &[ReactorId], kind: &str, r: usize, txns: u64) -> f64 {
    let start = Instant::now();
    for i in 0..txns {
        let key = mix(i + (r as u64) * txns) % KEYS;
        let reactor = reactors[(key % REACTORS) as usize];
        match kind {
            "get" => {
                db.run(reactor, move |ctx| async move { ctx.get(kv(), &key) })
                    .await
                    .expect("get");
            }
            "get+put" => {
                db.run(reactor, move |ctx| async move {
                    let v = ctx.get(kv(), &key)?.unwrap_or(0);
                    ctx.put(kv(), &key, &(v + 1))
                })
                .await
                .expect("get+put");
            }
            _ => {
                // A fresh key per transaction, deleting the one before:
                // the relation keeps its size, every insert links a key.
                let fresh = KEYS + i + (r as u64) * txns;
                let reactor = reactors[(fresh % REACTORS) as usize];
                let old = fresh - 1;
                let old_reactor = reactors[(old % REACTORS) as usize];
                db.run(
                    reactor,
                    move |ctx| async move { ctx.insert(kv(), &fresh, &1) },
                )
                .await
                .expect("insert");
                if old >= KEYS {
                    db.run(
                        old_reactor,
                        move |ctx| async move { ctx.delete(kv(), &old) },
                    )
                    .await
                    .expect("delete");
                }
            }
        }
    }
    start.elapsed().as_nanos() as f64 / txns as f64
}

fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let (txns, rounds) = (arg(1, 200_000), arg(2, 7) as usize);
    let kinds: Vec<&'static str> = match std::env::args().nth(3) {
        Some(kind) => vec![["get", "get+put", "insert+delete"]
            .into_iter()
            .find(|k| *k == kind)
            .expect("KIND is get, get+put or insert+delete")],
        None => vec!["get", "get+put", "insert+delete"],
    };
    let lines = kinds.len();
    let ordered = std::env::var("POINT_COST_ORDERED").is_ok_and(|v| v == "1");
    let (reactor_type, relation) = if ordered {
        ("ordered_shard", &ORDERED)
    } else {
        ("shard", &HASHED)
    };
    assert!(KV.set(relation).is_ok(), "chosen once");
    let schema = Schema::new()
        .reactor_type(reactor_type, &[relation])
        .expect("schema");
    let deployment = Deployment::from_toml(
        "spin_before_park_us = 0\nspin_while_active_us = 0\n[[containers]]\nname = \"main\"",
    )
    .expect("deployment");
    let db = Arc::new(Database::new(schema, deployment).expect("database"));
    let reactors: Vec<ReactorId> = (0..REACTORS)
        .map(|i| {
            db.create_reactor(reactor_type, &format!("shard-{i}"))
                .unwrap()
        })
        .collect();
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(1000) {
        for &reactor in &reactors {
            let keys: Vec<u64> = chunk
                .iter()
                .copied()
                .filter(|k| reactors[(k % REACTORS) as usize] == reactor)
                .collect();
            db.run_blocking(reactor, move |ctx| {
                let keys = keys.clone();
                async move {
                    for k in keys {
                        ctx.put(kv(), &k, &k)?;
                    }
                    Ok(())
                }
            })
            .expect("load");
        }
    }
    // Read every key once: the hash index finishes the resizes the load
    // began (they are incremental) before anything is measured.
    for (i, &reactor) in reactors.iter().enumerate() {
        db.run_blocking(reactor, move |ctx| async move {
            for k in (i as u64..KEYS).step_by(REACTORS as usize) {
                ctx.get(kv(), &k)?;
            }
            Ok(())
        })
        .expect("warm-up");
    }
    let (tx, rx) = mpsc::channel();
    let task_db = Arc::clone(&db);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime
        .block_on(db.run_on_executor(0, move || {
            roost_exec::spawn(async move {
                for kind in kinds {
                    let mut ns = Vec::new();
                    for r in 0..rounds {
                        ns.push(round(&task_db, &reactors, kind, r, txns).await);
                    }
                    ns.sort_by(f64::total_cmp);
                    tx.send(format!(
                        "{kind:>14}: median {:6.0} ns per iteration (min {:.0}, max {:.0}) over {rounds} rounds of {txns}",
                        ns[ns.len() / 2],
                        ns[0],
                        ns[ns.len() - 1]
                    ))
                    .unwrap();
                }
            })
        }))
        .expect("executor");
    for line in rx.iter().take(lines) {
        println!("{line}");
    }
    // No teardown: its frees would blur instruction counts of the runs.
    std::process::exit(0);
}
