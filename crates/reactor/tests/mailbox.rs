//! The executors' mailboxes are bounded (`Deployment::mailbox_capacity`):
//! a full one makes submitters wait (async ones await, blocking ones
//! block), never holds more than its capacity, and loses nothing; calls
//! between executors whose mailboxes are full still finish.

use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roost_reactor::{Database, Deployment, DeploymentError, ReactorId, RelationDef, Schema};

static VALUE: RelationDef<u32, u64> = RelationDef::new("cell", "value");

fn schema() -> Schema {
    Schema::new().reactor_type("cell", &[&VALUE]).unwrap()
}

fn deployment(text: &str) -> Deployment {
    Deployment::from_toml(text).unwrap()
}

/// Adds one to the reactor's counter.
async fn increment(db: &Database, reactor: ReactorId) -> u64 {
    db.run(reactor, |ctx| async move {
        let n = ctx.get(&VALUE, &0)?.unwrap_or(0) + 1;
        ctx.put(&VALUE, &0, &n)?;
        Ok(n)
    })
    .await
    .expect("the increment commits")
}

fn value(db: &Database, reactor: ReactorId) -> u64 {
    db.run_blocking(reactor, |ctx| async move {
        Ok(ctx.get(&VALUE, &0)?.unwrap_or(0))
    })
    .unwrap()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_full_mailbox_makes_submitters_wait_and_loses_nothing() {
    const CAPACITY: usize = 4;
    const ASYNC_SUBMITTERS: usize = 8;
    const BLOCKING_SUBMITTERS: usize = 2;
    let db = Arc::new(
        Database::new(
            schema(),
            deployment(&format!(
                "mailbox_capacity = {CAPACITY}\n[[containers]]\nname = \"main\"\nexecutors = 1\n"
            )),
        )
        .unwrap(),
    );
    let cell = db.create_reactor("cell", "c").unwrap();

    // Hold the only executor: a transaction that blocks its thread until
    // told to go on, so nothing leaves the mailbox meanwhile.
    let (entered_tx, entered) = std_mpsc::channel::<()>();
    let (go, go_rx) = std_mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(go_rx));
    let blocker = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            db.run_blocking(cell, move |_ctx| {
                let (entered_tx, go_rx) = (entered_tx.clone(), Arc::clone(&go_rx));
                async move {
                    entered_tx.send(()).unwrap();
                    go_rx.lock().unwrap().recv().unwrap();
                    Ok(())
                }
            })
        })
    };
    entered.recv().unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..ASYNC_SUBMITTERS)
        .map(|_| {
            let db = Arc::clone(&db);
            runtime.spawn(async move { increment(&db, cell).await })
        })
        .collect();
    let blocking: Vec<_> = (0..BLOCKING_SUBMITTERS)
        .map(|_| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                db.run_blocking(cell, |ctx| async move {
                    let n = ctx.get(&VALUE, &0)?.unwrap_or(0) + 1;
                    ctx.put(&VALUE, &0, &n)?;
                    Ok(n)
                })
                .unwrap()
            })
        })
        .collect();

    // The mailbox fills to its capacity and no further: the other
    // submitters wait outside it.
    wait_until("the mailbox to fill", || {
        db.mailbox_lengths()[0] >= CAPACITY
    });
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        db.mailbox_lengths(),
        vec![CAPACITY],
        "the mailbox holds more than its capacity"
    );
    assert!(
        tasks.iter().all(|t| !t.is_finished()) && blocking.iter().all(|t| !t.is_finished()),
        "a transaction ran while the executor was held"
    );

    // Let go: every submitter, waiting or queued, gets its turn.
    go.send(()).unwrap();
    blocker.join().unwrap().unwrap();
    let mut results: Vec<u64> = tasks
        .into_iter()
        .map(|t| runtime.block_on(t).unwrap())
        .collect();
    results.extend(blocking.into_iter().map(|t| t.join().unwrap()));
    results.sort_unstable();
    let total = (ASYNC_SUBMITTERS + BLOCKING_SUBMITTERS) as u64;
    assert_eq!(results, (1..=total).collect::<Vec<_>>());
    assert_eq!(value(&db, cell), total);
    assert_eq!(db.mailbox_lengths(), vec![0]);
}

/// Holds the executor serving `reactor` (blocks its thread) until the
/// returned sender is used or dropped.
fn hold(
    db: &Arc<Database>,
    reactor: ReactorId,
) -> (std_mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (entered_tx, entered) = std_mpsc::channel::<()>();
    let (go, go_rx) = std_mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(go_rx));
    let db = Arc::clone(db);
    let holder = std::thread::spawn(move || {
        db.run_blocking(reactor, move |_ctx| {
            let (entered_tx, go_rx) = (entered_tx.clone(), Arc::clone(&go_rx));
            async move {
                let _ = entered_tx.send(());
                let _ = go_rx.lock().unwrap().recv();
                Ok(())
            }
        })
        .unwrap()
    });
    entered.recv().unwrap();
    (go, holder)
}

#[test]
fn a_call_into_a_full_mailbox_waits_without_blocking_its_executor() {
    // Containers a and b, one executor each (0 and 1), mailboxes of 2.
    let db = Arc::new(
        Database::new(
            schema(),
            deployment(
                r#"
                mailbox_capacity = 2
                [[containers]]
                name = "a"
                [[containers]]
                name = "b"
                [placement]
                by_name = { "left" = "a", "right" = "b" }
                "#,
            ),
        )
        .unwrap(),
    );
    let left = db.create_reactor("cell", "left").unwrap();
    let right = db.create_reactor("cell", "right").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    // b is held: the calls of these transactions on a fill b's mailbox,
    // and the rest find no room.
    let (go, holder) = hold(&db, right);
    const CALLERS: usize = 6;
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let db = Arc::clone(&db);
            runtime.spawn(async move {
                db.run(left, move |ctx| async move {
                    ctx.call(right, |c| async move {
                        let n = c.get(&VALUE, &1)?.unwrap_or(0) + 1;
                        c.put(&VALUE, &1, &n)?;
                        Ok(())
                    })
                    .await
                })
                .await
            })
        })
        .collect();
    wait_until("b's mailbox to fill", || db.mailbox_lengths()[1] >= 2);
    // a still runs transactions of its own: its calls wait in tasks, not
    // on a's thread.
    let own = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), increment(&db, left)).await
    });
    assert_eq!(
        own.ok(),
        Some(1),
        "executor a stopped while its calls waited for b"
    );
    assert_eq!(db.mailbox_lengths()[1], 2, "b's mailbox over its capacity");
    go.send(()).unwrap();
    holder.join().unwrap();
    for caller in callers {
        runtime.block_on(caller).unwrap().unwrap();
    }
    let calls_applied = db
        .run_blocking(
            right,
            |ctx| async move { Ok(ctx.get(&VALUE, &1)?.unwrap_or(0)) },
        )
        .unwrap();
    assert_eq!(calls_applied, CALLERS as u64);
}

#[test]
fn calls_between_executors_with_full_mailboxes_finish() {
    // Every root on one side calls into the other, so both small mailboxes
    // fill with roots and calls at once.
    let db = Arc::new(
        Database::new(
            schema(),
            deployment(
                r#"
                mailbox_capacity = 2
                [[containers]]
                name = "a"
                [[containers]]
                name = "b"
                [placement]
                by_name = { "left" = "a", "right" = "b" }
                "#,
            ),
        )
        .unwrap(),
    );
    let left = db.create_reactor("cell", "left").unwrap();
    let right = db.create_reactor("cell", "right").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    const ROOTS: usize = 200;
    let tasks: Vec<_> = (0..ROOTS)
        .map(|i| {
            let db = Arc::clone(&db);
            let (from, to) = if i % 2 == 0 {
                (left, right)
            } else {
                (right, left)
            };
            runtime.spawn(async move {
                db.run(from, move |ctx| async move {
                    // Several un-awaited calls at once, then their results.
                    let calls: Vec<_> = (0..4)
                        .map(|_| {
                            ctx.call(to, |c| async move {
                                let n = c.get(&VALUE, &1)?.unwrap_or(0) + 1;
                                c.put(&VALUE, &1, &n)?;
                                Ok(())
                            })
                        })
                        .collect();
                    for call in calls {
                        call.await?;
                    }
                    Ok(())
                })
                .await
            })
        })
        .collect();
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            for task in tasks {
                task.await.unwrap().unwrap();
            }
        })
        .await
        .expect("calls between full mailboxes deadlocked");
    });
    let count = |reactor| {
        db.run_blocking(reactor, |ctx| async move {
            Ok(ctx.get(&VALUE, &1)?.unwrap_or(0))
        })
        .unwrap()
    };
    assert_eq!(count(left) + count(right), (ROOTS * 4) as u64);
}

#[test]
fn mailbox_capacity_is_validated() {
    for bad in [0, (1 << 20) + 1] {
        let result = Database::new(
            schema(),
            deployment(&format!(
                "mailbox_capacity = {bad}\n[[containers]]\nname = \"main\"\n"
            )),
        );
        assert_eq!(result.err(), Some(DeploymentError::BadMailbox(bad)));
    }
    let default = deployment("[[containers]]\nname = \"main\"\n");
    assert_eq!(
        default.mailbox_capacity,
        roost_reactor::deployment::DEFAULT_MAILBOX_CAPACITY
    );
}
