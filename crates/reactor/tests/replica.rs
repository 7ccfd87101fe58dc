//! Replica reactors (Zeus: a reader of an object holds a copy and runs
//! read-only transactions on it locally, never while it is Invalid; writes
//! need ownership), two databases in one process standing in for an owner
//! and a reader: `install_replica` of an owner's `snapshot_reactor`,
//! unreadable until `set_replica_readable`; reads at a readable replica,
//! writes there acquiring the reactor through the placement (failing, or
//! promoting the replica); `apply_to_replica` with the replication hook's
//! captured changes or hand-built ones, deletes included, unknown relations
//! refused, and `apply_to_replicas` over both executors at once; no read
//! ever sees a state that was not marked readable (with a
//! planted bug showing the check can fail); `demote_to_replica` under
//! concurrent writers; `drop_replica`; and replica operations racing a
//! promotion.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use roost_reactor::{
    Acquire, AcquireError, Database, Deployment, DirectoryError, EngineConfig, ExportError,
    ExportedReactor, Holding, InstallError, KeyCodec, Location, Placement, ReactorChanges,
    ReactorError, ReactorId, ReactorKey, RelationDef, ReplicaError, Replication, RowChange,
    ScanDirection, Schema, Sequenced,
};
use tokio::sync::Notify;

/// Hash-indexed (a partition per reactor), as in `replication.rs`.
static BALANCE: RelationDef<u32, i64> = RelationDef::new("doc", "balance").point_access_only();
static HISTORY: RelationDef<u64, String> = RelationDef::new("doc", "history");
/// Two rows that every committed state keeps equal (the torn-read test),
/// or a counter (row 0).
static PAIR: RelationDef<u8, u64> = RelationDef::new("doc", "pair");
/// Another type's relations: one shares a name with a `doc` relation, one
/// is unknown to `doc`.
static LOG_HISTORY: RelationDef<u64, String> = RelationDef::new("log", "history");
static ENTRIES: RelationDef<u64, String> = RelationDef::new("log", "entries");

fn schema() -> Schema {
    Schema::new()
        .reactor_type("doc", &[&BALANCE, &HISTORY, &PAIR])
        .unwrap()
        .reactor_type("log", &[&LOG_HISTORY, &ENTRIES])
        .unwrap()
}

/// Two containers of one executor each: a replica lives in the container
/// the deployment's rules name, and calls between the two are dispatched.
fn deployment() -> Deployment {
    Deployment::from_toml(
        r#"
        [[containers]]
        name = "a"
        [[containers]]
        name = "b"
        [placement]
        by_hash = { doc = ["a", "b"], log = ["a", "b"] }
        "#,
    )
    .unwrap()
}

/// What the test placement does when asked to acquire a reactor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnAcquire {
    Fail(AcquireError),
    /// Makes the replica here this database's own (the reader became the
    /// owner), then answers Ok.
    Promote,
    /// Answers Ok having done nothing.
    Nothing,
}

/// A placement that records every acquisition and, if it replicates,
/// every committed transaction's changes.
struct Scripted {
    deployment: Deployment,
    /// Every reactor is placed here (an owner); else only `local` names
    /// are, and the rest are remote (a reader).
    all_local: bool,
    local: Mutex<HashSet<String>>,
    on_acquire: Mutex<OnAcquire>,
    acquired: Mutex<Vec<ReactorKey>>,
    replicates: bool,
    /// Committed changes by sequence number.
    committed: Mutex<BTreeMap<u64, Vec<ReactorChanges>>>,
    db: OnceLock<Weak<Database>>,
}

impl Scripted {
    fn new(all_local: bool, replicates: bool) -> Arc<Self> {
        Arc::new(Scripted {
            deployment: deployment(),
            all_local,
            local: Mutex::new(HashSet::new()),
            on_acquire: Mutex::new(OnAcquire::Fail(AcquireError::NoOwner)),
            acquired: Mutex::new(Vec::new()),
            replicates,
            committed: Mutex::new(BTreeMap::new()),
            db: OnceLock::new(),
        })
    }

    fn database(self: &Arc<Self>) -> Arc<Database> {
        let placement = Arc::clone(self) as Arc<dyn Placement>;
        let db = Arc::new(
            Database::with_placement(schema(), deployment(), EngineConfig::default(), placement)
                .unwrap(),
        );
        self.db.set(Arc::downgrade(&db)).ok().unwrap();
        db
    }

    fn on_acquire(&self, what: OnAcquire) {
        *self.on_acquire.lock().unwrap() = what;
    }

    fn acquired(&self) -> Vec<ReactorKey> {
        self.acquired.lock().unwrap().clone()
    }

    /// The rows each committed transaction changed in `key`, in number
    /// order, taking every captured commit out of the log.
    fn take_changes(&self, key: &ReactorKey) -> Vec<Vec<RowChange>> {
        let log = std::mem::take(&mut *self.committed.lock().unwrap());
        log.into_values()
            .filter_map(|changes| {
                changes
                    .into_iter()
                    .find(|c| &c.reactor == key)
                    .map(|c| c.rows)
            })
            .collect()
    }
}

impl Placement for Scripted {
    fn locate(&self, key: &ReactorKey) -> Location {
        if self.all_local || self.local.lock().unwrap().contains(key.name()) {
            Location::Local {
                container: self.deployment.place(key.name(), key.reactor_type()),
            }
        } else {
            Location::Remote
        }
    }

    fn acquire(&self, key: &ReactorKey) -> Acquire {
        self.acquired.lock().unwrap().push(key.clone());
        let what = *self.on_acquire.lock().unwrap();
        let outcome = match what {
            OnAcquire::Fail(cause) => Err(cause),
            OnAcquire::Nothing => Ok(()),
            OnAcquire::Promote => match self.db.get().and_then(Weak::upgrade) {
                Some(db) => db.promote_replica(key).map_err(|_| AcquireError::NoOwner),
                None => Err(AcquireError::Shutdown),
            },
        };
        Box::pin(std::future::ready(outcome))
    }

    fn replicates(&self) -> bool {
        self.replicates
    }

    fn sequenced(&self, seq: u64, outcome: Sequenced) -> Option<Replication> {
        if let Sequenced::Committed { changes, .. } = outcome {
            self.committed.lock().unwrap().insert(seq, changes);
        }
        None
    }
}

/// An owner database (every reactor placed there) and a reader database
/// (only what it creates is placed there; everything else is remote).
fn owner_and_reader(
    replicates: bool,
) -> (Arc<Scripted>, Arc<Database>, Arc<Scripted>, Arc<Database>) {
    let (pa, pb) = (Scripted::new(true, replicates), Scripted::new(false, false));
    let (a, b) = (pa.database(), pb.database());
    (pa, a, pb, b)
}

fn key(name: &str) -> ReactorKey {
    ReactorKey::new("doc", name).unwrap()
}

/// Creates `name` on `db` (placed there: `placement` says so first).
fn create(db: &Database, placement: &Scripted, name: &str) -> ReactorId {
    placement.local.lock().unwrap().insert(name.to_owned());
    db.create_reactor("doc", name).unwrap()
}

fn fill(db: &Database, id: ReactorId) {
    db.run_blocking(id, |ctx| async move {
        for k in 0..20u32 {
            ctx.insert(&BALANCE, &k, &(i64::from(k) * 100))?;
        }
        for at in 0..5u64 {
            ctx.insert(&HISTORY, &at, &format!("entry {at}"))?;
        }
        ctx.insert(&PAIR, &0, &7)?;
        ctx.insert(&PAIR, &1, &7)
    })
    .unwrap();
}

/// Every row of a `doc` reactor, as a transaction reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Contents {
    balance: Vec<(u32, i64)>,
    history: Vec<(u64, String)>,
    pair: Vec<(u8, u64)>,
}

async fn read_contents(ctx: roost_reactor::ReactorCtx) -> Result<Contents, ReactorError> {
    let mut balance = Vec::new();
    for k in 0..100u32 {
        if let Some(v) = ctx.get(&BALANCE, &k)? {
            balance.push((k, v));
        }
    }
    Ok(Contents {
        balance,
        history: ctx.scan(&HISTORY, .., ScanDirection::Forward, 1000)?,
        pair: ctx.scan(&PAIR, .., ScanDirection::Forward, 1000)?,
    })
}

fn contents(db: &Database, id: ReactorId) -> Result<Contents, ReactorError> {
    db.run_blocking(id, read_contents)
}

/// The rows of `key` as `db` holds them, in an export's canonical encoding.
fn rows(db: &Database, key: &ReactorKey) -> Vec<u8> {
    db.snapshot_reactor(key).unwrap().rows().to_vec()
}

fn encoded_key<K: KeyCodec>(k: K) -> Vec<u8> {
    let mut out = Vec::new();
    k.encode_into(&mut out);
    out
}

fn pair_change(k: u8, value: Option<u64>) -> RowChange {
    RowChange {
        relation: "pair".into(),
        key: encoded_key(k),
        value: value.map(|v| postcard::to_allocvec(&v).unwrap()),
    }
}

/// Runs `f` on a thread and returns its handle once it has run for
/// `for_at_least` without returning.
fn still_running<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
    for_at_least: Duration,
) -> std::thread::JoinHandle<T> {
    let handle = std::thread::spawn(f);
    std::thread::sleep(for_at_least);
    assert!(!handle.is_finished(), "returned within {for_at_least:?}");
    handle
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "waited for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What a paused reader's thread returns: the committed attempt's read,
/// and how many attempts ran the procedure.
type PausedRead = std::thread::JoinHandle<(Result<Option<u64>, ReactorError>, usize)>;

/// A read-only transaction on `id` whose first attempt reads `PAIR` row 0
/// and then waits for `go`; returns what the committed attempt read and
/// how many attempts ran the procedure.
fn paused_reader(db: &Arc<Database>, id: ReactorId) -> (Arc<Notify>, Arc<AtomicBool>, PausedRead) {
    let (go, entered) = (Arc::new(Notify::new()), Arc::new(AtomicBool::new(false)));
    let attempts = Arc::new(AtomicUsize::new(0));
    let (db, go2, entered2) = (Arc::clone(db), Arc::clone(&go), Arc::clone(&entered));
    let handle = std::thread::spawn(move || {
        let counted = Arc::clone(&attempts);
        let read = db.run_blocking(id, move |ctx| {
            let (go, entered, attempts) = (
                Arc::clone(&go2),
                Arc::clone(&entered2),
                Arc::clone(&counted),
            );
            async move {
                let first = attempts.fetch_add(1, Ordering::SeqCst) == 0;
                let seen = ctx.get(&PAIR, &0)?;
                if first {
                    entered.store(true, Ordering::SeqCst);
                    go.notified().await;
                }
                Ok(seen)
            }
        });
        (read, attempts.load(Ordering::SeqCst))
    });
    (go, entered, handle)
}

#[test]
fn a_replica_is_unreadable_until_marked_then_reads_the_owners_rows() {
    let (pa, a, pb, b) = owner_and_reader(false);
    let k = key("round");
    let owner_id = create(&a, &pa, "round");
    fill(&a, owner_id);
    // A neighbour whose rows must not travel with it.
    let other = create(&a, &pa, "neighbour");
    a.run_blocking(other, |ctx| async move { ctx.put(&PAIR, &9, &9) })
        .unwrap();
    let expected = contents(&a, owner_id).unwrap();
    assert_eq!(expected.balance.len(), 20);

    // A snapshot takes nothing out: the owner keeps its rows, writable.
    let snapshot = a.snapshot_reactor(&k).unwrap();
    assert_eq!(snapshot.key(), &k);
    assert_eq!(a.holding(&k), Ok(Holding::Owned { frozen: false }));
    assert_eq!(contents(&a, owner_id).unwrap(), expected);
    assert_eq!(rows(&a, &k), snapshot.rows(), "snapshots are canonical");

    assert_eq!(b.holding(&k), Ok(Holding::Away));
    let shipped = ExportedReactor::decode(&snapshot.encode()).unwrap();
    let id = b.install_replica(&shipped).unwrap();
    assert_eq!(b.holding(&k), Ok(Holding::Replica { readable: false }));
    assert_eq!(b.key_of(id).unwrap(), k);
    assert_eq!(
        b.location(id).unwrap(),
        Location::Local {
            container: deployment().place("round", "doc")
        }
    );
    assert!(matches!(
        b.install_replica(&shipped),
        Err(InstallError::AlreadyLocal(_))
    ));
    // Not this database's to write: `lives_here` is false for it, true for
    // a reactor the reader owns.
    let mine = create(&b, &pb, "mine");
    let seen = b
        .run_blocking(mine, move |ctx| async move {
            Ok((ctx.lives_here(id), ctx.lives_here(ctx.reactor())))
        })
        .unwrap();
    assert_eq!(seen, (false, true));

    // Unreadable: a read-only transaction does not complete...
    let reader = {
        let b = Arc::clone(&b);
        still_running(move || contents(&b, id), Duration::from_millis(50))
    };
    assert_eq!(b.holding(&k), Ok(Holding::Replica { readable: false }));
    // ...until the replica is marked readable, and then reads its rows.
    b.set_replica_readable(&k, true).unwrap();
    assert_eq!(b.holding(&k), Ok(Holding::Replica { readable: true }));
    assert_eq!(reader.join().unwrap().unwrap(), expected);
    assert_eq!(contents(&b, id).unwrap(), expected);
    assert_eq!(rows(&b, &k), snapshot.rows());
    // The neighbour's rows did not come along, and reading acquired nothing.
    assert!(matches!(
        b.reactor("neighbour"),
        Err(DirectoryError::NoSuchReactor(_))
    ));
    assert!(
        pb.acquired().is_empty(),
        "reads at a replica acquire nothing"
    );

    // Unreadable again: transactions wait again.
    b.set_replica_readable(&k, false).unwrap();
    assert_eq!(b.holding(&k), Ok(Holding::Replica { readable: false }));
    let reader = {
        let b = Arc::clone(&b);
        still_running(move || contents(&b, id), Duration::from_millis(50))
    };
    b.set_replica_readable(&k, true).unwrap();
    assert_eq!(reader.join().unwrap().unwrap(), expected);

    // Marks are for replicas only.
    assert_eq!(
        b.set_replica_readable(&key("mine"), true),
        Err(ReplicaError::NotReplica(key("mine")))
    );
    assert_eq!(
        a.set_replica_readable(&k, true),
        Err(ReplicaError::NotReplica(k.clone()))
    );
    assert!(matches!(
        b.set_replica_readable(&ReactorKey::new("nope", "x").unwrap(), true),
        Err(ReplicaError::Directory(DirectoryError::UnknownReactorType(
            _
        )))
    ));
    // The owner's writes do not reach the replica by themselves.
    a.run_blocking(owner_id, |ctx| async move { ctx.put(&PAIR, &0, &8) })
        .unwrap();
    assert_eq!(contents(&b, id).unwrap(), expected);
}

/// A read-only transaction that entered a readable replica and commits
/// after its mark changed fails validation and runs again; with no change
/// (marking it readable again) it commits at once.
#[test]
fn a_change_of_mark_fails_the_readers_that_entered_before() {
    let (pa, a, _pb, b) = owner_and_reader(false);
    let k = key("marked");
    let owner_id = create(&a, &pa, "marked");
    fill(&a, owner_id);
    b.install_replica(&a.snapshot_reactor(&k).unwrap()).unwrap();
    let id = b.reactor("marked").unwrap();
    b.set_replica_readable(&k, true).unwrap();

    // No change, no move: the reader commits its first attempt.
    let (go, entered, reader) = paused_reader(&b, id);
    wait_until("the reader to enter", || entered.load(Ordering::SeqCst));
    b.set_replica_readable(&k, true).unwrap();
    go.notify_one();
    assert_eq!(reader.join().unwrap(), (Ok(Some(7)), 1));

    // Invalid and valid again while it ran: its first attempt fails.
    let (go, entered, reader) = paused_reader(&b, id);
    wait_until("the reader to enter", || entered.load(Ordering::SeqCst));
    b.set_replica_readable(&k, false).unwrap();
    b.set_replica_readable(&k, true).unwrap();
    go.notify_one();
    assert_eq!(reader.join().unwrap(), (Ok(Some(7)), 2));

    // Invalid when it commits: it fails, and runs again only once valid.
    let (go, entered, reader) = paused_reader(&b, id);
    wait_until("the reader to enter", || entered.load(Ordering::SeqCst));
    b.set_replica_readable(&k, false).unwrap();
    go.notify_one();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !reader.is_finished(),
        "committed a read of an invalid replica"
    );
    b.set_replica_readable(&k, true).unwrap();
    assert_eq!(reader.join().unwrap(), (Ok(Some(7)), 2));
}

/// One write of each kind, after a read.
fn write(db: &Database, id: ReactorId, op: u8) -> Result<(), ReactorError> {
    db.run_blocking(id, move |ctx| async move {
        let _ = ctx.get(&PAIR, &1)?;
        match op {
            0 => ctx.put(&BALANCE, &1, &-1),
            1 => ctx.insert(&BALANCE, &99, &1),
            2 => ctx.update(&HISTORY, &0, &"rewritten".to_owned()),
            3 => ctx.delete(&PAIR, &0).map(|_| ()),
            4 => ctx.modify(&PAIR, &1, |v| (v.map(|v| v + 1), ())),
            _ => unreachable!(),
        }
    })
}

#[test]
fn a_write_at_a_replica_acquires_that_reactor() {
    let (pa, a, pb, b) = owner_and_reader(false);
    let k = key("written");
    let owner_id = create(&a, &pa, "written");
    fill(&a, owner_id);
    let id = b.install_replica(&a.snapshot_reactor(&k).unwrap()).unwrap();
    b.set_replica_readable(&k, true).unwrap();
    let before = rows(&b, &k);
    let expected = contents(&b, id).unwrap();

    // The acquisition fails: every kind of write returns the placement's
    // error, after exactly one acquisition of that reactor, changing nothing.
    pb.on_acquire(OnAcquire::Fail(AcquireError::NoOwner));
    for op in 0..5 {
        assert_eq!(
            write(&b, id, op),
            Err(ReactorError::Unavailable {
                reactor: k.clone(),
                cause: AcquireError::NoOwner
            }),
            "write {op}"
        );
        assert_eq!(pb.acquired().len(), op as usize + 1, "write {op}");
    }
    assert!(pb.acquired().iter().all(|a| *a == k));
    assert_eq!(rows(&b, &k), before);
    assert_eq!(contents(&b, id).unwrap(), expected);
    assert_eq!(b.holding(&k), Ok(Holding::Replica { readable: true }));

    // A write reached through a call from a reactor the reader owns:
    // the replica is acquired, not the caller, and the caller's own write
    // in the same transaction does not commit.
    let mine = create(&b, &pb, "mine");
    let through_call = b.run_blocking(mine, move |ctx| async move {
        ctx.put(&PAIR, &5, &5)?;
        ctx.call(id, |c| async move {
            let seen = c.get(&PAIR, &0)?;
            c.put(&PAIR, &0, &(seen.unwrap() + 100))
        })
        .await
    });
    assert_eq!(
        through_call,
        Err(ReactorError::Unavailable {
            reactor: k.clone(),
            cause: AcquireError::NoOwner
        })
    );
    assert_eq!(pb.acquired().len(), 6);
    assert_eq!(pb.acquired().last(), Some(&k));
    let mine_row = b
        .run_blocking(mine, |ctx| async move { ctx.get(&PAIR, &5) })
        .unwrap();
    assert_eq!(mine_row, None, "the caller's write was rolled back");
    assert_eq!(rows(&b, &k), before);
    // A read through a call is fine and acquires nothing.
    let read = b
        .run_blocking(mine, move |ctx| async move {
            ctx.call(id, |c| async move { c.get(&PAIR, &0) }).await
        })
        .unwrap();
    assert_eq!(read, Some(7));
    assert_eq!(pb.acquired().len(), 6);

    // An acquisition that answers Ok but leaves it a replica: the
    // transaction runs again each time, a bounded number of times.
    pb.on_acquire(OnAcquire::Nothing);
    match write(&b, id, 0) {
        Err(ReactorError::Unavailable {
            reactor,
            cause: AcquireError::KeptMoving { times },
        }) => {
            assert_eq!(reactor, k);
            assert_eq!(times as usize, pb.acquired().len() - 6);
            assert!(times > 1);
        }
        other => panic!("expected KeptMoving, got {other:?}"),
    }
    assert_eq!(rows(&b, &k), before);

    // The acquisition promotes the replica: the write commits, on the
    // rows the replica had, and the reactor is owned here from now on.
    pb.acquired.lock().unwrap().clear();
    pb.on_acquire(OnAcquire::Promote);
    let n = b
        .run_blocking(id, |ctx| async move {
            let n = ctx.get(&PAIR, &0)?.expect("the row");
            ctx.put(&PAIR, &0, &(n + 1))?;
            Ok(n + 1)
        })
        .unwrap();
    assert_eq!(n, 8);
    assert_eq!(pb.acquired(), vec![k.clone()]);
    assert_eq!(b.holding(&k), Ok(Holding::Owned { frozen: false }));
    for op in 0..5 {
        write(&b, id, op).unwrap();
    }
    assert_eq!(
        pb.acquired().len(),
        1,
        "an owned reactor needs no acquisition"
    );
    let now = contents(&b, id).unwrap();
    assert_eq!(now.pair, vec![(1, 8)], "row 0 deleted, row 1 incremented");
    assert!(now.balance.contains(&(1, -1)) && now.balance.contains(&(99, 1)));
    assert_eq!(now.history[0], (0, "rewritten".to_owned()));
    let seen = b
        .run_blocking(mine, move |ctx| async move { Ok(ctx.lives_here(id)) })
        .unwrap();
    assert!(seen, "a promoted replica lives here");
    // Only replicas are promoted; the owner never heard of any of this.
    assert_eq!(
        b.promote_replica(&k),
        Err(ReplicaError::NotReplica(k.clone()))
    );
    assert_eq!(contents(&a, owner_id).unwrap(), expected);
}

#[test]
fn applied_changes_keep_the_replica_equal_to_the_owner() {
    let (pa, a, pb, b) = owner_and_reader(true);
    let k = key("applied");
    let owner_id = create(&a, &pa, "applied");
    let other = create(&a, &pa, "other");
    fill(&a, owner_id);
    let id = b.install_replica(&a.snapshot_reactor(&k).unwrap()).unwrap();
    pa.take_changes(&k);
    b.set_replica_readable(&k, true).unwrap();
    assert_eq!(contents(&b, id), contents(&a, owner_id));

    // Applies each captured commit, checking the mark, then the rows.
    let sync = |what: &str| {
        let commits = pa.take_changes(&k);
        assert!(!commits.is_empty(), "{what}: nothing captured");
        for changes in commits {
            b.apply_to_replica(&k, changes).unwrap();
            assert_eq!(
                b.holding(&k),
                Ok(Holding::Replica { readable: false }),
                "{what}: an applied replica is unreadable"
            );
            b.set_replica_readable(&k, true).unwrap();
        }
        assert_eq!(rows(&b, &k), rows(&a, &k), "{what}: rows differ");
        assert_eq!(contents(&b, id), contents(&a, owner_id), "{what}");
    };
    a.run_blocking(owner_id, |ctx| async move {
        ctx.put(&BALANCE, &1, &5)?;
        ctx.insert(&BALANCE, &50, &1)?;
        ctx.put(&HISTORY, &10, &"ten".to_owned())?;
        ctx.put(&PAIR, &0, &8)
    })
    .unwrap();
    sync("upserts");
    a.run_blocking(owner_id, |ctx| async move {
        ctx.delete(&BALANCE, &2)?;
        ctx.delete(&HISTORY, &0)?;
        ctx.insert(&HISTORY, &11, &"gone again".to_owned())?;
        ctx.delete(&HISTORY, &11).map(|_| ())
    })
    .unwrap();
    sync("deletes, hashed and ordered");
    // Several commits applied one after the other, one of them writing
    // another reactor too (its rows are not this replica's).
    for i in 0..3u64 {
        a.run_blocking(owner_id, move |ctx| async move {
            ctx.put(&PAIR, &1, &(100 + i))?;
            ctx.call(other, move |c| async move { c.put(&PAIR, &0, &i) })
                .await
        })
        .unwrap();
    }
    sync("three commits");
    // A relation emptied.
    a.run_blocking(owner_id, |ctx| async move {
        for (at, _) in ctx.scan(&HISTORY, .., ScanDirection::Forward, 1000)? {
            ctx.delete(&HISTORY, &at)?;
        }
        Ok(())
    })
    .unwrap();
    sync("a relation emptied");
    assert!(contents(&b, id).unwrap().history.is_empty());

    // Hand-built changes: an insert, a delete, and a delete of a row that
    // is not there.
    b.apply_to_replica(&k, vec![pair_change(2, Some(42))])
        .unwrap();
    b.set_replica_readable(&k, true).unwrap();
    let read = |b: &Database| {
        b.run_blocking(id, |ctx| async move {
            ctx.scan(&PAIR, .., ScanDirection::Forward, 10)
        })
        .unwrap()
    };
    assert_eq!(read(&b), vec![(0, 8), (1, 102), (2, 42)]);
    b.apply_to_replica(&k, vec![pair_change(2, None), pair_change(3, None)])
        .unwrap();
    b.set_replica_readable(&k, true).unwrap();
    assert_eq!(read(&b), vec![(0, 8), (1, 102)]);
    assert_eq!(rows(&b, &k), rows(&a, &k));

    // An unknown relation (here: another type's) is refused, and nothing
    // of the batch is applied, nor the mark changed.
    let before = rows(&b, &k);
    let refused = b.apply_to_replica(
        &k,
        vec![
            pair_change(0, Some(1000)),
            RowChange {
                relation: "entries".into(),
                key: encoded_key(1u64),
                value: Some(postcard::to_allocvec("x").unwrap()),
            },
        ],
    );
    assert_eq!(
        refused,
        Err(ReplicaError::UnknownRelation {
            reactor_type: "doc".into(),
            relation: "entries".into()
        })
    );
    assert_eq!(rows(&b, &k), before);
    assert_eq!(b.holding(&k), Ok(Holding::Replica { readable: true }));
    // A name both types have goes to this type's relation.
    b.apply_to_replica(
        &k,
        vec![RowChange {
            relation: "history".into(),
            key: encoded_key(77u64),
            value: Some(postcard::to_allocvec("doc's").unwrap()),
        }],
    )
    .unwrap();
    b.set_replica_readable(&k, true).unwrap();
    assert_eq!(
        contents(&b, id).unwrap().history,
        vec![(77, "doc's".to_owned())]
    );

    // Only replicas take changes.
    let mine = key("mine");
    create(&b, &pb, "mine");
    assert_eq!(
        b.apply_to_replica(&mine, vec![pair_change(0, Some(1))]),
        Err(ReplicaError::NotReplica(mine))
    );
    assert_eq!(
        a.apply_to_replica(&k, vec![pair_change(0, Some(1))]),
        Err(ReplicaError::NotReplica(k.clone()))
    );
}

/// `apply_to_replicas`: a batch over replicas in both containers (so both
/// executors) is applied in one call, each replica to its own rows; a
/// member that is refused (an unknown relation, a reactor that is no
/// replica here) fails alone, with its own error, in the batch's order.
#[test]
fn a_batch_applies_to_every_replica_and_fails_only_the_bad_ones() {
    let (pa, a, pb, b) = owner_and_reader(true);
    let names: Vec<String> = (0..8).map(|i| format!("batch{i}")).collect();
    let mut ids = Vec::new();
    for name in &names {
        create(&a, &pa, name);
        ids.push(
            b.install_replica(&a.snapshot_reactor(&key(name)).unwrap())
                .unwrap(),
        );
    }
    let containers: HashSet<String> = ids
        .iter()
        .map(|id| b.container_of(*id).unwrap().to_owned())
        .collect();
    assert_eq!(containers.len(), 2, "the batch spans both executors");
    let mine = key("mine-batch");
    create(&b, &pb, "mine-batch");
    let mut batch: Vec<(ReactorKey, Vec<RowChange>)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                key(n),
                vec![pair_change(0, Some(i as u64)), pair_change(1, Some(7))],
            )
        })
        .collect();
    batch.insert(
        3,
        (
            key(&names[3]),
            vec![RowChange {
                relation: "entries".into(),
                key: encoded_key(1u64),
                value: Some(postcard::to_allocvec("x").unwrap()),
            }],
        ),
    );
    batch.push((mine.clone(), vec![pair_change(0, Some(1))]));
    let outcomes = b.apply_to_replicas(batch);
    assert_eq!(outcomes.len(), names.len() + 2);
    assert_eq!(
        outcomes[3],
        Err(ReplicaError::UnknownRelation {
            reactor_type: "doc".into(),
            relation: "entries".into()
        })
    );
    assert_eq!(
        outcomes[names.len() + 1],
        Err(ReplicaError::NotReplica(mine))
    );
    let applied: Vec<&Result<(), ReplicaError>> = outcomes
        .iter()
        .enumerate()
        .filter(|(at, _)| *at != 3 && *at != names.len() + 1)
        .map(|(_, o)| o)
        .collect();
    assert!(applied.iter().all(|o| o.is_ok()), "{outcomes:?}");
    for (i, (name, id)) in names.iter().zip(&ids).enumerate() {
        let k = key(name);
        assert_eq!(b.holding(&k), Ok(Holding::Replica { readable: false }));
        b.set_replica_readable(&k, true).unwrap();
        let read = b
            .run_blocking(*id, |ctx| async move {
                ctx.scan(&PAIR, .., ScanDirection::Forward, 10)
            })
            .unwrap();
        assert_eq!(read, vec![(0, i as u64), (1, 7)], "{name}");
    }
}

/// A read-only transaction that read a replica before changes were
/// applied to it, and commits after, runs again and sees them (once the
/// replica is readable).
#[test]
fn a_reader_racing_an_apply_runs_again_on_the_new_rows() {
    let (pa, a, _pb, b) = owner_and_reader(false);
    let k = key("raced");
    let owner_id = create(&a, &pa, "raced");
    fill(&a, owner_id);
    let id = b.install_replica(&a.snapshot_reactor(&k).unwrap()).unwrap();
    b.set_replica_readable(&k, true).unwrap();
    let (go, entered, reader) = paused_reader(&b, id);
    wait_until("the reader to enter", || entered.load(Ordering::SeqCst));
    b.apply_to_replica(&k, vec![pair_change(0, Some(8))])
        .unwrap();
    go.notify_one();
    std::thread::sleep(Duration::from_millis(30));
    assert!(!reader.is_finished(), "read an invalid replica");
    b.set_replica_readable(&k, true).unwrap();
    assert_eq!(reader.join().unwrap(), (Ok(Some(8)), 2));
}

/// What the readers of the torn-read workload saw.
struct Seen {
    reads: u64,
    /// States read that were never marked readable (described).
    violations: Vec<String>,
}

/// A replica of a reactor whose `PAIR` rows 0 and 1 are equal in every
/// readable state: one thread applies states n = 1, 2, ... (every other
/// one in two applies, a row each, as two reliable commits would), and
/// marks each readable once all of it is applied; `readers` threads read
/// both rows (half directly, half through a call from a reactor the reader
/// owns) and check they are equal, never go back, and were marked.
fn torn_read_workload(
    b: &Arc<Database>,
    k: &ReactorKey,
    id: ReactorId,
    mine: ReactorId,
    readers: usize,
    duration: Duration,
) -> Seen {
    let marked = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let violations = Mutex::new(Vec::new());
    let reads = AtomicU64::new(0);
    b.apply_to_replica(k, vec![pair_change(0, Some(0)), pair_change(1, Some(0))])
        .unwrap();
    b.set_replica_readable(k, true).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            let start = Instant::now();
            let mut n = 0;
            while start.elapsed() < duration {
                n += 1;
                if n % 2 == 0 {
                    b.apply_to_replica(k, vec![pair_change(0, Some(n)), pair_change(1, Some(n))])
                        .unwrap();
                } else {
                    b.apply_to_replica(k, vec![pair_change(0, Some(n))])
                        .unwrap();
                    std::thread::sleep(Duration::from_micros(200));
                    b.apply_to_replica(k, vec![pair_change(1, Some(n))])
                        .unwrap();
                }
                std::thread::sleep(Duration::from_micros(200));
                // Marked before it is readable: a reader that read it
                // finds it marked.
                marked.store(n, Ordering::SeqCst);
                b.set_replica_readable(k, true).unwrap();
                std::thread::sleep(Duration::from_micros(500));
            }
            stop.store(true, Ordering::SeqCst);
        });
        for r in 0..readers {
            let (marked, stop, violations, reads) = (&marked, &stop, &violations, &reads);
            s.spawn(move || {
                let mut last = 0;
                while !stop.load(Ordering::SeqCst) {
                    let read = |c: roost_reactor::ReactorCtx| async move {
                        Ok((
                            c.get(&PAIR, &0)?.expect("row 0"),
                            c.get(&PAIR, &1)?.expect("row 1"),
                        ))
                    };
                    let (x, y) = if r % 2 == 0 {
                        b.run_blocking(id, read)
                    } else {
                        b.run_blocking(mine, move |ctx| async move { ctx.call(id, read).await })
                    }
                    .unwrap();
                    let m = marked.load(Ordering::SeqCst);
                    reads.fetch_add(1, Ordering::Relaxed);
                    let mut seen = violations.lock().unwrap();
                    if x != y {
                        seen.push(format!("reader {r}: torn state ({x}, {y})"));
                    }
                    if x.max(y) > m {
                        seen.push(format!("reader {r}: read {x}/{y}, marked only {m}"));
                    }
                    if x < last {
                        seen.push(format!("reader {r}: went back from {last} to {x}"));
                    }
                    last = x;
                }
            });
        }
    });
    Seen {
        reads: reads.into_inner(),
        violations: violations.into_inner().unwrap(),
    }
}

fn torn_read_setup() -> (
    Arc<Database>,
    Arc<Database>,
    ReactorKey,
    ReactorId,
    ReactorId,
) {
    let (pa, a, pb, b) = owner_and_reader(false);
    let k = key("pair");
    let owner_id = create(&a, &pa, "pair");
    fill(&a, owner_id);
    let id = b.install_replica(&a.snapshot_reactor(&k).unwrap()).unwrap();
    let mine = create(&b, &pb, "mine");
    (a, b, k, id, mine)
}

#[test]
fn readers_never_see_a_state_that_was_not_marked_readable() {
    let (_a, b, k, id, mine) = torn_read_setup();
    let started = Instant::now();
    let seen = torn_read_workload(&b, &k, id, mine, 3, Duration::from_secs(1));
    eprintln!(
        "{} reads in {:?}, violations: {:?}",
        seen.reads,
        started.elapsed(),
        seen.violations
    );
    assert!(seen.reads > 0, "no read completed");
    assert!(seen.violations.is_empty(), "{:?}", seen.violations);
}

/// The planted bug (entering a replica ignores its Invalid mark) lets a
/// reader see a state the applier never marked readable, half applied:
/// the checker above must catch it.
#[test]
fn reading_invalid_replicas_is_caught() {
    let (_a, b, k, id, mine) = torn_read_setup();
    b.plant_bug_read_invalid_replicas();
    let start = Instant::now();
    for round in 0.. {
        let seen = torn_read_workload(&b, &k, id, mine, 3, Duration::from_millis(300));
        if let Some(first) = seen.violations.first() {
            eprintln!(
                "caught in round {round} after {:?}: {first} ({} violations in {} reads)",
                start.elapsed(),
                seen.violations.len(),
                seen.reads
            );
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the checker missed reads of invalid replicas ({round} rounds)"
        );
    }
}

/// Writers increment a counter on the owner while its ownership goes:
/// frozen (or not), demoted to an unreadable replica, then readable. No
/// write commits after the demotion (the counter the demoted rows hold is
/// the count of acknowledged increments, with none acknowledged after),
/// writers then acquire the reactor (and fail: it is not coming back), and
/// reads work once it is readable.
fn demote_under_writers(freeze: bool) {
    let (pa, a, _pb, _b) = owner_and_reader(false);
    let k = key("counter");
    let id = create(&a, &pa, "counter");
    a.run_blocking(id, |ctx| async move { ctx.insert(&PAIR, &0, &0) })
        .unwrap();
    pa.on_acquire(OnAcquire::Fail(AcquireError::NoOwner));
    let acked = AtomicU64::new(0);
    let highest = AtomicU64::new(0);
    let demoted = AtomicBool::new(false);
    let acked_after_snapshot = AtomicU64::new(0);
    let snapshot_taken = AtomicBool::new(false);
    let (snapshot, demoted_rows) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (a, k) = (&a, &k);
                let (acked, highest, snapshot_taken, after) =
                    (&acked, &highest, &snapshot_taken, &acked_after_snapshot);
                s.spawn(move || loop {
                    let taken = snapshot_taken.load(Ordering::SeqCst);
                    match a.run_blocking(id, |ctx| async move {
                        let n = ctx.get(&PAIR, &0)?.expect("the counter");
                        ctx.put(&PAIR, &0, &(n + 1))?;
                        Ok(n + 1)
                    }) {
                        Ok(n) => {
                            acked.fetch_add(1, Ordering::SeqCst);
                            highest.fetch_max(n, Ordering::SeqCst);
                            if taken {
                                after.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(ReactorError::Unavailable { reactor, cause }) => {
                            assert_eq!(&reactor, k);
                            assert_eq!(cause, AcquireError::NoOwner);
                            return;
                        }
                        Err(e) => panic!("a writer failed: {e}"),
                    }
                })
            })
            .collect();
        wait_until("increments", || acked.load(Ordering::SeqCst) >= 20);
        if freeze {
            assert_eq!(a.freeze_reactor(&k), Ok(true));
            assert_eq!(a.holding(&k), Ok(Holding::Owned { frozen: true }));
        }
        a.demote_to_replica(&k).unwrap();
        demoted.store(true, Ordering::SeqCst);
        assert_eq!(a.holding(&k), Ok(Holding::Replica { readable: false }));
        let snapshot = a.snapshot_reactor(&k).unwrap();
        snapshot_taken.store(true, Ordering::SeqCst);
        // Writers keep trying (the unreadable replica turns them away)...
        std::thread::sleep(Duration::from_millis(30));
        assert!(writers.iter().all(|w| !w.is_finished()));
        let demoted_rows = rows(&a, &k);
        // ...until it is readable: then their writes acquire it, and fail.
        a.set_replica_readable(&k, true).unwrap();
        for w in writers {
            w.join().unwrap();
        }
        (snapshot, demoted_rows)
    });
    assert_eq!(snapshot.rows(), demoted_rows, "nothing written meanwhile");
    let acked = acked.into_inner();
    let counter = ExportedReactor::empty(k.clone())
        .apply_changes(&[pair_change(0, Some(acked))], 1)
        .unwrap();
    assert_eq!(
        snapshot.rows(),
        counter.rows(),
        "the demoted rows hold every acknowledged increment ({acked}) and no other"
    );
    assert_eq!(highest.into_inner(), acked);
    assert_eq!(
        acked_after_snapshot.into_inner(),
        0,
        "a write acknowledged after the demotion"
    );
    let acquired = pa.acquired();
    assert!(!acquired.is_empty(), "the writers acquired nothing");
    assert!(acquired.iter().all(|a| *a == k));
    assert_eq!(rows(&a, &k), snapshot.rows());
    // Reads work at the demoted owner once readable; writes acquire.
    let read = a
        .run_blocking(id, |ctx| async move { ctx.get(&PAIR, &0) })
        .unwrap();
    assert_eq!(read, Some(acked));
    assert!(matches!(
        a.run_blocking(id, |ctx| async move { ctx.put(&PAIR, &0, &0) }),
        Err(ReactorError::Unavailable { .. })
    ));
    // Ownership operations refuse a replica.
    assert_eq!(
        a.demote_to_replica(&k),
        Err(ReplicaError::NotOwned(k.clone()))
    );
    assert_eq!(a.freeze_reactor(&k), Ok(false));
    assert_eq!(a.thaw_reactor(&k), Err(ExportError::NotFrozen(k.clone())));
    assert!(matches!(
        a.export_reactor(&k),
        Err(ExportError::Directory(DirectoryError::NotLocal(_)))
    ));
    assert_eq!(a.holding(&k), Ok(Holding::Replica { readable: true }));
}

#[test]
fn a_frozen_owner_demoted_under_writers_keeps_every_acknowledged_write() {
    demote_under_writers(true);
}

#[test]
fn an_owner_demoted_under_writers_without_a_freeze_keeps_every_acknowledged_write() {
    demote_under_writers(false);
}

#[test]
fn a_dropped_replica_is_gone() {
    let (pa, a, pb, b) = owner_and_reader(false);
    let k = key("dropped");
    let owner_id = create(&a, &pa, "dropped");
    fill(&a, owner_id);
    let id = b.install_replica(&a.snapshot_reactor(&k).unwrap()).unwrap();
    b.set_replica_readable(&k, true).unwrap();
    assert_eq!(contents(&b, id), contents(&a, owner_id));

    b.drop_replica(&k).unwrap();
    assert_eq!(b.holding(&k), Ok(Holding::Away));
    assert_eq!(b.location(id).unwrap(), Location::Remote);
    assert!(matches!(
        b.snapshot_reactor(&k),
        Err(ExportError::Directory(DirectoryError::NotLocal(_)))
    ));
    // Entering it acquires it.
    pb.on_acquire(OnAcquire::Fail(AcquireError::TimedOut));
    assert_eq!(
        contents(&b, id),
        Err(ReactorError::Unavailable {
            reactor: k.clone(),
            cause: AcquireError::TimedOut
        })
    );
    assert_eq!(pb.acquired(), vec![k.clone()]);
    for refused in [
        b.drop_replica(&k),
        b.set_replica_readable(&k, true),
        b.promote_replica(&k),
        b.apply_to_replica(&k, vec![]),
    ] {
        assert_eq!(refused, Err(ReplicaError::NotReplica(k.clone())));
    }
    // Its rows are gone from storage, not only hidden: an empty copy
    // installs (as inserts) and holds nothing.
    let empty = ExportedReactor::empty(k.clone());
    assert_eq!(b.install_replica(&empty).unwrap(), id);
    b.set_replica_readable(&k, true).unwrap();
    assert_eq!(rows(&b, &k), empty.rows());
    assert_eq!(
        contents(&b, id).unwrap(),
        Contents {
            balance: vec![],
            history: vec![],
            pair: vec![]
        }
    );
    // And a full copy again, the same handle.
    assert_eq!(b.drop_replica(&k), Ok(()));
    assert_eq!(
        b.install_replica(&a.snapshot_reactor(&k).unwrap()).unwrap(),
        id
    );
    b.set_replica_readable(&k, true).unwrap();
    assert_eq!(contents(&b, id), contents(&a, owner_id));
    // Only replicas are dropped; the owner keeps its rows.
    assert_eq!(a.drop_replica(&k), Err(ReplicaError::NotReplica(k.clone())));
    assert_eq!(a.holding(&k), Ok(Holding::Owned { frozen: false }));
    // Unknown here: away.
    assert_eq!(b.holding(&key("never")), Ok(Holding::Away));
}

/// The replica operations check that the reactor is a replica, then mark
/// it busy: a promotion in between (the ownership protocol promoting the
/// replica while the reliable commit applies an R-INV to it, or drops it)
/// must not let them write, or drop, an owned reactor.
#[test]
fn replica_operations_racing_a_promotion_leave_an_owned_reactor_alone() {
    let (pa, a, _pb, b) = owner_and_reader(false);
    let k = key("contested");
    let owner_id = create(&a, &pa, "contested");
    fill(&a, owner_id);
    let snapshot = a.snapshot_reactor(&k).unwrap();
    let id = b.install_replica(&snapshot).unwrap();
    let start = Instant::now();
    let mut rounds = 0;
    // Drop against promote: exactly one wins; a promoted reactor keeps its
    // rows.
    while start.elapsed() < Duration::from_millis(700) {
        rounds += 1;
        let barrier = Barrier::new(2);
        let (dropped, promoted) = std::thread::scope(|s| {
            let dropper = s.spawn(|| {
                barrier.wait();
                b.drop_replica(&k)
            });
            barrier.wait();
            let promoted = b.promote_replica(&k);
            (dropper.join().unwrap(), promoted)
        });
        match (&dropped, &promoted) {
            (Ok(()), Err(ReplicaError::NotReplica(_))) => {
                assert_eq!(b.holding(&k), Ok(Holding::Away));
            }
            (Err(ReplicaError::NotReplica(_)), Ok(())) => {
                assert_eq!(b.holding(&k), Ok(Holding::Owned { frozen: false }));
                assert_eq!(rows(&b, &k), snapshot.rows(), "round {rounds}");
                b.demote_to_replica(&k).unwrap();
                b.drop_replica(&k).unwrap();
            }
            // The promotion found the drop running.
            (Ok(()), Err(ReplicaError::Busy)) => {}
            other => panic!("round {rounds}: {other:?}"),
        }
        b.install_replica(&snapshot).unwrap();
    }
    // Apply against promote: an apply that ran did so on a replica (left
    // unreadable), never on the owned reactor.
    let stop = AtomicBool::new(false);
    let applied = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                match b.apply_to_replica(&k, vec![pair_change(0, Some(1000 + n))]) {
                    Ok(()) => {
                        applied.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(ReplicaError::NotReplica(_) | ReplicaError::Busy) => {}
                    Err(e) => panic!("apply: {e}"),
                }
            }
        });
        let start = Instant::now();
        let mut round = 0u64;
        // Until some applies ran (the demoted replica is left alone for a
        // while, of varying length, so that applies start at any moment).
        while start.elapsed() < Duration::from_millis(700) || applied.load(Ordering::Relaxed) == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "no apply ran");
            round += 1;
            std::thread::sleep(Duration::from_micros(100 * (round % 4)));
            match b.promote_replica(&k) {
                Ok(()) => {
                    // Owned: nothing may apply to it until demoted.
                    let held = rows(&b, &k);
                    std::thread::sleep(Duration::from_micros(100));
                    assert_eq!(rows(&b, &k), held, "changes applied to an owned reactor");
                    assert_eq!(b.holding(&k), Ok(Holding::Owned { frozen: false }));
                    b.demote_to_replica(&k).unwrap();
                }
                Err(ReplicaError::Busy) => {}
                Err(e) => panic!("promote: {e}"),
            }
        }
        stop.store(true, Ordering::SeqCst);
    });
    assert!(applied.into_inner() > 0, "no apply ran");
    assert!(matches!(b.holding(&k), Ok(Holding::Replica { .. })));
    b.set_replica_readable(&k, true).unwrap();
    assert!(contents(&b, id).is_ok());
    eprintln!("{rounds} drop/promote rounds");
}

/// Zeus lets a transaction that writes run only where every object it
/// accesses, read or written, is owned; a replica serves read-only
/// transactions. Here a transaction reads a replica and writes a reactor
/// its database owns, on each of two databases (each owns one reactor and
/// reads the other's): before either's changes reach the other, both
/// commit, and the two writes together break the invariant each checked
/// (at most one flag set): write skew, which no serial order allows.
#[test]
fn a_transaction_that_writes_does_not_commit_a_read_of_a_replica() {
    let (pa, a, pb, b) = owner_and_reader(false);
    pa.on_acquire(OnAcquire::Fail(AcquireError::NoOwner));
    pb.on_acquire(OnAcquire::Fail(AcquireError::NoOwner));
    // `a` owns x and `b` owns y, each a flag in `PAIR` row 0, both clear.
    let x = create(&a, &pa, "x");
    let y = create(&b, &pb, "y");
    for (db, id) in [(&a, x), (&b, y)] {
        db.run_blocking(id, |ctx| async move { ctx.insert(&PAIR, &0, &0) })
            .unwrap();
    }
    // Each reads the other's as a replica, valid.
    let y_at_a = a
        .install_replica(&b.snapshot_reactor(&key("y")).unwrap())
        .unwrap();
    let x_at_b = b
        .install_replica(&a.snapshot_reactor(&key("x")).unwrap())
        .unwrap();
    a.set_replica_readable(&key("y"), true).unwrap();
    b.set_replica_readable(&key("x"), true).unwrap();
    // Set my flag if the other one is clear.
    let set_unless_other = |db: &Database, mine: ReactorId, other: ReactorId| {
        db.run_blocking(mine, move |ctx| async move {
            let theirs = ctx
                .call(other, |c| async move { c.get(&PAIR, &0) })
                .await?
                .expect("the flag");
            if theirs == 0 {
                ctx.put(&PAIR, &0, &1)?;
            }
            Ok(theirs)
        })
    };
    let t1 = set_unless_other(&a, x, y_at_a);
    let t2 = set_unless_other(&b, y, x_at_b);
    let flag = |db: &Database, id: ReactorId| {
        db.run_blocking(id, |ctx| async move { ctx.get(&PAIR, &0) })
            .unwrap()
    };
    assert!(
        !(t1 == Ok(0) && t2 == Ok(0)),
        "both committed, each on a read of the other's clear flag: x = {:?}, y = {:?}",
        flag(&a, x),
        flag(&b, y)
    );
}
