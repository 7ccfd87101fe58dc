//! The replication hook (`Placement::replicates`, `sequenced`,
//! `read_barrier`): every write commit gets a number, dense and reported
//! once, aborts included; the numbers are a serial order (a follower
//! replaying the captured changes in number order sees, at each step, what
//! the transaction read, and ends where the database is); the caller waits
//! for the placement's answer; deletes are captured as deletions;
//! relocations take no number; and a follower's copy kept current with
//! `ExportedReactor::apply_changes` is the leader's export.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_reactor::{
    Acquire, Database, Deployment, EngineConfig, ExportedReactor, KeyCodec, LocalPlacement,
    Location, Placement, PlantedBugs, ReactorChanges, ReactorCtx, ReactorError, ReactorId,
    ReactorKey, RelationDef, Replication, ReplicationError, RowChange, Schema, Sequenced,
};
use tokio::sync::oneshot;

/// A cell's value: the id of the transaction that wrote it, then what that
/// transaction read, as pairs (global row index, id of the writer it saw;
/// 0: absent).
static CELLS: RelationDef<u32, Vec<u64>> = RelationDef::new("cell", "cells");
/// Hash-indexed, for the capture of partitioned relations.
static NOTES: RelationDef<u32, String> = RelationDef::new("cell", "notes").point_access_only();

fn schema() -> Schema {
    Schema::new()
        .reactor_type("cell", &[&CELLS, &NOTES])
        .unwrap()
}

/// Two containers of two executors: transactions across containers commit
/// several contexts together, and each container runs two at once.
fn deployment() -> Deployment {
    Deployment::from_toml(
        r#"
        [[containers]]
        name = "a"
        executors = 2
        [[containers]]
        name = "b"
        executors = 2
        [placement]
        by_hash = { cell = ["a", "b"] }
        "#,
    )
    .unwrap()
}

/// How the test placement answers a commit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// No future: the caller returns at once.
    Nothing,
    /// A future the test completes (through `pending`).
    Held,
}

/// Every reactor local (as `LocalPlacement`), replicating, recording every
/// call of the hook.
struct Recording {
    local: LocalPlacement,
    replicates: AtomicBool,
    answer: Mutex<Answer>,
    sequenced: Mutex<BTreeMap<u64, Sequenced>>,
    barriers: Mutex<Vec<u64>>,
    /// Held answers, in the order they were asked for.
    pending: Mutex<Vec<oneshot::Sender<Result<(), ReplicationError>>>>,
}

impl Recording {
    fn new() -> Arc<Self> {
        Arc::new(Recording {
            local: LocalPlacement::new(&deployment()),
            replicates: AtomicBool::new(true),
            answer: Mutex::new(Answer::Nothing),
            sequenced: Mutex::new(BTreeMap::new()),
            barriers: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
        })
    }

    fn answer(&self) -> Option<Replication> {
        match *self.answer.lock().unwrap() {
            Answer::Nothing => None,
            Answer::Held => {
                let (tx, rx) = oneshot::channel();
                self.pending.lock().unwrap().push(tx);
                Some(Box::pin(async move {
                    rx.await.unwrap_or(Err(ReplicationError::Shutdown))
                }))
            }
        }
    }

    /// Waits until `n` answers are held, and takes them.
    fn take_pending(&self, n: usize) -> Vec<oneshot::Sender<Result<(), ReplicationError>>> {
        let start = Instant::now();
        loop {
            {
                let mut pending = self.pending.lock().unwrap();
                if pending.len() >= n {
                    return pending.drain(..).collect();
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no answer asked for"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn sequenced(&self) -> BTreeMap<u64, Sequenced> {
        self.sequenced.lock().unwrap().clone()
    }

    fn last(&self) -> (u64, Sequenced) {
        let log = self.sequenced.lock().unwrap();
        let (seq, outcome) = log.last_key_value().expect("something sequenced");
        (*seq, outcome.clone())
    }
}

impl Placement for Recording {
    fn locate(&self, key: &ReactorKey) -> Location {
        self.local.locate(key)
    }

    fn acquire(&self, key: &ReactorKey) -> Acquire {
        self.local.acquire(key)
    }

    fn replicates(&self) -> bool {
        self.replicates.load(Ordering::Relaxed)
    }

    fn sequenced(&self, seq: u64, outcome: Sequenced) -> Option<Replication> {
        if let Sequenced::Committed { changes, .. } = &outcome {
            assert!(!changes.is_empty(), "a write commit changed something");
            assert!(changes.iter().all(|c| !c.rows.is_empty()));
        }
        let previous = self.sequenced.lock().unwrap().insert(seq, outcome);
        assert!(previous.is_none(), "number {seq} reported twice");
        self.answer()
    }

    fn read_barrier(&self, seq_upto: u64) -> Option<Replication> {
        self.barriers.lock().unwrap().push(seq_upto);
        self.answer()
    }
}

fn database(placement: &Arc<Recording>, planted_bugs: PlantedBugs) -> Arc<Database> {
    let config = EngineConfig {
        planted_bugs,
        ..EngineConfig::default()
    };
    let placement = Arc::clone(placement) as Arc<dyn Placement>;
    Arc::new(Database::with_placement(schema(), deployment(), config, placement).unwrap())
}

fn cell_key(k: u32) -> Vec<u8> {
    let mut out = Vec::new();
    k.encode_into(&mut out);
    out
}

fn decode(value: &[u8]) -> Vec<u64> {
    postcard::from_bytes(value).unwrap()
}

/// Numbers 1..=last, each reported once; returns how many were aborts.
fn assert_dense(db: &Database, placement: &Recording) -> usize {
    let log = placement.sequenced();
    let last = db.last_sequence_number();
    assert_eq!(
        log.keys().copied().collect::<Vec<_>>(),
        (1..=last).collect::<Vec<_>>(),
        "every number handed out reported once"
    );
    log.values()
        .filter(|o| matches!(o, Sequenced::Aborted))
        .count()
}

#[test]
fn numbers_are_dense_and_reported_once_aborts_included() {
    let placement = Recording::new();
    let db = database(&placement, PlantedBugs::default());
    let counter = db.create_reactor("cell", "counter").unwrap();
    let committed = AtomicU64::new(0);
    let start = Instant::now();
    // Increments of one row from four threads: a writer that locked the row
    // after another installed fails validation with its number taken.
    loop {
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        db.run_blocking(counter, |ctx| async move {
                            let n = ctx.get(&CELLS, &0)?.map_or(0, |v| v[0]);
                            ctx.put(&CELLS, &0, &vec![n + 1])
                        })
                        .unwrap();
                        committed.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        let aborted = assert_dense(&db, &placement);
        if aborted > 0 || start.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
    let aborted = assert_dense(&db, &placement);
    assert!(aborted > 0, "no sequenced commit failed validation");
    let log = placement.sequenced();
    let committed = committed.load(Ordering::Relaxed);
    assert_eq!(log.len() - aborted, committed as usize);
    // The committed increments, in number order, count up by one.
    let values: Vec<u64> = log
        .values()
        .filter_map(|o| match o {
            Sequenced::Committed { changes, .. } => {
                Some(decode(changes[0].rows[0].value.as_ref().expect("a put"))[0])
            }
            Sequenced::Aborted => None,
        })
        .collect();
    assert_eq!(values, (1..=committed).collect::<Vec<_>>());
    // Read-only transactions take no number; each asks for a barrier at
    // the numbers handed out.
    let read = db
        .run_blocking(counter, |ctx| async move { ctx.get(&CELLS, &0) })
        .unwrap();
    assert_eq!(read, Some(vec![committed]));
    assert_eq!(db.last_sequence_number() as usize, log.len());
    assert_eq!(
        placement.barriers.lock().unwrap().last(),
        Some(&(log.len() as u64))
    );
}

/// One transaction of the serial-order workload: rows (reactor index, key)
/// it reads, then rows it writes (with its id and what it read), then
/// maybe one it deletes.
#[derive(Clone)]
struct Plan {
    id: u64,
    reads: Vec<(usize, u32)>,
    writes: Vec<(usize, u32)>,
    delete: Option<(usize, u32)>,
}

const REACTORS: usize = 6;
const KEYS: u32 = 3;

fn global(row: (usize, u32)) -> u64 {
    row.0 as u64 * u64::from(KEYS) + u64::from(row.1)
}

fn plan(rng: &mut SmallRng, id: u64) -> Plan {
    let mut row = || (rng.random_range(0..REACTORS), rng.random_range(0..KEYS));
    let reads = (0..3).map(|_| row()).collect();
    let writes: Vec<_> = (0..2).map(|_| row()).collect();
    let delete = Some(row()).filter(|d| !writes.contains(d));
    let delete = delete.filter(|_| id % 5 == 0);
    Plan {
        id,
        reads,
        writes,
        delete,
    }
}

async fn run_plan(
    ctx: ReactorCtx,
    cells: Arc<Vec<ReactorId>>,
    plan: Plan,
) -> Result<(), ReactorError> {
    let mut value = vec![plan.id];
    for &(r, k) in &plan.reads {
        let seen = ctx
            .call(cells[r], move |c| async move { c.get(&CELLS, &k) })
            .await?;
        value.extend([global((r, k)), seen.map_or(0, |v| v[0])]);
    }
    for &(r, k) in &plan.writes {
        let value = value.clone();
        ctx.call(cells[r], move |c| async move { c.put(&CELLS, &k, &value) })
            .await?;
    }
    if let Some((r, k)) = plan.delete {
        ctx.call(cells[r], move |c| async move {
            c.delete(&CELLS, &k).map(|_| ())
        })
        .await?;
    }
    Ok(())
}

/// Runs the workload from `threads` threads for `duration`; returns the
/// reactors' handles and keys.
fn run_workload(
    db: &Arc<Database>,
    threads: u64,
    duration: Duration,
    seed: u64,
) -> (Arc<Vec<ReactorId>>, Vec<ReactorKey>) {
    let cells: Arc<Vec<ReactorId>> = Arc::new(
        (0..REACTORS)
            .map(|r| db.create_reactor("cell", &format!("c{r}")).unwrap())
            .collect(),
    );
    let keys = cells.iter().map(|&c| db.key_of(c).unwrap()).collect();
    let next_id = AtomicU64::new(1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (db, cells, next_id) = (Arc::clone(db), Arc::clone(&cells), &next_id);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 1000 + t);
                let start = Instant::now();
                while start.elapsed() < duration {
                    let plan = plan(&mut rng, next_id.fetch_add(1, Ordering::Relaxed));
                    let root = cells[rng.random_range(0..REACTORS)];
                    let cells = Arc::clone(&cells);
                    db.run_blocking(root, move |ctx| {
                        run_plan(ctx, Arc::clone(&cells), plan.clone())
                    })
                    .unwrap();
                }
            });
        }
    });
    (cells, keys)
}

/// A follower's copy of the cells: (reactor index, key) to value.
type Replica = BTreeMap<(usize, u32), Vec<u64>>;

/// Replays the committed changes in number order, checking before each
/// that the replica holds what the transaction read. Returns the replica
/// and the first number whose reads the replica contradicts.
fn replay(log: &BTreeMap<u64, Sequenced>, keys: &[ReactorKey]) -> (Replica, Option<u64>) {
    let mut replica = Replica::new();
    let mut first_violation = None;
    let index_of = |key: &ReactorKey| keys.iter().position(|k| k == key).expect("a cell");
    for (&seq, outcome) in log {
        let Sequenced::Committed { changes, .. } = outcome else {
            continue;
        };
        // Every put of the transaction holds its reads.
        let put = changes
            .iter()
            .flat_map(|c| &c.rows)
            .find_map(|r| r.value.as_ref())
            .expect("every transaction writes");
        let written = decode(put);
        for pair in written[1..].chunks(2) {
            let (row, seen) = (pair[0], pair[1]);
            let at = (
                (row / u64::from(KEYS)) as usize,
                (row % u64::from(KEYS)) as u32,
            );
            let have = replica.get(&at).map_or(0, |v| v[0]);
            if have != seen && first_violation.is_none() {
                first_violation = Some(seq);
            }
        }
        for ReactorChanges { reactor, rows } in changes {
            let r = index_of(reactor);
            for RowChange {
                relation,
                key,
                value,
            } in rows
            {
                assert_eq!(relation, "cells");
                let k = u32::decode(key).unwrap();
                match value {
                    Some(v) => replica.insert((r, k), decode(v)),
                    None => replica.remove(&(r, k)),
                };
            }
        }
    }
    (replica, first_violation)
}

/// The cells as the database holds them now.
fn contents(db: &Database, cells: &[ReactorId]) -> Replica {
    let mut out = Replica::new();
    for (r, &cell) in cells.iter().enumerate() {
        let rows = db
            .run_blocking(cell, |ctx| async move {
                (0..KEYS)
                    .map(|k| Ok((k, ctx.get(&CELLS, &k)?)))
                    .collect::<Result<Vec<_>, ReactorError>>()
            })
            .unwrap();
        for (k, v) in rows {
            if let Some(v) = v {
                out.insert((r, k), v);
            }
        }
    }
    out
}

#[test]
fn the_sequence_is_a_serial_order() {
    let placement = Recording::new();
    let db = database(&placement, PlantedBugs::default());
    let (cells, keys) = run_workload(&db, 4, Duration::from_millis(2500), 1);
    let aborted = assert_dense(&db, &placement);
    let log = placement.sequenced();
    let committed = log.len() - aborted;
    assert!(committed > 500, "committed {committed}");
    let (replica, violation) = replay(&log, &keys);
    assert_eq!(
        violation, None,
        "replaying in number order contradicts what a transaction read"
    );
    assert_eq!(
        replica,
        contents(&db, &cells),
        "the replica ends where the database is"
    );
}

/// The planted bug (numbers taken after validation) lets a transaction that
/// read a row get a larger number than one that overwrote the row after
/// the read was validated: the replay must catch that.
#[test]
fn numbers_taken_after_validation_are_caught() {
    let bug = PlantedBugs {
        sequence_after_validation: true,
        ..PlantedBugs::default()
    };
    let start = Instant::now();
    for round in 0.. {
        let placement = Recording::new();
        let db = database(&placement, bug);
        let (_, keys) = run_workload(&db, 4, Duration::from_millis(1000), 100 + round);
        assert_dense(&db, &placement);
        if let (_, Some(seq)) = replay(&placement.sequenced(), &keys) {
            eprintln!(
                "caught at number {seq} in round {round}, after {:?}",
                start.elapsed()
            );
            return;
        }
        // The race the bug opens needs two transactions truly in parallel:
        // on a loaded 2-core machine rounds go by without one (a CI run
        // beside other builds missed it for 20 s), so the budget is wide;
        // a caught round returns at once.
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the replay missed numbers taken after validation ({round} rounds)"
        );
    }
}

#[test]
fn a_follower_copy_kept_with_apply_changes_is_the_leaders_export() {
    let placement = Recording::new();
    let db = database(&placement, PlantedBugs::default());
    let (cells, keys) = run_workload(&db, 3, Duration::from_millis(500), 7);
    // Some hash-indexed rows too, one deleted again.
    db.run_blocking(cells[0], |ctx| async move {
        ctx.put(&NOTES, &1, &"one".to_owned())?;
        ctx.put(&NOTES, &2, &"two".to_owned())
    })
    .unwrap();
    db.run_blocking(
        cells[0],
        |ctx| async move { ctx.delete(&NOTES, &1).map(|_| ()) },
    )
    .unwrap();
    let mut copies: Vec<ExportedReactor> = keys
        .iter()
        .map(|k| ExportedReactor::empty(k.clone()))
        .collect();
    for outcome in placement.sequenced().values() {
        if let Sequenced::Committed { changes, .. } = outcome {
            for c in changes {
                let r = keys.iter().position(|k| *k == c.reactor).unwrap();
                copies[r] = copies[r].apply_changes(&c.rows, 1).unwrap();
            }
        }
    }
    let expected = contents(&db, &cells);
    let before = db.last_sequence_number();
    for (r, key) in keys.iter().enumerate() {
        let export = db.export_reactor(key).unwrap();
        assert_eq!(
            export.rows(),
            copies[r].rows(),
            "the follower's copy of {key} is the leader's export, byte for byte"
        );
    }
    assert_eq!(db.last_sequence_number(), before, "exports take no number");
    // Installed elsewhere, the copies hold the leader's rows.
    let other = Recording::new();
    let follower = database(&other, PlantedBugs::default());
    let installed: Vec<ReactorId> = copies
        .iter()
        .map(|c| follower.install_reactor(c).unwrap())
        .collect();
    assert_eq!(
        follower.last_sequence_number(),
        0,
        "installs take no number"
    );
    assert!(other.sequenced().is_empty());
    assert_eq!(contents(&follower, &installed), expected);
    let note = follower
        .run_blocking(installed[0], |ctx| async move {
            Ok((ctx.get(&NOTES, &1)?, ctx.get(&NOTES, &2)?))
        })
        .unwrap();
    assert_eq!(note, (None, Some("two".to_owned())));
}

#[test]
fn changes_are_captured_per_reactor_deletes_as_none() {
    let placement = Recording::new();
    let db = database(&placement, PlantedBugs::default());
    let (x, y) = (
        db.create_reactor("cell", "x").unwrap(),
        db.create_reactor("cell", "y").unwrap(),
    );
    let (kx, ky) = (db.key_of(x).unwrap(), db.key_of(y).unwrap());
    db.run_blocking(x, move |ctx| async move {
        ctx.put(&CELLS, &2, &vec![2])?;
        ctx.put(&CELLS, &1, &vec![1])?;
        ctx.insert(&NOTES, &5, &"five".to_owned())?;
        ctx.call(y, |c| async move { c.put(&CELLS, &9, &vec![9]) })
            .await
    })
    .unwrap();
    let value = |v: Vec<u64>| Some(postcard::to_allocvec(&v).unwrap());
    let (seq, outcome) = placement.last();
    assert_eq!(seq, 1);
    let mut expected = vec![
        ReactorChanges {
            reactor: kx.clone(),
            rows: vec![
                RowChange {
                    relation: "cells".into(),
                    key: cell_key(1),
                    value: value(vec![1]),
                },
                RowChange {
                    relation: "cells".into(),
                    key: cell_key(2),
                    value: value(vec![2]),
                },
                RowChange {
                    relation: "notes".into(),
                    key: cell_key(5),
                    value: Some(postcard::to_allocvec("five").unwrap()),
                },
            ],
        },
        ReactorChanges {
            reactor: ky.clone(),
            rows: vec![RowChange {
                relation: "cells".into(),
                key: cell_key(9),
                value: value(vec![9]),
            }],
        },
    ];
    expected.sort_by(|a, b| a.reactor.cmp(&b.reactor));
    assert_eq!(
        outcome,
        Sequenced::Committed {
            changes: expected,
            read: Vec::new()
        }
    );

    // Deletes, of a hashed and an ordered row, and of a row inserted in the
    // same transaction: deletions.
    db.run_blocking(x, |ctx| async move {
        ctx.delete(&CELLS, &1)?;
        ctx.delete(&NOTES, &5)?;
        ctx.insert(&CELLS, &7, &vec![7])?;
        ctx.delete(&CELLS, &7).map(|_| ())
    })
    .unwrap();
    let (seq, outcome) = placement.last();
    assert_eq!(seq, 2);
    let rows = |relation: &str, k: u32| RowChange {
        relation: relation.into(),
        key: cell_key(k),
        value: None,
    };
    assert_eq!(
        outcome,
        Sequenced::Committed {
            changes: vec![ReactorChanges {
                reactor: kx.clone(),
                rows: vec![rows("cells", 1), rows("cells", 7), rows("notes", 5)],
            }],
            read: Vec::new()
        }
    );
    // A reactor read and not written is reported as read: its ownership
    // must not move before the transaction is replicated either.
    db.run_blocking(x, move |ctx| async move {
        let nine = ctx
            .call(y, |c| async move { c.get(&CELLS, &9) })
            .await?
            .expect("written above");
        ctx.put(&CELLS, &3, &nine)
    })
    .unwrap();
    let (seq, outcome) = placement.last();
    assert_eq!(seq, 3);
    let Sequenced::Committed { changes, read } = outcome else {
        panic!("committed: {outcome:?}");
    };
    assert_eq!(
        changes.iter().map(|c| &c.reactor).collect::<Vec<_>>(),
        vec![&kx]
    );
    assert_eq!(read, vec![ky.clone()]);
    // A write that deletes nothing changes nothing: read-only.
    db.run_blocking(x, |ctx| async move { ctx.delete(&CELLS, &100).map(|_| ()) })
        .unwrap();
    assert_eq!(db.last_sequence_number(), 3);
    // Not replicating: no number, nothing reported.
    placement.replicates.store(false, Ordering::Relaxed);
    db.run_blocking(x, |ctx| async move { ctx.put(&CELLS, &3, &vec![3]) })
        .unwrap();
    assert_eq!(db.last_sequence_number(), 3);
    assert_eq!(placement.sequenced().len(), 3);
}

#[test]
fn relocations_take_no_number() {
    let placement = Recording::new();
    let db = database(&placement, PlantedBugs::default());
    let cell = db.create_reactor("cell", "mover").unwrap();
    db.run_blocking(cell, |ctx| async move { ctx.put(&CELLS, &1, &vec![1]) })
        .unwrap();
    assert_eq!(db.last_sequence_number(), 1);
    let to = if db.container_of(cell).unwrap() == "a" {
        "b"
    } else {
        "a"
    };
    db.move_reactor(cell, to).unwrap();
    assert_eq!(db.container_of(cell).unwrap(), to);
    assert_eq!(db.last_sequence_number(), 1, "a move takes no number");
    let key = db.key_of(cell).unwrap();
    let exported = db.export_reactor(&key).unwrap();
    assert_eq!(db.last_sequence_number(), 1, "an export takes no number");
    let other = Recording::new();
    let there = database(&other, PlantedBugs::default());
    let installed = there.install_reactor(&exported).unwrap();
    assert_eq!(
        there.last_sequence_number(),
        0,
        "an install takes no number"
    );
    assert!(other.sequenced().is_empty());
    // The moved reactor's transactions are numbered there as usual.
    there
        .run_blocking(
            installed,
            |ctx| async move { ctx.put(&CELLS, &1, &vec![2]) },
        )
        .unwrap();
    assert_eq!(there.last_sequence_number(), 1);
    assert_eq!(placement.sequenced().len(), 1);
}

/// The caller of a committed transaction returns only once the placement's
/// future completed; an error from it reaches the caller, with the commit
/// done and no retry.
#[test]
fn the_caller_waits_for_replication() {
    let placement = Recording::new();
    let db = database(&placement, PlantedBugs::default());
    let cell = db.create_reactor("cell", "waiting").unwrap();
    *placement.answer.lock().unwrap() = Answer::Held;
    let events: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let returned = AtomicBool::new(false);
    std::thread::scope(|s| {
        let caller = s.spawn(|| {
            let outcome = db.run_blocking(cell, |ctx| async move { ctx.put(&CELLS, &1, &vec![1]) });
            returned.store(true, Ordering::SeqCst);
            events.lock().unwrap().push("returned");
            outcome
        });
        let mut held = placement.take_pending(1);
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !returned.load(Ordering::SeqCst),
            "returned before the writes were replicated"
        );
        events.lock().unwrap().push("replicated");
        held.pop().unwrap().send(Ok(())).unwrap();
        assert_eq!(caller.join().unwrap(), Ok(()));
    });
    assert_eq!(*events.lock().unwrap(), ["replicated", "returned"]);

    // An error reaches the caller; the transaction did commit here, once.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let caller = s.spawn(|| {
            let outcome =
                db.run_blocking(cell, |ctx| async move { ctx.put(&CELLS, &1, &vec![10]) });
            tx.send(()).unwrap();
            outcome
        });
        let mut held = placement.take_pending(1);
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        held.pop()
            .unwrap()
            .send(Err(ReplicationError::Refused))
            .unwrap();
        let outcome = caller.join().unwrap();
        assert_eq!(
            outcome,
            Err(ReactorError::Replication(ReplicationError::Refused))
        );
        let message = outcome.unwrap_err().to_string();
        assert!(
            message.contains("committed") && message.contains("refused"),
            "{message}"
        );
    });
    assert_eq!(db.last_sequence_number(), 2, "no retry");

    // A read-only transaction waits for its barrier (which sees both).
    let read = std::thread::scope(|s| {
        let reader = s.spawn(|| db.run_blocking(cell, |ctx| async move { ctx.get(&CELLS, &1) }));
        let mut held = placement.take_pending(1);
        assert_eq!(*placement.barriers.lock().unwrap(), [2]);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!reader.is_finished(), "returned before its barrier");
        held.pop().unwrap().send(Ok(())).unwrap();
        reader.join().unwrap()
    });
    assert_eq!(read, Ok(Some(vec![10])), "the refused commit happened here");
    *placement.answer.lock().unwrap() = Answer::Nothing;
    let numbers: BTreeSet<u64> = placement.sequenced().into_keys().collect();
    assert_eq!(numbers, BTreeSet::from([1, 2]));
}
