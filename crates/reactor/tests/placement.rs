//! Reactors between databases (two in one process, same schema, standing in
//! for two nodes): identity by `ReactorKey`, `export_reactor` on one and
//! `install_reactor` on the other with hash-indexed and ordered relations
//! intact, exports racing transactions, and a `Placement` that acquires a
//! reactor for a transaction that entered it while it lived elsewhere.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use roost_reactor::{
    Acquire, AcquireError, Database, Deployment, DirectoryError, EngineConfig, ExportError,
    ExportedReactor, InstallError, Location, Placement, ReactorError, ReactorKey, RelationDef,
    ScanDirection, Schema,
};

static BALANCE: RelationDef<u32, i64> = RelationDef::new("account", "balance").point_access_only();
static HISTORY: RelationDef<u64, String> = RelationDef::new("account", "history");

fn schema() -> Schema {
    Schema::new()
        .reactor_type("account", &[&BALANCE, &HISTORY])
        .unwrap()
}

fn two_containers() -> Deployment {
    Deployment::from_toml(
        r#"
        [[containers]]
        name = "a"
        [[containers]]
        name = "b"
        [placement]
        by_hash = { account = ["a", "b"] }
        "#,
    )
    .unwrap()
}

fn fill(db: &Database, name: &str) {
    let id = db.reactor(name).unwrap();
    db.run_blocking(id, |ctx| async move {
        for k in 0..20u32 {
            ctx.insert(&BALANCE, &k, &(i64::from(k) * 100))?;
        }
        for at in 0..5u64 {
            ctx.insert(&HISTORY, &at, &format!("entry {at}"))?;
        }
        Ok(())
    })
    .unwrap();
}

/// (sum of balances, balance rows, history in order) as a transaction sees them.
fn contents(db: &Database, name: &str) -> Result<(i64, usize, Vec<String>), ReactorError> {
    let id = db.reactor(name).unwrap();
    db.run_blocking(id, |ctx| async move {
        let (mut sum, mut rows) = (0, 0);
        for k in 0..40u32 {
            if let Some(v) = ctx.get(&BALANCE, &k)? {
                sum += v;
                rows += 1;
            }
        }
        let history = ctx.scan(&HISTORY, .., ScanDirection::Forward, 100)?;
        Ok((sum, rows, history.into_iter().map(|(_, v)| v).collect()))
    })
}

#[test]
fn the_same_name_is_the_same_reactor_on_every_database() {
    let (one, two) = (
        Database::new(schema(), two_containers()).unwrap(),
        Database::new(schema(), Deployment::shared_everything(1)).unwrap(),
    );
    // Different creation orders: the handles differ, the identity does not.
    one.create_reactor("account", "other").unwrap();
    let (a, b) = (
        one.create_reactor("account", "alice").unwrap(),
        two.create_reactor("account", "alice").unwrap(),
    );
    let (ka, kb) = (one.key_of(a).unwrap(), two.key_of(b).unwrap());
    assert_eq!(ka, kb);
    assert_eq!(ka, ReactorKey::new("account", "alice").unwrap());
    assert_eq!(ka.placement_hash(), kb.placement_hash());
    assert_eq!(one.reactor_by_key(&ka).unwrap(), a);
    assert_eq!(two.reactor_by_key(&kb).unwrap(), b);
    assert_eq!(
        one.reactor_by_key(&ReactorKey::new("ledger", "alice").unwrap()),
        Err(DirectoryError::UnknownReactorType("ledger".into()))
    );
    assert!(matches!(
        one.reactor_by_key(&ReactorKey::new("account", "nobody").unwrap()),
        Err(DirectoryError::NoSuchReactor(_))
    ));
}

#[test]
fn an_exported_reactor_installs_intact_in_another_database() {
    let (one, two) = (
        Database::new(schema(), two_containers()).unwrap(),
        Database::new(schema(), Deployment::shared_everything(2)).unwrap(),
    );
    one.create_reactor("account", "alice").unwrap();
    one.create_reactor("account", "bob").unwrap();
    fill(&one, "alice");
    fill(&one, "bob");
    let expected = contents(&one, "alice").unwrap();
    assert_eq!(expected.1, 20);
    let key = ReactorKey::new("account", "alice").unwrap();

    let exported = one.export_reactor(&key).unwrap();
    assert_eq!(exported.key(), &key);
    assert_eq!(exported.version(), 1);
    // Gone from the first: its handle there is remote, and a transaction on
    // it waits for a placement that cannot bring it back (single-node).
    let alice_there = one.reactor("alice").unwrap();
    assert_eq!(one.location(alice_there).unwrap(), Location::Remote);
    assert_eq!(
        contents(&one, "alice"),
        Err(ReactorError::Unavailable {
            reactor: key.clone(),
            cause: AcquireError::Unsupported
        })
    );
    assert!(matches!(
        one.export_reactor(&key),
        Err(ExportError::Directory(DirectoryError::NotLocal(_)))
    ));
    // Its neighbour is untouched.
    assert_eq!(contents(&one, "bob").unwrap(), expected);

    // Shipped as bytes, installed in the second.
    let shipped = ExportedReactor::decode(&exported.encode()).unwrap();
    let alice = two.install_reactor(&shipped).unwrap();
    assert_eq!(two.key_of(alice).unwrap(), key);
    assert_eq!(
        two.location(alice).unwrap(),
        Location::Local { container: 0 }
    );
    assert_eq!(contents(&two, "alice").unwrap(), expected);
    // Transactions there write it like any reactor.
    two.run_blocking(alice, |ctx| async move {
        ctx.put(&BALANCE, &30, &7)?;
        ctx.insert(&HISTORY, &9, &"on two".to_string())
    })
    .unwrap();
    assert!(matches!(
        two.install_reactor(&shipped),
        Err(InstallError::AlreadyLocal(_))
    ));

    // And back, with its new rows; the old export is stale now.
    let back = two.export_reactor(&key).unwrap();
    assert_eq!(back.version(), 2);
    assert_eq!(
        one.install_reactor(&exported),
        Err(InstallError::Stale { have: 1, got: 1 })
    );
    assert_eq!(one.install_reactor(&back).unwrap(), alice_there);
    let (sum, rows, history) = contents(&one, "alice").unwrap();
    assert_eq!((sum, rows), (expected.0 + 7, 21));
    assert_eq!(history.last().map(String::as_str), Some("on two"));
    assert_eq!(history.len(), 6);
}

#[test]
fn malformed_or_foreign_exports_are_refused() {
    let db = Database::new(schema(), two_containers()).unwrap();
    let garbage = ExportedReactor::decode(&[0xFF; 3]);
    assert!(matches!(garbage, Err(InstallError::Malformed(_))));
    // An export from a schema whose account type has another relation.
    static EXTRA: RelationDef<u32, u32> = RelationDef::new("account", "extra");
    let other = Database::new(
        Schema::new().reactor_type("account", &[&EXTRA]).unwrap(),
        Deployment::shared_everything(1),
    )
    .unwrap();
    let id = other.create_reactor("account", "carol").unwrap();
    other
        .run_blocking(id, |ctx| async move { ctx.put(&EXTRA, &1, &1) })
        .unwrap();
    let exported = other.export_reactor(&other.key_of(id).unwrap()).unwrap();
    assert_eq!(
        db.install_reactor(&exported),
        Err(InstallError::UnknownRelation {
            reactor_type: "account".into(),
            relation: "extra".into()
        })
    );
}

/// Increments run on the first database while the reactor is exported to
/// the second: each either committed before the export (and is in the
/// exported rows) or found the reactor gone; none is lost or applied twice.
#[test]
fn an_export_racing_transactions_carries_every_committed_one() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (one, two) = (
        Arc::new(Database::new(schema(), two_containers()).unwrap()),
        Database::new(schema(), Deployment::shared_everything(1)).unwrap(),
    );
    let id = one.create_reactor("account", "counter").unwrap();
    one.run_blocking(id, |ctx| async move { ctx.insert(&BALANCE, &0, &0) })
        .unwrap();
    let (committed, exported) = (AtomicU64::new(0), AtomicBool::new(false));
    let key = one.key_of(id).unwrap();
    let shipped = std::thread::scope(|s| {
        for _ in 0..3 {
            let (one, committed, exported) = (&one, &committed, &exported);
            s.spawn(move || loop {
                let gone = exported.load(Ordering::Acquire);
                match one.run_blocking(id, |ctx| async move {
                    let n = ctx.get(&BALANCE, &0)?.expect("the counter row");
                    ctx.put(&BALANCE, &0, &(n + 1))
                }) {
                    Ok(()) => {
                        assert!(!gone, "committed on a reactor exported before it began");
                        committed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(ReactorError::Unavailable { .. }) => return,
                    Err(e) => panic!("unexpected error {e}"),
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let shipped = one.export_reactor(&key).unwrap();
        exported.store(true, Ordering::Release);
        shipped
    });
    let committed = committed.into_inner();
    assert!(committed > 0, "increments committed before the export");
    let here = two.install_reactor(&shipped).unwrap();
    let count = two
        .run_blocking(here, |ctx| async move { ctx.get(&BALANCE, &0) })
        .unwrap();
    assert_eq!(count, Some(committed as i64));
}

/// A placement for the second of two databases that owns only what it
/// acquired: it acquires a reactor by exporting it from the first and
/// installing it here (what a cluster's ownership layer does over the
/// network).
struct PullPlacement {
    owned: Arc<Mutex<HashSet<ReactorKey>>>,
    from: Arc<Database>,
    here: OnceLock<Weak<Database>>,
}

impl Placement for PullPlacement {
    fn locate(&self, key: &ReactorKey) -> Location {
        if self.owned.lock().unwrap().contains(key) {
            Location::Local { container: 0 }
        } else {
            Location::Remote
        }
    }

    fn acquire(&self, key: &ReactorKey) -> Acquire {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (key, from, owned) = (key.clone(), Arc::clone(&self.from), Arc::clone(&self.owned));
        let here = self.here.get().and_then(Weak::upgrade);
        std::thread::spawn(move || {
            let outcome = (|| {
                let here = here.ok_or(AcquireError::Shutdown)?;
                let exported = from
                    .export_reactor(&key)
                    .map_err(|_| AcquireError::NoOwner)?;
                owned.lock().unwrap().insert(key.clone());
                here.install_reactor(&exported)
                    .map(|_| ())
                    .map_err(|_| AcquireError::NoOwner)
            })();
            let _ = tx.send(outcome);
        });
        Box::pin(async move { rx.await.unwrap_or(Err(AcquireError::Shutdown)) })
    }
}

#[test]
fn a_transaction_on_a_remote_reactor_waits_for_the_placement_to_acquire_it() {
    let from = Arc::new(Database::new(schema(), two_containers()).unwrap());
    from.create_reactor("account", "dave").unwrap();
    fill(&from, "dave");
    let expected = contents(&from, "dave").unwrap();
    let placement = Arc::new(PullPlacement {
        owned: Arc::new(Mutex::new(HashSet::new())),
        from: Arc::clone(&from),
        here: OnceLock::new(),
    });
    let here = Arc::new(
        Database::with_placement(
            schema(),
            Deployment::shared_everything(1),
            EngineConfig::default(),
            Arc::clone(&placement) as Arc<dyn Placement>,
        )
        .unwrap(),
    );
    placement.here.set(Arc::downgrade(&here)).ok().unwrap();
    let key = ReactorKey::new("account", "dave").unwrap();
    // Not placed here, so not created here; but known as remote.
    assert!(matches!(
        here.create_reactor("account", "dave"),
        Err(DirectoryError::NotPlacedHere(_))
    ));
    let dave = here.reactor_by_key(&key).unwrap();
    assert_eq!(here.location(dave).unwrap(), Location::Remote);
    // The transaction's first attempt finds it remote, waits for the
    // acquisition, and runs again with its rows here.
    assert_eq!(contents(&here, "dave").unwrap(), expected);
    assert_eq!(
        here.location(dave).unwrap(),
        Location::Local { container: 0 }
    );
    let there = from.reactor("dave").unwrap();
    assert_eq!(from.location(there).unwrap(), Location::Remote);
    // A call from a local reactor into a remote one acquires it likewise.
    from.create_reactor("account", "erin").unwrap();
    fill(&from, "erin");
    let owner = {
        placement
            .owned
            .lock()
            .unwrap()
            .insert(ReactorKey::new("account", "frank").unwrap());
        here.create_reactor("account", "frank").unwrap()
    };
    let erin = here
        .reactor_by_key(&ReactorKey::new("account", "erin").unwrap())
        .unwrap();
    let seen = here
        .run_blocking(owner, move |ctx| async move {
            ctx.call(erin, |c| async move { c.get(&BALANCE, &19) })
                .await
        })
        .unwrap();
    assert_eq!(seen, Some(1900));
}

/// The transaction waiting for an acquisition holds its executor's only
/// admission permit, and the acquisition installs the reactor with a
/// transaction on that executor: a relocation skips admission, or the two
/// would wait for each other for ever (what the ownership driver hit once
/// every permit was held by transactions waiting for it).
#[test]
fn an_install_is_not_held_back_by_the_transactions_waiting_for_it() {
    let from = Arc::new(Database::new(schema(), two_containers()).unwrap());
    from.create_reactor("account", "gina").unwrap();
    fill(&from, "gina");
    let expected = contents(&from, "gina").unwrap();
    let placement = Arc::new(PullPlacement {
        owned: Arc::new(Mutex::new(HashSet::new())),
        from: Arc::clone(&from),
        here: OnceLock::new(),
    });
    let mut one_at_a_time = Deployment::shared_everything(1);
    one_at_a_time.max_active_transactions = 1;
    let here = Arc::new(
        Database::with_placement(
            schema(),
            one_at_a_time,
            EngineConfig::default(),
            Arc::clone(&placement) as Arc<dyn Placement>,
        )
        .unwrap(),
    );
    placement.here.set(Arc::downgrade(&here)).ok().unwrap();
    let gina = ReactorKey::new("account", "gina").unwrap();
    let gina = here.reactor_by_key(&gina).unwrap();
    assert_eq!(here.location(gina).unwrap(), Location::Remote);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = Arc::clone(&here);
    std::thread::spawn(move || {
        let _ = tx.send(contents(&reader, "gina"));
    });
    let seen = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the acquisition's install waited behind its own waiter");
    assert_eq!(seen.unwrap(), expected);
}

/// `run_blocking` from a task of a multi-thread runtime that spent its
/// cooperative budget: tokio defers the wake-up of a budget-starved poll to
/// the worker's next park, which a blocked worker never reaches, so the
/// database waits outside the budget (the ownership driver blocks so).
#[test]
fn run_blocking_returns_on_a_runtime_worker_whose_budget_is_spent() {
    let db = Arc::new(Database::new(schema(), Deployment::shared_everything(1)).unwrap());
    db.create_reactor("account", "hal").unwrap();
    fill(&db, "hal");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let inner = Arc::clone(&db);
    runtime.spawn(async move {
        let (items, mut queue) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..1_000u32 {
            items.send(i).unwrap();
        }
        // A fresh poll has a budget of 128; each ready receive spends one.
        tokio::task::yield_now().await;
        for _ in 0..128 {
            queue.recv().await;
        }
        let _ = tx.send(contents(&inner, "hal"));
    });
    let seen = rx.recv_timeout(std::time::Duration::from_secs(30));
    if seen.is_err() {
        // Its worker is parked for good: dropping the runtime would wait on it.
        std::mem::forget(runtime);
        panic!("run_blocking never saw its answer");
    }
    assert_eq!(seen.unwrap().unwrap().1, 20);
}

#[test]
fn an_empty_export_creates_a_reactor_and_an_own_export_can_be_reclaimed() {
    let (one, two) = (
        Database::new(schema(), two_containers()).unwrap(),
        Database::new(schema(), two_containers()).unwrap(),
    );
    // Created elsewhere through the install path: no rows, version 1.
    let key = ReactorKey::new("account", "carol").unwrap();
    let empty = ExportedReactor::empty(key.clone());
    assert_eq!(empty.version(), 1);
    let carol = one.install_reactor(&empty).unwrap();
    assert_eq!(contents(&one, "carol").unwrap(), (0, 0, vec![]));
    fill(&one, "carol");
    let expected = contents(&one, "carol").unwrap();

    // Exported for a hand-over that does not happen: install refuses the
    // database's own export as stale, reclaim takes it back, rows intact.
    let exported = one.export_reactor(&key).unwrap();
    assert_eq!(exported.version(), 2);
    assert_eq!(
        one.install_reactor(&exported),
        Err(InstallError::Stale { have: 2, got: 2 })
    );
    assert_eq!(one.reclaim_reactor(&exported).unwrap(), carol);
    assert_eq!(contents(&one, "carol").unwrap(), expected);

    // The reclaim moved the version on: that export can go nowhere it could
    // overwrite newer rows, and the next export is newer than both.
    let again = one.export_reactor(&key).unwrap();
    assert_eq!(again.version(), 4);
    two.install_reactor(&again).unwrap();
    assert_eq!(contents(&two, "carol").unwrap(), expected);
    assert!(matches!(
        one.reclaim_reactor(&exported),
        Err(InstallError::Stale { have: 4, got: 2 })
    ));
}

/// The floor of a hand-over's storage work outside any async runtime: one
/// export and one install per reactor, each a transaction handed to the
/// executor and waited for (`cargo test --release -- --ignored --nocapture
/// export_install_cost`).
#[test]
#[ignore = "a measurement: prints µs per export and per install"]
fn export_install_cost() {
    let (one, two) = (
        Database::new(schema(), Deployment::shared_everything(1)).unwrap(),
        Database::new(schema(), Deployment::shared_everything(1)).unwrap(),
    );
    const N: usize = 5_000;
    for i in 0..N {
        let id = one.create_reactor("account", &format!("r{i}")).unwrap();
        one.run_blocking(id, |ctx| async move { ctx.put(&BALANCE, &1, &1) })
            .unwrap();
    }
    let started = std::time::Instant::now();
    let exports: Vec<ExportedReactor> = (0..N)
        .map(|i| {
            one.export_reactor(&ReactorKey::new("account", &format!("r{i}")).unwrap())
                .unwrap()
        })
        .collect();
    let export_us = started.elapsed().as_secs_f64() * 1e6 / N as f64;
    let started = std::time::Instant::now();
    for exported in &exports {
        two.install_reactor(exported).unwrap();
    }
    let install_us = started.elapsed().as_secs_f64() * 1e6 / N as f64;
    println!("export {export_us:.1} µs, install {install_us:.1} µs per reactor");
    assert!(export_us > 0.0 && install_us > 0.0);
}
