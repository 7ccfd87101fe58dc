//! The database: schema, deployment (containers, executors, placement), the
//! reactor directory, and the entry points that run root transactions.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use roost_storage::{Engine, EngineConfig, IndexKind, Relation};
use tokio::sync::oneshot;

use crate::ctx::ReactorCtx;
use crate::deployment::{Deployment, RouterPolicy};
use crate::error::{DeploymentError, DirectoryError};
use crate::executor::{ExecutorHandle, SpinBudget};
use crate::schema::Schema;
use crate::txn::{run_root, ReactorError};

/// A reactor's identity: dense, assigned by the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReactorId(pub u32);

/// Most reactors one database holds.
pub const MAX_REACTORS: usize = 1 << 28;
const MAX_REACTOR_NAME_BYTES: usize = 256;

const PLACEMENT_SEGMENT_SLOTS: usize = 1 << 16;
/// In a placement slot: a move of the reactor is in progress. Bits 0..16 hold
/// the container, bits 16..31 the reactor type.
const MOVING_BIT: u32 = 1 << 31;
/// Reactor types a schema may declare (they share a slot with the moving bit).
pub const MAX_REACTOR_TYPES: usize = 1 << 15;
const PLACEMENT_SEGMENTS: usize = MAX_REACTORS / PLACEMENT_SEGMENT_SLOTS;

/// Reactor id to (reactor type, container), read on every call without a lock
/// (a shared read lock would bounce its cache line between executors): slots
/// are atomics in segments allocated as the directory grows. Written only under
/// the directory's write lock.
pub(crate) struct PlacementTable {
    segments: Box<[OnceLock<Box<[AtomicU32]>>]>,
    len: AtomicU32,
}

impl PlacementTable {
    fn new() -> Self {
        PlacementTable {
            segments: (0..PLACEMENT_SEGMENTS).map(|_| OnceLock::new()).collect(),
            len: AtomicU32::new(0),
        }
    }

    fn slot(&self, id: u32) -> Option<&AtomicU32> {
        if id >= self.len.load(Ordering::Acquire) {
            return None;
        }
        let id = id as usize;
        self.segments[id / PLACEMENT_SEGMENT_SLOTS]
            .get()
            .map(|s| &s[id % PLACEMENT_SEGMENT_SLOTS])
    }

    pub(crate) fn get(&self, id: ReactorId) -> Option<(u16, u16)> {
        let packed = self.slot(id.0)?.load(Ordering::Acquire);
        Some((((packed & !MOVING_BIT) >> 16) as u16, packed as u16))
    }

    /// Whether a move of the reactor is in progress.
    pub(crate) fn is_moving(&self, id: ReactorId) -> bool {
        self.slot(id.0)
            .is_some_and(|s| s.load(Ordering::Acquire) & MOVING_BIT != 0)
    }

    /// Marks a move as started or finished; the caller holds the write lock.
    fn set_moving(&self, id: ReactorId, moving: bool) {
        let slot = self.slot(id.0).expect("existing reactor");
        let packed = slot.load(Ordering::Acquire) & !MOVING_BIT;
        slot.store(
            if moving { packed | MOVING_BIT } else { packed },
            Ordering::Release,
        );
    }

    /// Appends an entry; the caller holds the directory's write lock.
    fn push(&self, reactor_type: u16, container: u16) -> ReactorId {
        let id = self.len.load(Ordering::Acquire) as usize;
        assert!(id < MAX_REACTORS, "checked by the caller");
        let segment = self.segments[id / PLACEMENT_SEGMENT_SLOTS].get_or_init(|| {
            (0..PLACEMENT_SEGMENT_SLOTS)
                .map(|_| AtomicU32::new(0))
                .collect()
        });
        segment[id % PLACEMENT_SEGMENT_SLOTS].store(
            (u32::from(reactor_type) << 16) | u32::from(container),
            Ordering::Release,
        );
        self.len.store(id as u32 + 1, Ordering::Release);
        ReactorId(id as u32)
    }

    /// Points a reactor at another container; the caller holds the write lock.
    fn set_container(&self, id: ReactorId, container: u16) {
        let slot = self.slot(id.0).expect("existing reactor");
        let reactor_type = slot.load(Ordering::Acquire) >> 16;
        slot.store(
            (reactor_type << 16) | u32::from(container),
            Ordering::Release,
        );
    }

    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire) as usize
    }
}

#[derive(Default)]
pub(crate) struct Directory {
    by_name: HashMap<Box<str>, ReactorId>,
}

pub(crate) struct Container {
    /// One storage relation per schema relation: this container's memory.
    pub(crate) relations: Vec<Arc<Relation>>,
    /// Placement as data: a row per reactor that moved out of this container.
    /// Every transaction entering a reactor here reads its (absent) row, so a
    /// move, which inserts it, aborts every transaction that raced with it.
    pub(crate) moved_away: Arc<Relation>,
    /// Indexes into `DbShared::executors`.
    pub(crate) executors: Vec<usize>,
    round_robin: AtomicUsize,
}

pub(crate) struct DbShared {
    /// Tells this database's executors from another's on a thread.
    pub(crate) db_id: u64,
    pub(crate) schema: Schema,
    pub(crate) deployment: Deployment,
    pub(crate) containers: Vec<Container>,
    pub(crate) executors: Vec<ExecutorHandle>,
    /// Names; taken for writing when reactors are created or moved.
    pub(crate) directory: RwLock<Directory>,
    pub(crate) placements: PlacementTable,
    pub(crate) next_txn_id: AtomicU64,
    /// Planted bug for tests: skip the placement checks on entering a reactor.
    pub(crate) skip_placement_check: AtomicBool,
    /// Per reactor type (schema order): its point-access-only relation, if
    /// any. Such a type's reactors never move (a move extracts rows with a
    /// scan), so entering one needs no moved-away check.
    pub(crate) immovable: Vec<Option<&'static str>>,
}

impl DbShared {
    pub(crate) fn reactor_entry(&self, reactor: ReactorId) -> Result<(u16, u16), ReactorError> {
        self.placements.get(reactor).ok_or_else(|| {
            ReactorError::Directory(DirectoryError::NoSuchReactor(format!("#{}", reactor.0)))
        })
    }

    /// The router: picks one of a container's executors for a reactor.
    pub(crate) fn route(&self, container: usize, reactor: ReactorId) -> usize {
        let c = &self.containers[container];
        let slot = match self.deployment.router {
            RouterPolicy::RoundRobin => c.round_robin.fetch_add(1, Ordering::Relaxed),
            RouterPolicy::Affinity => reactor.0 as usize,
        };
        c.executors[slot % c.executors.len()]
    }
}

/// An embedded Roost database of reactors.
pub struct Database {
    pub(crate) shared: Arc<DbShared>,
}

impl Database {
    pub fn new(schema: Schema, deployment: Deployment) -> Result<Self, DeploymentError> {
        Database::with_engine_config(schema, deployment, EngineConfig::default())
    }

    /// [`Database::new`] over a storage engine built with `config` (its
    /// epoch interval, or planted bugs for the checker's self-tests).
    pub fn with_engine_config(
        schema: Schema,
        deployment: Deployment,
        config: EngineConfig,
    ) -> Result<Self, DeploymentError> {
        deployment.validate(&schema)?;
        static NEXT_DB_ID: AtomicU64 = AtomicU64::new(1);
        let db_id = NEXT_DB_ID.fetch_add(1, Ordering::Relaxed);
        let engine = Engine::new(config);
        let mut containers = Vec::new();
        let mut executors = Vec::new();
        let spin = SpinBudget {
            idle: Duration::from_micros(deployment.spin_before_park_us()),
            active: Duration::from_micros(deployment.spin_while_active_us()),
            yields: deployment.spin_yields(),
        };
        for spec in &deployment.containers {
            let relations = schema
                .relations
                .iter()
                .map(|r| {
                    let name = format!("{}/{}/{}", spec.name, r.reactor_type(), r.name());
                    engine
                        .create_relation_with(&name, r.index_kind())
                        .map_err(|e| DeploymentError::Toml(e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut own = Vec::new();
            for _ in 0..spec.executors {
                own.push(executors.len());
                let handle = ExecutorHandle::spawn(
                    db_id,
                    executors.len(),
                    engine.clone(),
                    deployment.max_active_transactions,
                    deployment.mailbox_capacity,
                    spin,
                )
                .map_err(|e| DeploymentError::ExecutorStart {
                    executor: executors.len(),
                    reason: e.to_string(),
                })?;
                executors.push(handle);
            }
            // Ordered although point access only: it is nearly always empty,
            // and an empty tree answers faster than a key can be hashed.
            let moved_away = engine
                .create_relation(&format!("{}/moved_away", spec.name))
                .map_err(|e| DeploymentError::Toml(e.to_string()))?;
            containers.push(Container {
                relations,
                moved_away,
                executors: own,
                round_robin: AtomicUsize::new(0),
            });
        }
        let immovable = schema
            .reactor_types
            .iter()
            .map(|&t| {
                schema
                    .relations
                    .iter()
                    .find(|r| r.reactor_type() == t && r.index_kind() == IndexKind::Hashed)
                    .map(|r| r.name())
            })
            .collect();
        Ok(Database {
            shared: Arc::new(DbShared {
                db_id,
                schema,
                deployment,
                containers,
                executors,
                directory: RwLock::new(Directory::default()),
                placements: PlacementTable::new(),
                skip_placement_check: AtomicBool::new(false),
                immovable,
                next_txn_id: AtomicU64::new(1),
            }),
        })
    }

    /// Creates a reactor of `reactor_type` named `name`, placed by the deployment.
    pub fn create_reactor(
        &self,
        reactor_type: &str,
        name: &str,
    ) -> Result<ReactorId, DirectoryError> {
        if name.is_empty() || name.len() > MAX_REACTOR_NAME_BYTES {
            return Err(DirectoryError::BadName);
        }
        let type_index = self
            .shared
            .schema
            .reactor_types
            .iter()
            .position(|t| *t == reactor_type)
            .ok_or_else(|| DirectoryError::UnknownReactorType(reactor_type.to_owned()))?;
        assert!(
            type_index < MAX_REACTOR_TYPES,
            "schemas declare fewer than 2^15 reactor types"
        );
        let container = self.shared.deployment.place(name, reactor_type);
        let mut directory = self.shared.directory.write().expect("directory lock");
        if directory.by_name.contains_key(name) {
            return Err(DirectoryError::AlreadyExists(name.to_owned()));
        }
        if self.shared.placements.len() >= MAX_REACTORS {
            return Err(DirectoryError::Full(MAX_REACTORS));
        }
        let id = self
            .shared
            .placements
            .push(type_index as u16, container as u16);
        directory.by_name.insert(name.into(), id);
        Ok(id)
    }

    pub fn reactor(&self, name: &str) -> Result<ReactorId, DirectoryError> {
        let directory = self.shared.directory.read().expect("directory lock");
        directory
            .by_name
            .get(name)
            .copied()
            .ok_or_else(|| DirectoryError::NoSuchReactor(name.to_owned()))
    }

    /// The container a reactor lives in, by name from the deployment.
    pub fn container_of(&self, reactor: ReactorId) -> Result<&str, ReactorError> {
        let (_, container) = self.shared.reactor_entry(reactor)?;
        Ok(&self.shared.deployment.containers[container as usize].name)
    }

    /// Moves `reactor` to container `to` while other transactions keep running:
    /// one transaction extracts all its rows from its container and installs
    /// them in `to`, committed atomically across both; then the directory
    /// points at `to`. Transactions that raced with the move abort and retry;
    /// none sees the reactor half-moved.
    pub fn move_reactor(&self, reactor: ReactorId, to: &str) -> Result<(), ReactorError> {
        let target = self
            .shared
            .deployment
            .containers
            .iter()
            .position(|c| c.name == to)
            .ok_or_else(|| {
                ReactorError::Directory(DirectoryError::NoSuchContainer(to.to_owned()))
            })?;
        let (reactor_type, from) = self.shared.reactor_entry(reactor)?;
        if from as usize == target {
            return Ok(());
        }
        if let Some(relation) = self.shared.immovable[reactor_type as usize] {
            return Err(ReactorError::Immovable {
                reactor_type: self.shared.schema.reactor_types[reactor_type as usize],
                relation,
            });
        }
        // While the move runs, new transactions on the reactor back off instead
        // of racing it: under steady load a long move would otherwise keep
        // losing validation to short transactions (OCC starves long writers).
        self.set_moving(reactor, true);
        let moved = self.run_blocking_with(reactor, Some(reactor), move |ctx| {
            crate::relocate::move_out(ctx, target)
        });
        let _directory = self.shared.directory.write().expect("directory lock");
        if moved.is_ok() {
            self.shared.placements.set_container(reactor, target as u16);
        }
        self.shared.placements.set_moving(reactor, false);
        moved
    }

    /// Plants a bug for the tests that show the move tests can fail: entering
    /// a reactor no longer checks whether it is moving or moved away.
    #[doc(hidden)]
    pub fn plant_bug_skip_placement_check(&self) {
        self.shared
            .skip_placement_check
            .store(true, Ordering::Relaxed);
    }

    fn set_moving(&self, reactor: ReactorId, moving: bool) {
        let _directory = self.shared.directory.write().expect("directory lock");
        self.shared.placements.set_moving(reactor, moving);
    }

    /// Runs `procedure` on `reactor` as a root transaction, retrying it on
    /// conflicts; every call it makes, awaited or not, is part of it. With
    /// the executor's mailbox full (`Deployment::mailbox_capacity`) it
    /// first waits for room: backpressure on whoever submits.
    pub async fn run<T, F, Fut>(&self, reactor: ReactorId, procedure: F) -> Result<T, ReactorError>
    where
        T: Send + 'static,
        F: Fn(ReactorCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ReactorError>> + 'static,
    {
        let (executor, job, result) = self.prepare(reactor, None, procedure)?;
        if self.shared.executors[executor].is_current() {
            // Called by a task of the executor that serves the reactor (a
            // connection served there): no hand-off; a transaction that does
            // not wait commits within this call.
            job();
        } else if !self.shared.executors[executor].submit(job).await {
            return Err(ReactorError::Shutdown);
        }
        result.await.unwrap_or(Err(ReactorError::Shutdown))
    }

    /// This database's executors (indexes for [`run_on_executor`](Self::run_on_executor)).
    pub fn executor_count(&self) -> usize {
        self.shared.executors.len()
    }

    /// Runs `job` on executor `executor`'s thread (for example to serve a
    /// connection there, whose transactions then run without a hand-off),
    /// waiting while its mailbox is full.
    pub async fn run_on_executor(
        &self,
        executor: usize,
        job: impl FnOnce() + Send + 'static,
    ) -> Result<(), ReactorError> {
        let handle = self
            .shared
            .executors
            .get(executor)
            .ok_or(ReactorError::Shutdown)?;
        if handle.submit(Box::new(job)).await {
            Ok(())
        } else {
            Err(ReactorError::Shutdown)
        }
    }

    /// The blocking facade of [`Database::run`], for callers that are not
    /// async (it panics inside an async runtime). With the executor's
    /// mailbox full it blocks until there is room.
    pub fn run_blocking<T, F, Fut>(
        &self,
        reactor: ReactorId,
        procedure: F,
    ) -> Result<T, ReactorError>
    where
        T: Send + 'static,
        F: Fn(ReactorCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ReactorError>> + 'static,
    {
        self.run_blocking_with(reactor, None, procedure)
    }

    fn run_blocking_with<T, F, Fut>(
        &self,
        reactor: ReactorId,
        moving: Option<ReactorId>,
        procedure: F,
    ) -> Result<T, ReactorError>
    where
        T: Send + 'static,
        F: Fn(ReactorCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ReactorError>> + 'static,
    {
        let (executor, job, result) = self.prepare(reactor, moving, procedure)?;
        if !self.shared.executors[executor].submit_blocking(job) {
            return Err(ReactorError::Shutdown);
        }
        result
            .blocking_recv()
            .unwrap_or(Err(ReactorError::Shutdown))
    }

    /// Jobs waiting in each executor's mailbox now (at most the
    /// deployment's `mailbox_capacity` each), in executor order.
    pub fn mailbox_lengths(&self) -> Vec<usize> {
        self.shared.executors.iter().map(|e| e.queued()).collect()
    }

    /// The executor a root transaction on `reactor` goes to, the job that
    /// runs it there, and where its outcome will arrive.
    #[allow(clippy::type_complexity)]
    fn prepare<T, F, Fut>(
        &self,
        reactor: ReactorId,
        moving: Option<ReactorId>,
        procedure: F,
    ) -> Result<
        (
            usize,
            crate::executor::RunJob,
            oneshot::Receiver<Result<T, ReactorError>>,
        ),
        ReactorError,
    >
    where
        T: Send + 'static,
        F: Fn(ReactorCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ReactorError>> + 'static,
    {
        let (_, container) = self.shared.reactor_entry(reactor)?;
        // On one of the container's own executors, the transaction stays
        // there: serving it where the caller is costs no hand-off.
        let executor = crate::executor::current_executor(self.shared.db_id)
            .filter(|e| {
                self.shared.containers[container as usize]
                    .executors
                    .contains(e)
            })
            .unwrap_or_else(|| self.shared.route(container as usize, reactor));
        let (reply, result) = oneshot::channel();
        let shared = Arc::clone(&self.shared);
        let procedure = Arc::new(procedure);
        let job: crate::executor::RunJob = Box::new(move || {
            // Polled at once, and spawned as a task only if it must wait: a
            // transaction whose reactors all live in this container commits
            // within its first poll.
            crate::ctx::run_soon(async move {
                let outcome = run_root(shared, reactor, executor, moving, procedure).await;
                let _ = reply.send(outcome);
            });
        });
        Ok((executor, job, result))
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // Stop executors; their pending tasks (and contexts) are dropped on
        // their own threads.
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            for executor in &mut shared.executors {
                executor.stop();
            }
        } else {
            for executor in &self.shared.executors {
                executor.request_stop();
            }
        }
    }
}
