//! Reactor transactions under concurrency, run under two deployments of the
//! same code: shared-everything (one container) and shared-nothing
//! (warehouses in their own containers).

use std::sync::Arc;

use roost_reactor::{
    Database, Deployment, ReactorCtx, ReactorError, ReactorId, RelationDef, Schema, TxError,
};

static STOCK: RelationDef<u32, i64> = RelationDef::new("warehouse", "stock");
static SOLD: RelationDef<u32, i64> = RelationDef::new("customer", "sold");
static NOTES: RelationDef<u32, String> = RelationDef::new("customer", "notes");
static COUNT: RelationDef<u32, u64> = RelationDef::new("warehouse", "count");
/// Hash-indexed: every warehouse move also extracts these by partition.
static HASHED_COUNT: RelationDef<u32, u64> =
    RelationDef::new("warehouse", "hashed_count").point_access_only();
static ORDERS: RelationDef<u64, u64> = RelationDef::new("warehouse", "orders").point_access_only();

const WAREHOUSES: u32 = 4;
const ITEMS: u32 = 3;
const INITIAL_STOCK: i64 = 40;

fn schema() -> Schema {
    Schema::new()
        .reactor_type("warehouse", &[&STOCK, &COUNT, &HASHED_COUNT, &ORDERS])
        .unwrap()
        .reactor_type("customer", &[&SOLD, &NOTES])
        .unwrap()
}

fn shared_everything() -> Deployment {
    Deployment::shared_everything(2)
}

fn shared_nothing() -> Deployment {
    Deployment::from_toml(
        r#"
        router = "affinity"
        # Explicit spin budgets: the suite must pass with them as with the
        # defaults.
        spin_before_park_us = 20
        spin_while_active_us = 500
        [[containers]]
        name = "customers"
        executors = 2
        [[containers]]
        name = "w0"
        [[containers]]
        name = "w1"
        [placement]
        default = "customers"
        by_hash = { warehouse = ["w0", "w1"] }
        "#,
    )
    .unwrap()
}

struct Shop {
    db: Arc<Database>,
    warehouses: Vec<ReactorId>,
    customers: Vec<ReactorId>,
}

fn shop(deployment: Deployment) -> Shop {
    let db = Arc::new(Database::new(schema(), deployment).unwrap());
    let warehouses: Vec<_> = (0..WAREHOUSES)
        .map(|w| db.create_reactor("warehouse", &format!("w{w}")).unwrap())
        .collect();
    let customers: Vec<_> = (0..4)
        .map(|c| db.create_reactor("customer", &format!("c{c}")).unwrap())
        .collect();
    for &w in &warehouses {
        db.run_blocking(w, |ctx| async move {
            for item in 0..ITEMS {
                ctx.insert(&STOCK, &item, &INITIAL_STOCK)?;
            }
            Ok(())
        })
        .unwrap();
    }
    Shop {
        db,
        warehouses,
        customers,
    }
}

/// The abort of a checkout that found a warehouse without an item's row:
/// every warehouse holds every item, so only a half-moved one could.
const MISSING_ROW: &str = "no stock row";

/// Takes `qty` of `item` from the warehouse, or aborts the whole transaction.
async fn take(ctx: ReactorCtx, item: u32, qty: i64) -> Result<i64, ReactorError> {
    let Some(stock) = ctx.get(&STOCK, &item)? else {
        return Err(ReactorError::user_abort(format!(
            "item {item}: {MISSING_ROW}"
        )));
    };
    if stock < qty {
        return Err(ReactorError::user_abort(format!(
            "item {item}: {stock} left, {qty} wanted"
        )));
    }
    ctx.put(&STOCK, &item, &(stock - qty))?;
    Ok(qty)
}

/// Checkout on a customer: take one item from every warehouse in parallel,
/// record what was sold.
async fn checkout(
    ctx: ReactorCtx,
    warehouses: Arc<Vec<ReactorId>>,
    item: u32,
    qty: i64,
) -> Result<(), ReactorError> {
    let calls: Vec<_> = warehouses
        .iter()
        .map(|&w| ctx.call(w, move |c| take(c, item, qty)))
        .collect();
    let mut total = 0;
    for call in calls {
        total += call.await?;
    }
    let sold = ctx.get(&SOLD, &item)?.unwrap_or(0);
    ctx.put(&SOLD, &item, &(sold + total))
}

fn stock_and_sales(shop: &Shop) -> (Vec<i64>, i64) {
    let mut stock = Vec::new();
    for &w in &shop.warehouses {
        for item in 0..ITEMS {
            stock.push(
                shop.db
                    .run_blocking(
                        w,
                        move |ctx| async move { Ok(ctx.get(&STOCK, &item)?.unwrap()) },
                    )
                    .unwrap(),
            );
        }
    }
    let mut sold = 0;
    for &c in &shop.customers {
        sold += shop
            .db
            .run_blocking(c, |ctx| async move {
                let rows = ctx.scan(&SOLD, .., roost_reactor::ScanDirection::Forward, 100)?;
                Ok(rows.iter().map(|(_, v)| v).sum::<i64>())
            })
            .unwrap();
    }
    (stock, sold)
}

fn concurrent_checkouts_conserve_stock(deployment: Deployment) {
    let shop = shop(deployment);
    let warehouses = Arc::new(shop.warehouses.clone());
    std::thread::scope(|s| {
        for t in 0..4usize {
            let (db, customer, warehouses) = (
                Arc::clone(&shop.db),
                shop.customers[t],
                Arc::clone(&warehouses),
            );
            s.spawn(move || {
                let mut aborted = 0;
                for i in 0..60u32 {
                    let (item, qty) = (i % ITEMS, 1 + i64::from(i % 3));
                    let w = Arc::clone(&warehouses);
                    match db.run_blocking(customer, move |ctx| {
                        checkout(ctx, Arc::clone(&w), item, qty)
                    }) {
                        Ok(()) => {}
                        Err(ReactorError::Tx(TxError::UserAbort { .. })) => aborted += 1,
                        Err(e) => panic!("unexpected error {e}"),
                    }
                }
                assert!(aborted > 0, "stock runs out, so some checkouts must abort");
            });
        }
    });
    let (stock, sold) = stock_and_sales(&shop);
    assert!(
        stock.iter().all(|&s| s >= 0),
        "stock went negative: {stock:?}"
    );
    let remaining: i64 = stock.iter().sum();
    let initial = i64::from(WAREHOUSES * ITEMS) * INITIAL_STOCK;
    assert_eq!(
        remaining + sold,
        initial,
        "sales not conserved: {remaining} left + {sold} sold"
    );
}

fn nested_abort_aborts_everything(deployment: Deployment) {
    let shop = shop(deployment);
    let (w0, w1) = (shop.warehouses[0], shop.warehouses[1]);
    let err = shop
        .db
        .run_blocking(shop.customers[0], move |ctx| async move {
            ctx.put(&SOLD, &0, &1000)?;
            let first = ctx.call(w0, |c| take(c, 0, 1));
            // A grandchild two levels down aborts; nobody awaits its parent.
            let _ignored = ctx.call(w1, move |c| async move {
                c.call(w0, |g| take(g, 1, 1_000_000)).await
            });
            first.await?;
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(err, ReactorError::Tx(TxError::UserAbort { .. })),
        "got {err}"
    );
    let (stock, sold) = stock_and_sales(&shop);
    assert_eq!(sold, 0, "the root's own write was rolled back");
    assert!(
        stock.iter().all(|&s| s == INITIAL_STOCK),
        "a child's write survived the abort: {stock:?}"
    );
}

fn unawaited_calls_finish_before_commit(deployment: Deployment) {
    let shop = shop(deployment);
    let warehouses = shop.warehouses.clone();
    shop.db
        .run_blocking(shop.customers[1], move |ctx| {
            let warehouses = warehouses.clone();
            async move {
                for &w in &warehouses {
                    drop(ctx.call(w, |c| async move {
                        tokio::task::yield_now().await;
                        take(c, 2, 5).await
                    }));
                }
                // Same-container call, never awaited either.
                let me = ctx.reactor();
                drop(ctx.call(me, |c| async move {
                    c.put(&NOTES, &7, &"written by an un-awaited call".to_string())
                }));
                Ok(())
            }
        })
        .unwrap();
    let (stock, _) = stock_and_sales(&shop);
    for w in 0..WAREHOUSES as usize {
        assert_eq!(
            stock[w * ITEMS as usize + 2],
            INITIAL_STOCK - 5,
            "un-awaited call {w} did not commit"
        );
    }
    let note = shop
        .db
        .run_blocking(shop.customers[1], |ctx| async move { ctx.get(&NOTES, &7) })
        .unwrap();
    assert_eq!(note.as_deref(), Some("written by an un-awaited call"));
}

fn bad_requests_are_errors(deployment: Deployment) {
    let shop = shop(deployment);
    // A customer procedure touching a warehouse relation directly.
    let err = shop
        .db
        .run_blocking(shop.customers[0], |ctx| async move { ctx.get(&STOCK, &0) })
        .unwrap_err();
    assert!(
        matches!(err, ReactorError::WrongReactorType { .. }),
        "got {err}"
    );
    assert!(shop.db.reactor("nobody").is_err());
    assert!(
        shop.db.create_reactor("warehouse", "w0").is_err(),
        "duplicate name"
    );
    assert!(
        shop.db.create_reactor("spaceship", "x").is_err(),
        "unknown type"
    );
}

macro_rules! suite {
    ($($deployment:ident),*) => {$(
        mod $deployment {
            #[test]
            fn concurrent_checkouts_conserve_stock() {
                super::concurrent_checkouts_conserve_stock(super::$deployment());
            }
            #[test]
            fn nested_abort_aborts_everything() {
                super::nested_abort_aborts_everything(super::$deployment());
            }
            #[test]
            fn unawaited_calls_finish_before_commit() {
                super::unawaited_calls_finish_before_commit(super::$deployment());
            }
            #[test]
            fn bad_requests_are_errors() {
                super::bad_requests_are_errors(super::$deployment());
            }
        }
    )*};
}

suite!(shared_everything, shared_nothing);

#[test]
fn shared_nothing_places_warehouses_apart_from_customers() {
    let shop = shop(shared_nothing());
    let mut containers: Vec<&str> = shop
        .warehouses
        .iter()
        .map(|&w| shop.db.container_of(w).unwrap())
        .collect();
    containers.sort_unstable();
    containers.dedup();
    assert_eq!(
        containers,
        ["w0", "w1"],
        "warehouses hash over both warehouse containers"
    );
    assert!(shop
        .customers
        .iter()
        .all(|&c| shop.db.container_of(c).unwrap() == "customers"));
}

/// Reactors move between containers while checkouts run against them: every
/// move commits, no checkout sees a half-moved warehouse, and stock and sales
/// are conserved.
#[test]
fn reactors_move_under_concurrent_load() {
    let shop = shop(shared_nothing());
    let warehouses = Arc::new(shop.warehouses.clone());
    let moving = shop.warehouses[0];
    let destinations = ["w0", "w1", "customers"];
    std::thread::scope(|s| {
        for t in 0..3usize {
            let (db, customer, warehouses) = (
                Arc::clone(&shop.db),
                shop.customers[t],
                Arc::clone(&warehouses),
            );
            s.spawn(move || {
                for i in 0..80u32 {
                    let w = Arc::clone(&warehouses);
                    let (item, qty) = (i % ITEMS, 1);
                    match db.run_blocking(customer, move |ctx| {
                        checkout(ctx, Arc::clone(&w), item, qty)
                    }) {
                        Ok(()) => {}
                        Err(ReactorError::Tx(TxError::UserAbort { reason }))
                            if !reason.contains(MISSING_ROW) => {}
                        Err(e) => panic!("unexpected error {e}"),
                    }
                }
            });
        }
        let db = Arc::clone(&shop.db);
        s.spawn(move || {
            for i in 0..30 {
                let to = destinations[i % destinations.len()];
                db.move_reactor(moving, to).expect("move commits");
                assert_eq!(db.container_of(moving).unwrap(), to);
            }
        });
    });
    let (stock, sold) = stock_and_sales(&shop);
    assert!(
        stock.iter().all(|&s| s >= 0),
        "stock went negative: {stock:?}"
    );
    let initial = i64::from(WAREHOUSES * ITEMS) * INITIAL_STOCK;
    assert_eq!(
        stock.iter().sum::<i64>() + sold,
        initial,
        "sales not conserved across moves"
    );
    assert!(sold > 0);
}

#[test]
fn a_moved_reactor_keeps_its_rows() {
    let shop = shop(shared_nothing());
    let w = shop.warehouses[0];
    let before = shop.db.container_of(w).unwrap().to_owned();
    let to = if before == "w0" { "w1" } else { "w0" };
    shop.db
        .run_blocking(w, |ctx| async move { ctx.put(&STOCK, &9, &123) })
        .unwrap();
    shop.db.move_reactor(w, to).unwrap();
    assert_eq!(shop.db.container_of(w).unwrap(), to);
    let rows = shop
        .db
        .run_blocking(w, |ctx| async move {
            ctx.scan(&STOCK, .., roost_reactor::ScanDirection::Forward, 100)
        })
        .unwrap();
    assert_eq!(rows.len(), ITEMS as usize + 1);
    assert!(rows.contains(&(9, 123)));
    // And back: the old container's moved-away mark is cleared on return.
    shop.db.move_reactor(w, &before).unwrap();
    let stock = shop
        .db
        .run_blocking(w, |ctx| async move { ctx.get(&STOCK, &9) })
        .unwrap();
    assert_eq!(stock, Some(123));
    assert!(shop.db.move_reactor(w, "nowhere").is_err());
}

/// A move extracts a reactor's rows with a range scan, under the same
/// guarantee as every scan (the copied leaves' versions are validated at
/// commit): while the neighbouring reactors' rows, which share the leaves at
/// the edges of the moving reactor's range, are inserted and deleted in
/// bursts (splitting and merging those leaves), every move carries all of
/// the reactor's rows, with their values.
#[test]
fn moves_extract_every_row_while_neighbours_split_and_merge_leaves() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const ROWS: u32 = 300;
    let shop = shop(shared_nothing());
    let moving = shop.warehouses[0];
    shop.db
        .run_blocking(moving, |ctx| async move {
            for item in 100..100 + ROWS {
                ctx.insert(&STOCK, &item, &i64::from(item))?;
            }
            Ok(())
        })
        .unwrap();
    let expected: i64 =
        i64::from(ITEMS) * INITIAL_STOCK + (100..100 + ROWS).map(i64::from).sum::<i64>();
    let rows_and_sum = |db: &Database| {
        db.run_blocking(moving, |ctx| async move {
            let rows = ctx.scan(
                &STOCK,
                ..,
                roost_reactor::ScanDirection::Forward,
                usize::MAX,
            )?;
            Ok((rows.len(), rows.iter().map(|(_, v)| v).sum::<i64>()))
        })
        .unwrap()
    };
    let (stop, bursts) = (AtomicBool::new(false), AtomicU64::new(0));
    std::thread::scope(|s| {
        for (t, &neighbour) in shop.warehouses[1..].iter().enumerate() {
            let (db, stop, bursts) = (Arc::clone(&shop.db), &stop, &bursts);
            s.spawn(move || {
                let mut round = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let base = 10_000 + (round % 8) * 100 + t as u32;
                    db.run_blocking(neighbour, move |ctx| async move {
                        for item in base..base + 64 {
                            ctx.put(&STOCK, &item, &1)?;
                        }
                        Ok(())
                    })
                    .unwrap();
                    db.run_blocking(neighbour, move |ctx| async move {
                        for item in base..base + 64 {
                            ctx.delete(&STOCK, &item)?;
                        }
                        Ok(())
                    })
                    .unwrap();
                    round += 1;
                    bursts.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let (db, stop, bursts) = (Arc::clone(&shop.db), &stop, &bursts);
        s.spawn(move || {
            let destinations = ["w1", "customers", "w0"];
            for i in 0..24 {
                // Let the neighbours split and merge leaves between moves.
                let seen = bursts.load(Ordering::Relaxed);
                let waiting = std::time::Instant::now();
                while bursts.load(Ordering::Relaxed) < seen + 6
                    && waiting.elapsed() < std::time::Duration::from_secs(2)
                {
                    std::thread::yield_now();
                }
                let to = destinations[i % destinations.len()];
                db.move_reactor(moving, to).expect("move commits");
                assert_eq!(
                    rows_and_sum(&db),
                    ((ITEMS + ROWS) as usize, expected),
                    "after move {i} to {to}"
                );
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    assert!(
        bursts.load(Ordering::Relaxed) >= 24 * 6,
        "the neighbours churned between the moves"
    );
}

/// Increments of a row of `count` race with a reactor moving back and
/// forth. Returns how many increments saw the reactor half-moved (its row
/// missing) plus whether any increment was lost.
fn increments_racing_moves(planted_bug: bool, count: &'static RelationDef<u32, u64>) -> u64 {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let shop = shop(shared_nothing());
    if planted_bug {
        shop.db.plant_bug_skip_placement_check();
    }
    let w = shop.warehouses[0];
    shop.db
        .run_blocking(w, move |ctx| async move { ctx.insert(count, &0, &0) })
        .unwrap();
    let (committed, half_moved, stop) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
    // Incrementers stop after this long even if the mover has not finished:
    // with the placement check skipped (planted) nothing holds them back, and
    // on an oversubscribed machine they can starve the long move transaction
    // indefinitely; once they stop, the remaining moves commit at once.
    let started = std::time::Instant::now();
    let incrementing_for = std::time::Duration::from_secs(5);
    std::thread::scope(|s| {
        for _ in 0..3 {
            let (db, committed, half_moved, stop) =
                (Arc::clone(&shop.db), &committed, &half_moved, &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) && started.elapsed() < incrementing_for {
                    let result = db.run_blocking(w, move |ctx| async move {
                        match ctx.get(count, &0)? {
                            Some(n) => ctx.put(count, &0, &(n + 1)),
                            None => Err(ReactorError::user_abort(
                                "the row is missing: the reactor was half-moved",
                            )),
                        }
                    });
                    match result {
                        Ok(()) => committed.fetch_add(1, Ordering::Relaxed),
                        Err(ReactorError::Tx(TxError::UserAbort { .. })) => {
                            half_moved.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(e) => panic!("unexpected error {e}"),
                    };
                }
            });
        }
        let (db, stop) = (Arc::clone(&shop.db), &stop);
        s.spawn(move || {
            for i in 0..300 {
                let to = if i % 2 == 0 { "customers" } else { "w1" };
                // A move can starve behind the incrementers (with the check
                // planted away nothing holds them back) until they stop.
                let mut starved = 0;
                loop {
                    match db.move_reactor(w, to) {
                        Ok(()) => break,
                        Err(ReactorError::Tx(TxError::RetriesExhausted { .. }))
                            if starved < 100 =>
                        {
                            starved += 1;
                        }
                        Err(e) => panic!("move to {to} failed: {e}"),
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    let total = shop
        .db
        .run_blocking(w, move |ctx| async move { ctx.get(count, &0) })
        .unwrap();
    let lost = u64::from(total != Some(committed.load(Ordering::Relaxed)));
    half_moved.load(Ordering::Relaxed) + lost
}

#[test]
fn increments_race_with_moves() {
    for count in [&COUNT, &HASHED_COUNT] {
        assert_eq!(
            increments_racing_moves(false, count),
            0,
            "an increment of `{}` saw a half-moved reactor or was lost",
            count.name()
        );
    }
}

#[test]
fn increments_race_catches_a_skipped_placement_check() {
    for count in [&COUNT, &HASHED_COUNT] {
        let caught = (0..5).any(|_| increments_racing_moves(true, count) > 0);
        assert!(
            caught,
            "the move test of `{}` missed a planted bug",
            count.name()
        );
    }
}

/// Orders are inserted under fresh keys into a hash-indexed relation, and
/// transferred between existing ones, while the reactor moves back and
/// forth: after every move and at the end every committed order is there
/// exactly once with its value (a row left behind would make a later move
/// back into that container fail: installs insert), and the total is
/// conserved.
#[test]
fn hashed_rows_inserted_while_moving_are_neither_lost_nor_duplicated() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Mutex;
    const INITIAL: u64 = 50;
    let shop = shop(shared_nothing());
    let w = shop.warehouses[0];
    shop.db
        .run_blocking(w, |ctx| async move {
            for id in 0..INITIAL {
                ctx.insert(&ORDERS, &id, &10)?;
            }
            Ok(())
        })
        .unwrap();
    let (next_id, stop) = (AtomicU64::new(INITIAL), AtomicBool::new(false));
    let inserted: Mutex<Vec<u64>> = Mutex::new((0..INITIAL).collect());
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (db, next_id, stop, inserted) = (&shop.db, &next_id, &stop, &inserted);
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed)
                    && started.elapsed() < std::time::Duration::from_secs(20)
                {
                    i += 1;
                    if t == 0 && i % 2 == 0 {
                        // Move one unit between two existing orders.
                        let (a, b) = (i % INITIAL, (i * 7 + 3) % INITIAL);
                        db.run_blocking(w, move |ctx| async move {
                            let va = ctx.get(&ORDERS, &a)?.expect("initial order");
                            let vb = ctx.get(&ORDERS, &b)?.expect("initial order");
                            if a != b && va > 0 {
                                ctx.put(&ORDERS, &a, &(va - 1))?;
                                ctx.put(&ORDERS, &b, &(vb + 1))?;
                            }
                            Ok(())
                        })
                        .unwrap();
                        continue;
                    }
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    db.run_blocking(w, move |ctx| async move { ctx.insert(&ORDERS, &id, &1) })
                        .unwrap();
                    inserted.lock().unwrap().push(id);
                }
            });
        }
        let (db, stop, inserted) = (&shop.db, &stop, &inserted);
        s.spawn(move || {
            let destinations = ["customers", "w1", "w0"];
            for i in 0..30 {
                let to = destinations[i % destinations.len()];
                db.move_reactor(w, to).expect("move commits");
                assert_eq!(db.container_of(w).unwrap(), to);
                // Every order committed before the move is there.
                let ids = inserted.lock().unwrap().clone();
                let missing = db
                    .run_blocking(w, move |ctx| {
                        let ids = ids.clone();
                        async move {
                            let mut missing = 0;
                            for id in ids {
                                missing += u64::from(ctx.get(&ORDERS, &id)?.is_none());
                            }
                            Ok(missing)
                        }
                    })
                    .unwrap();
                assert_eq!(missing, 0, "orders lost by move {i} to {to}");
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    let ids = inserted.into_inner().unwrap();
    let added = ids.len() as u64 - INITIAL;
    assert!(added > 0, "orders were inserted while the reactor moved");
    let (present, total) = shop
        .db
        .run_blocking(w, move |ctx| {
            let ids = ids.clone();
            async move {
                let (mut present, mut total) = (0u64, 0u64);
                for id in ids {
                    if let Some(v) = ctx.get(&ORDERS, &id)? {
                        present += 1;
                        total += v;
                    }
                }
                Ok((present, total))
            }
        })
        .unwrap();
    assert_eq!(present, INITIAL + added, "every committed order, once");
    assert_eq!(total, INITIAL * 10 + added, "transfers conserve the total");
    // One more move carries exactly those rows (and the stock rows).
    let listed = shop.db.partition_entries_listed();
    shop.db.move_reactor(w, "w1").unwrap();
    let hashed_rows = shop.db.partition_entries_listed() - listed;
    assert_eq!(
        hashed_rows,
        INITIAL + added,
        "no duplicate or stray hashed row"
    );
}

/// Extracting a reactor for a move visits its own rows, not its relation's:
/// one reactor's 10 hash-indexed rows among 10,000 reactors' 100,000.
#[test]
fn extraction_visits_only_the_moving_reactors_rows() {
    const REACTORS: u32 = 10_000;
    const ROWS: u32 = 10;
    let schema = Schema::new().reactor_type("ledger", &[&POINTS]).unwrap();
    let db = Database::new(schema, shared_nothing_ledgers()).unwrap();
    let ledgers: Vec<ReactorId> = (0..REACTORS)
        .map(|i| db.create_reactor("ledger", &format!("l{i}")).unwrap())
        .collect();
    for &ledger in &ledgers {
        db.run_blocking(ledger, |ctx| async move {
            for k in 0..ROWS {
                ctx.insert(&POINTS, &k, &i64::from(k))?;
            }
            Ok(())
        })
        .unwrap();
    }
    let moving = ledgers[REACTORS as usize / 2];
    let before = db.partition_entries_listed();
    db.move_reactor(moving, "b").unwrap();
    assert_eq!(
        db.partition_entries_listed() - before,
        u64::from(ROWS),
        "the move listed the reactor's own rows and no others"
    );
    let sum = db
        .run_blocking(moving, |ctx| async move {
            let mut sum = 0;
            for k in 0..ROWS {
                sum += ctx.get(&POINTS, &k)?.expect("moved row");
            }
            Ok(sum)
        })
        .unwrap();
    assert_eq!(sum, (0..i64::from(ROWS)).sum::<i64>());
}

static POINTS: RelationDef<u32, i64> = RelationDef::new("ledger", "points").point_access_only();

/// A hash-indexed relation serves point access inside transactions; a scan
/// of it is a clear error; its reactor moves between containers like any
/// other, rows and all.
#[test]
fn point_access_relations_serve_points_refuse_scans_and_move() {
    let schema = Schema::new().reactor_type("ledger", &[&POINTS]).unwrap();
    let db = Database::new(schema, shared_nothing_ledgers()).unwrap();
    let ledger = db.create_reactor("ledger", "l0").unwrap();
    db.run_blocking(ledger, |ctx| async move {
        for k in 0..10u32 {
            ctx.put(&POINTS, &k, &i64::from(k))?;
        }
        ctx.delete(&POINTS, &3)?;
        Ok(())
    })
    .unwrap();
    let sum = |db: &Database| {
        db.run_blocking(ledger, |ctx| async move {
            let mut sum = 0;
            for k in 0..10u32 {
                sum += ctx.get(&POINTS, &k)?.unwrap_or(0);
            }
            Ok(sum)
        })
        .unwrap()
    };
    assert_eq!(sum(&db), 45 - 3);
    let scanned = db.run_blocking(ledger, |ctx| async move {
        ctx.scan(&POINTS, .., roost_reactor::ScanDirection::Forward, 10)
    });
    assert!(
        matches!(
            scanned,
            Err(ReactorError::Tx(TxError::ScanOfHashedRelation { .. }))
        ),
        "{scanned:?}"
    );
    db.move_reactor(ledger, "b").unwrap();
    assert_eq!(db.container_of(ledger).unwrap(), "b");
    assert_eq!(sum(&db), 45 - 3);
    db.move_reactor(ledger, "a").unwrap();
    assert_eq!(sum(&db), 45 - 3);
    let absent = db
        .run_blocking(ledger, |ctx| async move { ctx.get(&POINTS, &3) })
        .unwrap();
    assert_eq!(absent, None, "a deleted row stays deleted across moves");
}

fn shared_nothing_ledgers() -> Deployment {
    Deployment::from_toml(
        r#"
        [[containers]]
        name = "a"
        [[containers]]
        name = "b"
        [placement]
        default = "a"
        "#,
    )
    .unwrap()
}

/// A transaction inserts new rows into a warehouse (a hash-indexed and an
/// ordered relation) and, before it commits, waits while the warehouse
/// moves. The move carries only committed rows, so the transaction's
/// inserts must not commit into the container the warehouse left: it must
/// fail validation (its placement observation changed) and run again there.
/// Returns whether an insert was lost.
fn blind_inserts_waiting_across_a_move(planted_bug: bool) -> bool {
    use std::sync::Mutex;
    let shop = shop(shared_nothing());
    if planted_bug {
        shop.db.plant_bug_skip_placement_check();
    }
    let (w, customer) = (shop.warehouses[0], shop.customers[0]);
    let from = shop.db.container_of(w).unwrap().to_owned();
    let to = if from == "w0" { "w1" } else { "w0" };
    let (inserted_tx, inserted) = std::sync::mpsc::channel::<()>();
    let (go_tx, go) = tokio::sync::oneshot::channel::<()>();
    let go = Arc::new(Mutex::new(Some(go)));
    let inserted_tx = Arc::new(Mutex::new(inserted_tx));
    std::thread::scope(|s| {
        let db = &shop.db;
        let inserter = s.spawn(move || {
            db.run_blocking(customer, move |ctx| {
                let (go, inserted_tx) = (Arc::clone(&go), Arc::clone(&inserted_tx));
                async move {
                    ctx.call(w, |c| async move {
                        c.insert(&ORDERS, &777, &1)?;
                        c.insert(&STOCK, &777, &1)
                    })
                    .await?;
                    // The first attempt waits (uncommitted) for the move.
                    let first = go.lock().unwrap().take();
                    if let Some(go) = first {
                        inserted_tx.lock().unwrap().send(()).unwrap();
                        let _ = go.await;
                    }
                    Ok(())
                }
            })
        });
        inserted.recv().unwrap();
        shop.db.move_reactor(w, to).unwrap();
        go_tx.send(()).unwrap();
        inserter.join().unwrap().unwrap();
    });
    let (order, stock) = shop
        .db
        .run_blocking(w, |ctx| async move {
            Ok((ctx.get(&ORDERS, &777)?, ctx.get(&STOCK, &777)?))
        })
        .unwrap();
    order.is_none() || stock.is_none()
}

#[test]
fn blind_inserts_waiting_across_a_move_are_not_lost() {
    assert!(!blind_inserts_waiting_across_a_move(false));
}

#[test]
fn blind_inserts_waiting_across_a_move_catch_a_skipped_placement_check() {
    assert!(
        blind_inserts_waiting_across_a_move(true),
        "the test missed a planted bug"
    );
}
