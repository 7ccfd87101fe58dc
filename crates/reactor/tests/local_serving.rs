//! A root transaction submitted by a task of an executor that serves its
//! reactor's container runs there, with no hand-off to another executor (a
//! RESP connection served on an executor pays no thread switch per
//! command); one submitted from elsewhere is routed as before.

use std::sync::{mpsc, Arc};
use std::thread::ThreadId;
use std::time::Duration;

use roost_reactor::{Database, Deployment, RelationDef, Schema};

static VALUE: RelationDef<u32, u64> = RelationDef::new("cell", "value");

#[test]
fn a_transaction_submitted_on_its_executor_runs_there() {
    let schema = Schema::new().reactor_type("cell", &[&VALUE]).unwrap();
    let db = Arc::new(Database::new(schema, Deployment::shared_everything(2)).unwrap());
    let reactor = db.create_reactor("cell", "c").unwrap();
    assert_eq!(db.executor_count(), 2);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel::<(ThreadId, Vec<ThreadId>)>();
    for executor in 0..db.executor_count() {
        let (task_db, tx) = (Arc::clone(&db), tx.clone());
        runtime
            .block_on(db.run_on_executor(executor, move || {
                roost_exec::spawn(async move {
                    let here = std::thread::current().id();
                    let mut ran_on = Vec::new();
                    for _ in 0..50 {
                        let id = task_db
                            .run(reactor, |ctx| async move {
                                let n = ctx.get(&VALUE, &0)?.unwrap_or(0);
                                ctx.put(&VALUE, &0, &(n + 1))?;
                                Ok(std::thread::current().id())
                            })
                            .await
                            .unwrap();
                        ran_on.push(id);
                    }
                    tx.send((here, ran_on)).unwrap();
                })
            }))
            .unwrap();
    }
    let mut threads = Vec::new();
    for _ in 0..2 {
        let (here, ran_on) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(
            ran_on.iter().all(|t| *t == here),
            "every transaction ran on the submitting executor's thread"
        );
        threads.push(here);
    }
    assert_ne!(threads[0], threads[1], "one task per executor");
    // From outside the executors, round-robin routing spreads them.
    let outside: std::collections::HashSet<ThreadId> = (0..8)
        .map(|_| {
            db.run_blocking(
                reactor,
                |_ctx| async move { Ok(std::thread::current().id()) },
            )
            .unwrap()
        })
        .collect();
    assert_eq!(outside.len(), 2, "routed over both executors");
    let total = db
        .run_blocking(reactor, |ctx| async move {
            Ok(ctx.get(&VALUE, &0)?.unwrap_or(0))
        })
        .unwrap();
    assert_eq!(total, 100, "every increment committed once");
}
