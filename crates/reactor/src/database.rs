//! The database: schema, deployment (containers, executors), the reactor
//! directory and placement table (see [`crate::placement`] for the seam that
//! says where reactors live), moves, exports and installs, and the entry
//! points that run root transactions.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use roost_storage::{Engine, EngineConfig, Relation};
use tokio::sync::oneshot;

use crate::ctx::ReactorCtx;
use crate::deployment::{Deployment, RouterPolicy};
use crate::error::{DeploymentError, DirectoryError, ExportError, InstallError, ReplicaError};
use crate::executor::{ExecutorHandle, SpinBudget};
use crate::placement::{LocalPlacement, Location, Placement, ReactorKey};
use crate::relocate::ExportedReactor;
use crate::replication::RowChange;
use crate::schema::Schema;
use crate::txn::{run_root, ReactorError, Relocation};

/// A handle on a reactor in this database: dense, assigned by the directory,
/// cheap to pass to [`ReactorCtx::call`]. Not meaningful in another database:
/// a reactor's identity across a cluster is its [`ReactorKey`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReactorId(pub(crate) u32);

/// Most reactors one database holds.
pub const MAX_REACTORS: usize = 1 << 28;

const PLACEMENT_SEGMENT_SLOTS: usize = 1 << 16;
const PLACEMENT_SEGMENTS: usize = MAX_REACTORS / PLACEMENT_SEGMENT_SLOTS;
/// A placement slot packs the container (bits 0..15), the reactor type
/// (bits 15..30), four flags, and (bits 34..64) an epoch that moves with
/// every change of the slot, into one atomic word.
const FIELD_BITS: u32 = 15;
const FIELD_MASK: u32 = (1 << FIELD_BITS) - 1;
/// The reactor lives in another database; `container` is where transactions
/// on it start (and wait for the placement to acquire it).
const REMOTE_BIT: u32 = 1 << 30;
/// A move, export or install of the reactor is in progress (at most one).
const MOVING_BIT: u32 = 1 << 31;
/// The rows here are a replica (Zeus: this node is a reader of the
/// reactor): read-only transactions read them; a write needs the placement
/// to acquire the reactor (ownership).
const REPLICA_BIT: u64 = 1 << 32;
/// A replica that may not be read now (Zeus: Invalid, its newest rows'
/// reliable commit is not finished; or its ownership is being decided).
const INVALID_BIT: u64 = 1 << 33;
const EPOCH_SHIFT: u32 = 34;
/// Epochs wrap at 30 bits: a transaction would have to live through 2^30
/// changes of one slot to mistake an old word for the current one.
const EPOCH_MASK: u64 = (1 << (64 - EPOCH_SHIFT)) - 1;
/// Reactor types a schema may declare.
pub const MAX_REACTOR_TYPES: usize = 1 << FIELD_BITS;
/// Containers a deployment may declare.
pub const MAX_CONTAINERS: usize = 1 << FIELD_BITS;

/// One reactor's placement slot, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) reactor_type: u16,
    pub(crate) container: u16,
    pub(crate) remote: bool,
    pub(crate) moving: bool,
    /// A replica: readable (unless `invalid`), never written here.
    pub(crate) replica: bool,
    /// A replica that may not be read now.
    pub(crate) invalid: bool,
    /// The whole word read, epoch included: the placement record a
    /// transaction entering the reactor observes, validated at its commit
    /// (ignored when packing).
    pub(crate) word: u64,
}

impl Entry {
    /// The word for these fields at `epoch`.
    fn pack(&self, epoch: u64) -> u64 {
        assert!(u32::from(self.container) <= FIELD_MASK);
        assert!(u32::from(self.reactor_type) <= FIELD_MASK);
        assert!(epoch <= EPOCH_MASK);
        // An invalid mark belongs to a replica; a replica's rows are here.
        assert!(!self.invalid || self.replica, "only a replica is invalid");
        assert!(!(self.replica && self.remote), "a replica is local");
        let low = u32::from(self.container)
            | (u32::from(self.reactor_type) << FIELD_BITS)
            | if self.remote { REMOTE_BIT } else { 0 }
            | if self.moving { MOVING_BIT } else { 0 };
        (epoch << EPOCH_SHIFT)
            | if self.replica { REPLICA_BIT } else { 0 }
            | if self.invalid { INVALID_BIT } else { 0 }
            | u64::from(low)
    }

    #[inline]
    fn unpack(word: u64) -> Self {
        let low = word as u32;
        Entry {
            container: (low & FIELD_MASK) as u16,
            reactor_type: ((low >> FIELD_BITS) & FIELD_MASK) as u16,
            remote: low & REMOTE_BIT != 0,
            moving: low & MOVING_BIT != 0,
            replica: word & REPLICA_BIT != 0,
            invalid: word & INVALID_BIT != 0,
            word,
        }
    }
}

/// How an install enters the directory.
#[derive(Clone, Copy, PartialEq, Eq)]
enum InstallAs {
    Owner,
    /// This database's own last export back.
    Reclaim,
    Replica,
}

/// How a database holds a reactor ([`Database::holding`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// Not here (another database holds it, or nobody known here).
    Away,
    /// Here and writable; `frozen` while a freeze, move, export or install
    /// of it runs.
    Owned { frozen: bool },
    /// A replica (Zeus: a reader's copy): read-only transactions read it
    /// while `readable` (Valid).
    Replica { readable: bool },
}

/// Reactor handle to placement slot, read on every call without a lock (a
/// shared read lock would bounce its cache line between executors): slots
/// are atomics in segments allocated as the directory grows, never freed
/// before the database. Written only under the directory's write lock.
pub(crate) struct PlacementTable {
    segments: Box<[OnceLock<Box<[AtomicU64]>>]>,
    len: AtomicU32,
}

impl PlacementTable {
    fn new() -> Self {
        PlacementTable {
            segments: (0..PLACEMENT_SEGMENTS).map(|_| OnceLock::new()).collect(),
            len: AtomicU32::new(0),
        }
    }

    /// The slot of a reactor (what a transaction entering it observes).
    #[inline]
    pub(crate) fn slot(&self, id: ReactorId) -> Option<&AtomicU64> {
        if id.0 >= self.len.load(Ordering::Acquire) {
            return None;
        }
        let id = id.0 as usize;
        self.segments[id / PLACEMENT_SEGMENT_SLOTS]
            .get()
            .map(|s| &s[id % PLACEMENT_SEGMENT_SLOTS])
    }

    #[inline]
    pub(crate) fn get(&self, id: ReactorId) -> Option<Entry> {
        Some(Entry::unpack(self.slot(id)?.load(Ordering::Acquire)))
    }

    /// Appends an entry; the caller holds the directory's write lock.
    fn push(&self, entry: Entry) -> ReactorId {
        let id = self.len.load(Ordering::Acquire) as usize;
        assert!(id < MAX_REACTORS, "checked by the caller");
        let segment = self.segments[id / PLACEMENT_SEGMENT_SLOTS].get_or_init(|| {
            (0..PLACEMENT_SEGMENT_SLOTS)
                .map(|_| AtomicU64::new(0))
                .collect()
        });
        segment[id % PLACEMENT_SEGMENT_SLOTS].store(entry.pack(0), Ordering::Release);
        self.len.store(id as u32 + 1, Ordering::Release);
        ReactorId(id as u32)
    }

    /// Rewrites an entry, moving its epoch (so that a transaction that
    /// observed any earlier word fails validation); the caller holds the
    /// directory's write lock.
    fn update(&self, id: ReactorId, change: impl FnOnce(&mut Entry)) {
        let slot = self.slot(id).expect("existing reactor");
        let word = slot.load(Ordering::Acquire);
        let mut entry = Entry::unpack(word);
        change(&mut entry);
        assert_eq!(
            entry.reactor_type,
            Entry::unpack(word).reactor_type,
            "a reactor keeps its type"
        );
        let epoch = (word >> EPOCH_SHIFT).wrapping_add(1) & EPOCH_MASK;
        slot.store(entry.pack(epoch), Ordering::SeqCst);
    }

    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire) as usize
    }
}

#[derive(Default)]
pub(crate) struct Directory {
    by_name: HashMap<Arc<str>, ReactorId>,
    /// Names by handle (shared with `by_name`).
    names: Vec<Arc<str>>,
    /// Placement versions other than zero: every move, export and install
    /// of a reactor moves its version, and an install must bring a newer
    /// one than this database last had (no stale copy comes back).
    versions: HashMap<ReactorId, u64>,
}

pub(crate) struct Container {
    /// One storage relation per schema relation: this container's memory.
    pub(crate) relations: Vec<Arc<Relation>>,
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
    /// Where reactors live (the seam a cluster's ownership plugs into).
    pub(crate) placement: Arc<dyn Placement>,
    pub(crate) next_txn_id: AtomicU64,
    /// Planted bug for tests: skip the placement checks on entering a reactor.
    pub(crate) skip_placement_check: AtomicBool,
    /// Planted bug for tests: enter replicas marked unreadable (Invalid).
    pub(crate) read_invalid_replicas: AtomicBool,
    /// The last sequence number handed out to a write commit (see
    /// [`crate::replication`]); moves only while the placement replicates.
    pub(crate) sequencer: AtomicU64,
    /// Sequence numbers reported to the placement (debug builds: checked
    /// against `sequencer` when the database is dropped).
    #[cfg(debug_assertions)]
    pub(crate) sequenced_reported: AtomicU64,
    /// Storage relation (by address) to its schema relation index, for
    /// naming the rows a sequenced commit captured.
    relation_index: HashMap<usize, usize>,
}

impl DbShared {
    #[inline]
    pub(crate) fn reactor_entry(&self, reactor: ReactorId) -> Result<Entry, ReactorError> {
        match self.placements.get(reactor) {
            Some(entry) => Ok(entry),
            None => Err(no_such_reactor(reactor)),
        }
    }

    /// The key of a reactor this database has a handle on.
    pub(crate) fn key_of(&self, reactor: ReactorId) -> Result<ReactorKey, DirectoryError> {
        let entry = self
            .placements
            .get(reactor)
            .ok_or_else(|| DirectoryError::NoSuchReactor(format!("#{}", reactor.0)))?;
        let directory = self.directory.read().expect("directory lock");
        let name = &directory.names[reactor.0 as usize];
        ReactorKey::new(self.schema.reactor_types[entry.reactor_type as usize], name)
    }

    /// The schema relation index of one of this database's storage relations.
    pub(crate) fn schema_relation(&self, relation: &Relation) -> usize {
        *self
            .relation_index
            .get(&(relation as *const Relation as usize))
            .expect("a relation of this database")
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

#[cold]
fn no_such_reactor(reactor: ReactorId) -> ReactorError {
    ReactorError::Directory(DirectoryError::NoSuchReactor(format!("#{}", reactor.0)))
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
        let placement = Arc::new(LocalPlacement::new(&deployment));
        Database::with_placement(schema, deployment, config, placement)
    }

    /// A database whose reactors live where `placement` says (a cluster's
    /// ownership layer; [`LocalPlacement`] is what [`Database::new`] uses).
    pub fn with_placement(
        schema: Schema,
        deployment: Deployment,
        config: EngineConfig,
        placement: Arc<dyn Placement>,
    ) -> Result<Self, DeploymentError> {
        deployment.validate(&schema)?;
        assert!(
            schema.reactor_types.len() <= MAX_REACTOR_TYPES,
            "schemas declare at most 2^15 reactor types"
        );
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
            containers.push(Container {
                relations,
                executors: own,
                round_robin: AtomicUsize::new(0),
            });
        }
        let relation_index = containers
            .iter()
            .flat_map(|c| c.relations.iter().enumerate())
            .map(|(index, r)| (Arc::as_ptr(r) as usize, index))
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
                placement,
                skip_placement_check: AtomicBool::new(false),
                read_invalid_replicas: AtomicBool::new(false),
                next_txn_id: AtomicU64::new(1),
                sequencer: AtomicU64::new(0),
                #[cfg(debug_assertions)]
                sequenced_reported: AtomicU64::new(0),
                relation_index,
            }),
        })
    }

    fn type_index(&self, reactor_type: &str) -> Result<u16, DirectoryError> {
        let index = self
            .shared
            .schema
            .reactor_types
            .iter()
            .position(|t| *t == reactor_type)
            .ok_or_else(|| DirectoryError::UnknownReactorType(reactor_type.to_owned()))?;
        Ok(u16::try_from(index).expect("fewer than 2^15 reactor types"))
    }

    /// The local container `placement` answers for `key`, if it answers one.
    fn placed_here(&self, key: &ReactorKey) -> Result<Option<u16>, DirectoryError> {
        match self.shared.placement.locate(key) {
            Location::Local { container } if container < self.shared.containers.len() => {
                Ok(Some(container as u16))
            }
            Location::Local { container } => {
                Err(DirectoryError::NoSuchContainer(format!("#{container}")))
            }
            Location::Remote | Location::Unknown => Ok(None),
        }
    }

    /// Adds a reactor to the directory; the caller holds its write lock and
    /// checked the name is free.
    fn register(
        &self,
        directory: &mut Directory,
        name: &str,
        entry: Entry,
    ) -> Result<ReactorId, DirectoryError> {
        debug_assert!(!directory.by_name.contains_key(name));
        if self.shared.placements.len() >= MAX_REACTORS {
            return Err(DirectoryError::Full(MAX_REACTORS));
        }
        let id = self.shared.placements.push(entry);
        let name: Arc<str> = name.into();
        assert_eq!(directory.names.len(), id.0 as usize, "handles are dense");
        directory.names.push(Arc::clone(&name));
        directory.by_name.insert(name, id);
        Ok(id)
    }

    /// Creates a reactor of `reactor_type` named `name`, in the container its
    /// placement names (the deployment's rules, with [`LocalPlacement`]).
    pub fn create_reactor(
        &self,
        reactor_type: &str,
        name: &str,
    ) -> Result<ReactorId, DirectoryError> {
        let key = ReactorKey::new(reactor_type, name)?;
        let type_index = self.type_index(reactor_type)?;
        let container = self
            .placed_here(&key)?
            .ok_or_else(|| DirectoryError::NotPlacedHere(key.to_string()))?;
        let mut directory = self.shared.directory.write().expect("directory lock");
        if directory.by_name.contains_key(name) {
            return Err(DirectoryError::AlreadyExists(name.to_owned()));
        }
        self.register(
            &mut directory,
            name,
            Entry {
                reactor_type: type_index,
                container,
                remote: false,
                moving: false,
                replica: false,
                invalid: false,
                word: 0,
            },
        )
    }

    pub fn reactor(&self, name: &str) -> Result<ReactorId, DirectoryError> {
        let directory = self.shared.directory.read().expect("directory lock");
        directory
            .by_name
            .get(name)
            .copied()
            .ok_or_else(|| DirectoryError::NoSuchReactor(name.to_owned()))
    }

    /// The handle on the reactor `key` names. A reactor this database does
    /// not hold, which its placement says lives elsewhere, gets a handle
    /// here: transactions on it wait for the placement to acquire it.
    pub fn reactor_by_key(&self, key: &ReactorKey) -> Result<ReactorId, DirectoryError> {
        let type_index = self.type_index(key.reactor_type())?;
        let known = |directory: &Directory| -> Result<Option<ReactorId>, DirectoryError> {
            let Some(&id) = directory.by_name.get(key.name()) else {
                return Ok(None);
            };
            let entry = self.shared.placements.get(id).expect("registered");
            if entry.reactor_type != type_index {
                return Err(DirectoryError::TypeMismatch {
                    name: key.name().to_owned(),
                    existing: self.shared.schema.reactor_types[entry.reactor_type as usize],
                });
            }
            Ok(Some(id))
        };
        if let Some(id) = known(&self.shared.directory.read().expect("directory lock"))? {
            return Ok(id);
        }
        if self.shared.placement.locate(key) != Location::Remote {
            return Err(DirectoryError::NoSuchReactor(key.to_string()));
        }
        let start = self.shared.deployment.place(key.name(), key.reactor_type()) as u16;
        let mut directory = self.shared.directory.write().expect("directory lock");
        if let Some(id) = known(&directory)? {
            return Ok(id);
        }
        self.register(
            &mut directory,
            key.name(),
            Entry {
                reactor_type: type_index,
                container: start,
                remote: true,
                moving: false,
                replica: false,
                invalid: false,
                word: 0,
            },
        )
    }

    /// The cluster-wide identity of a reactor this database has a handle on.
    pub fn key_of(&self, reactor: ReactorId) -> Result<ReactorKey, DirectoryError> {
        self.shared.key_of(reactor)
    }

    /// Whether this database owns `reactor` now: it lives here and is not a
    /// replica (a transaction rooted at a replica that then leaves would
    /// make the placement acquire it). What [`ReactorCtx::lives_here`]
    /// answers inside a transaction.
    pub fn owns(&self, reactor: ReactorId) -> bool {
        self.shared
            .reactor_entry(reactor)
            .is_ok_and(|entry| !entry.remote && !entry.replica)
    }

    /// Where a reactor lives, as this database sees it (a replica held
    /// here is `Local`).
    pub fn location(&self, reactor: ReactorId) -> Result<Location, DirectoryError> {
        let entry = self
            .shared
            .placements
            .get(reactor)
            .ok_or_else(|| DirectoryError::NoSuchReactor(format!("#{}", reactor.0)))?;
        Ok(if entry.remote {
            Location::Remote
        } else {
            Location::Local {
                container: entry.container as usize,
            }
        })
    }

    /// The container a reactor lives in, by name from the deployment.
    pub fn container_of(&self, reactor: ReactorId) -> Result<&str, ReactorError> {
        let entry = self.shared.reactor_entry(reactor)?;
        if entry.remote {
            return Err(DirectoryError::NotLocal(self.shared.key_of(reactor)?.to_string()).into());
        }
        Ok(&self.shared.deployment.containers[entry.container as usize].name)
    }

    /// Marks a move, export or install of `reactor` as started, unless one
    /// is in progress. Returns the entry as it was.
    fn try_begin_move(&self, reactor: ReactorId) -> Option<Entry> {
        let _directory = self.shared.directory.write().expect("directory lock");
        let entry = self.shared.placements.get(reactor).expect("registered");
        if entry.moving {
            return None;
        }
        self.shared.placements.update(reactor, |e| e.moving = true);
        // Before the relocation touches any row: a committer that validated
        // the slot's old word has locked its records by then, or sees this.
        fence(Ordering::SeqCst);
        Some(entry)
    }

    /// Ends a move, export or install: `change` applied (if it committed)
    /// and the moving mark cleared, under the directory's lock. A committed
    /// change moves the placement version: to `installed` (an install's,
    /// newer than this database's), else one up. Returns the version.
    fn end_move(
        &self,
        reactor: ReactorId,
        change: Option<impl FnOnce(&mut Entry)>,
        installed: Option<u64>,
    ) -> u64 {
        let mut directory = self.shared.directory.write().expect("directory lock");
        let committed = change.is_some();
        self.shared.placements.update(reactor, |e| {
            assert!(e.moving, "a move in progress");
            if let Some(change) = change {
                change(e);
            }
            e.moving = false;
        });
        let version = directory.versions.entry(reactor).or_insert(0);
        if committed {
            let next = installed.unwrap_or(*version + 1);
            assert!(next > *version, "placement versions only grow");
            *version = next;
        }
        *version
    }

    /// Moves `reactor` to container `to` while other transactions keep running:
    /// one transaction extracts all its rows from its container and installs
    /// them in `to`, committed atomically across both; then the directory
    /// points at `to`. Transactions that raced with the move abort and retry;
    /// none sees the reactor half-moved. Waits for a move, export or install
    /// of the reactor already in progress.
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
        self.shared.reactor_entry(reactor)?;
        let entry = loop {
            match self.try_begin_move(reactor) {
                Some(entry) => break entry,
                None => std::thread::sleep(Duration::from_micros(100)),
            }
        };
        if entry.remote {
            let key = self.shared.key_of(reactor);
            self.end_move(reactor, None::<fn(&mut Entry)>, None);
            return Err(DirectoryError::NotLocal(key?.to_string()).into());
        }
        if entry.container as usize == target {
            self.end_move(reactor, None::<fn(&mut Entry)>, None);
            return Ok(());
        }
        // While the move runs, new transactions on the reactor back off instead
        // of racing it: under steady load a long move would otherwise keep
        // losing validation to short transactions (OCC starves long writers).
        let moved = self.run_blocking_with(reactor, Some((reactor, Relocation::Out)), move |ctx| {
            crate::relocate::move_out(ctx, target)
        });
        let change = moved
            .is_ok()
            .then_some(|e: &mut Entry| e.container = target as u16);
        self.end_move(reactor, change, None);
        moved
    }

    /// Takes the reactor `key` out of this database, in one transaction that
    /// extracts (deletes) all its rows, while other transactions keep
    /// running: those that raced with it fail validation (the placement word
    /// they observed changed) and, finding the reactor remote, wait for the
    /// placement to acquire it. Returns its rows, keyed by relation
    /// name and key without this database's prefix, and its new placement
    /// version, for [`install_reactor`](Self::install_reactor) elsewhere.
    /// Blocks, as [`run_blocking`](Self::run_blocking) does (not from an
    /// executor).
    pub fn export_reactor(&self, key: &ReactorKey) -> Result<ExportedReactor, ExportError> {
        if !self.freeze_reactor(key)? {
            return Err(DirectoryError::NotLocal(key.to_string()).into());
        }
        self.export_frozen_reactor(key)
    }

    /// Freezes the local reactor `key` for a decision about it (Zeus: may
    /// ownership leave?): marked moving, as an export marks it, so that
    /// every transaction that entered it before fails its commit (the
    /// placement word it observed changed) and none enters it, until
    /// [`thaw_reactor`](Self::thaw_reactor) or
    /// [`export_frozen_reactor`](Self::export_frozen_reactor). A transaction
    /// that committed on it before has its sequence number already
    /// ([`last_sequence_number`](Self::last_sequence_number) read after this
    /// covers it). `Ok(false)`: the reactor is not local here (nothing
    /// frozen); `Err(Busy)`: a move, export or install of it is running.
    pub fn freeze_reactor(&self, key: &ReactorKey) -> Result<bool, ExportError> {
        let reactor = self.reactor_by_key(key)?;
        let entry = self.try_begin_move(reactor).ok_or(ExportError::Busy)?;
        if entry.remote || entry.replica {
            // Not this database's to write: nothing to freeze.
            self.end_move(reactor, None::<fn(&mut Entry)>, None);
            return Ok(false);
        }
        debug_assert!(self
            .shared
            .placements
            .get(reactor)
            .is_some_and(|e| e.moving));
        Ok(true)
    }

    /// Ends a [`freeze_reactor`](Self::freeze_reactor) with the reactor
    /// still here: transactions enter it again.
    pub fn thaw_reactor(&self, key: &ReactorKey) -> Result<(), ExportError> {
        let reactor = self.reactor_by_key(key)?;
        let frozen = self
            .shared
            .placements
            .get(reactor)
            .is_some_and(|e| e.moving && !e.remote && !e.replica);
        if !frozen {
            return Err(ExportError::NotFrozen(key.clone()));
        }
        self.end_move(reactor, None::<fn(&mut Entry)>, None);
        Ok(())
    }

    /// [`export_reactor`](Self::export_reactor) of a reactor this caller
    /// froze ([`freeze_reactor`](Self::freeze_reactor)); the freeze ends
    /// with it, exported or not.
    pub fn export_frozen_reactor(&self, key: &ReactorKey) -> Result<ExportedReactor, ExportError> {
        let reactor = self.reactor_by_key(key)?;
        let frozen = self
            .shared
            .placements
            .get(reactor)
            .is_some_and(|e| e.moving && !e.remote && !e.replica);
        if !frozen {
            return Err(ExportError::NotFrozen(key.clone()));
        }
        let rows = self.run_blocking_with(reactor, Some((reactor, Relocation::Out)), |ctx| {
            crate::relocate::export(ctx)
        });
        match rows {
            Ok(rows) => {
                let rows = crate::relocate::encode_rows(&self.shared.schema, &rows);
                let version = self.end_move(reactor, Some(|e: &mut Entry| e.remote = true), None);
                Ok(ExportedReactor::new(key.clone(), version, rows))
            }
            Err(e) => {
                self.end_move(reactor, None::<fn(&mut Entry)>, None);
                Err(ExportError::Transaction(e))
            }
        }
    }

    /// Installs a reactor exported by another database (or this one) here,
    /// in the container the placement names, in one transaction. The
    /// reactor must not be local here already, and `exported` must be newer
    /// than any copy this database had. Returns its handle here. Blocks, as
    /// [`run_blocking`](Self::run_blocking) does.
    pub fn install_reactor(&self, exported: &ExportedReactor) -> Result<ReactorId, InstallError> {
        self.install(exported, InstallAs::Owner)
    }

    /// Installs back the reactor this database exported last, `exported`
    /// itself, when the hand-over it was exported for did not happen (the
    /// ownership protocol released it and this node stayed its owner). The
    /// caller vouches that no other database took it over meanwhile: the
    /// version check accepts the export's own version here, which
    /// [`install_reactor`](Self::install_reactor) refuses as stale.
    pub fn reclaim_reactor(&self, exported: &ExportedReactor) -> Result<ReactorId, InstallError> {
        self.install(exported, InstallAs::Reclaim)
    }

    /// Installs `exported` as a **replica** (Zeus: this node becomes one of
    /// the reactor's readers): read-only transactions read it once
    /// [`set_replica_readable`](Self::set_replica_readable) says so (it
    /// starts unreadable); a write to it makes the placement acquire it.
    /// The reactor must not be here already. No placement-version check:
    /// which copy is current is the replication protocol's business (its
    /// `t_version`), not this database's.
    pub fn install_replica(&self, exported: &ExportedReactor) -> Result<ReactorId, InstallError> {
        self.install(exported, InstallAs::Replica)
    }

    fn install(
        &self,
        exported: &ExportedReactor,
        mode: InstallAs,
    ) -> Result<ReactorId, InstallError> {
        let reclaim = mode == InstallAs::Reclaim;
        let key = exported.key();
        let type_index = self.type_index(key.reactor_type())?;
        let rows = Arc::new(crate::relocate::decode_rows(
            &self.shared.schema,
            key.reactor_type(),
            exported.rows(),
        )?);
        let container = if mode == InstallAs::Replica {
            // A replica lives where the deployment's rules put the reactor;
            // the placement answers only for owned ones.
            self.shared.deployment.place(key.name(), key.reactor_type()) as u16
        } else {
            self.placed_here(key)?
                .ok_or_else(|| InstallError::NotPlacedHere(key.clone()))?
        };
        let reactor = {
            let mut directory = self.shared.directory.write().expect("directory lock");
            match directory.by_name.get(key.name()).copied() {
                Some(reactor) => {
                    let entry = self.shared.placements.get(reactor).expect("registered");
                    if entry.reactor_type != type_index {
                        return Err(DirectoryError::TypeMismatch {
                            name: key.name().to_owned(),
                            existing: self.shared.schema.reactor_types[entry.reactor_type as usize],
                        }
                        .into());
                    }
                    if entry.moving {
                        return Err(InstallError::Busy);
                    }
                    if !entry.remote {
                        return Err(InstallError::AlreadyLocal(key.clone()));
                    }
                    let have = directory.versions.get(&reactor).copied().unwrap_or(0);
                    let stale = if mode == InstallAs::Replica {
                        false
                    } else if reclaim {
                        have > exported.version()
                    } else {
                        have >= exported.version()
                    };
                    if stale {
                        return Err(InstallError::Stale {
                            have,
                            got: exported.version(),
                        });
                    }
                    self.shared.placements.update(reactor, |e| {
                        e.container = container;
                        e.moving = true;
                    });
                    fence(Ordering::SeqCst);
                    reactor
                }
                None => self.register(
                    &mut directory,
                    key.name(),
                    Entry {
                        reactor_type: type_index,
                        container,
                        remote: true,
                        moving: true,
                        replica: false,
                        invalid: false,
                        word: 0,
                    },
                )?,
            }
        };
        let installed =
            self.run_blocking_with(reactor, Some((reactor, Relocation::In)), move |ctx| {
                crate::relocate::install(ctx, Arc::clone(&rows))
            });
        match installed {
            Ok(()) if mode == InstallAs::Replica => {
                self.end_move(
                    reactor,
                    Some(|e: &mut Entry| {
                        e.remote = false;
                        e.replica = true;
                        e.invalid = true;
                    }),
                    None,
                );
                Ok(reactor)
            }
            Ok(()) => {
                // A reclaim moves the version past its own export's.
                let installed = (!reclaim).then_some(exported.version());
                self.end_move(reactor, Some(|e: &mut Entry| e.remote = false), installed);
                Ok(reactor)
            }
            Err(e) => {
                self.end_move(reactor, None::<fn(&mut Entry)>, None);
                Err(InstallError::Transaction(e))
            }
        }
    }

    /// How this database holds `key` now.
    pub fn holding(&self, key: &ReactorKey) -> Result<Holding, DirectoryError> {
        let type_index = self.type_index(key.reactor_type())?;
        let directory = self.shared.directory.read().expect("directory lock");
        let Some(&reactor) = directory.by_name.get(key.name()) else {
            return Ok(Holding::Away);
        };
        let entry = self.shared.placements.get(reactor).expect("registered");
        if entry.reactor_type != type_index {
            return Err(DirectoryError::TypeMismatch {
                name: key.name().to_owned(),
                existing: self.shared.schema.reactor_types[entry.reactor_type as usize],
            });
        }
        Ok(if entry.remote {
            Holding::Away
        } else if entry.replica {
            Holding::Replica {
                readable: !entry.invalid,
            }
        } else {
            Holding::Owned {
                frozen: entry.moving,
            }
        })
    }

    /// The handle and entry of a reactor held here as a replica.
    fn replica_entry(&self, key: &ReactorKey) -> Result<(ReactorId, Entry), ReplicaError> {
        let reactor = self.reactor_by_key(key)?;
        let entry = self.shared.placements.get(reactor).expect("registered");
        if entry.remote || !entry.replica {
            return Err(ReplicaError::NotReplica(key.clone()));
        }
        Ok((reactor, entry))
    }

    /// Marks the replica `reactor` busy for an apply or a drop, checking
    /// under the directory's lock that it is still a replica: a promotion
    /// since [`replica_entry`](Self::replica_entry) looked must not let
    /// them write, or drop, an owned reactor.
    fn begin_replica_move(&self, key: &ReactorKey, reactor: ReactorId) -> Result<(), ReplicaError> {
        let entry = self.try_begin_move(reactor).ok_or(ReplicaError::Busy)?;
        if entry.remote || !entry.replica {
            self.end_move(reactor, None::<fn(&mut Entry)>, None);
            return Err(ReplicaError::NotReplica(key.clone()));
        }
        Ok(())
    }

    /// Applies a reliable commit's changed rows (an R-INV's, for this
    /// reactor) to the replica `key`, in one transaction, and marks it
    /// unreadable (Invalid) in the same step: no read-only transaction sees
    /// the new rows before [`set_replica_readable`](Self::set_replica_readable)
    /// (its R-VAL), and one that read the old rows and commits after fails
    /// its validation (the placement word moved). Blocks, as
    /// [`run_blocking`](Self::run_blocking) does.
    pub fn apply_to_replica(
        &self,
        key: &ReactorKey,
        changes: Vec<RowChange>,
    ) -> Result<(), ReplicaError> {
        self.apply_to_replicas(vec![(key.clone(), changes)])
            .pop()
            .expect("one outcome per replica")
    }

    /// [`apply_to_replica`](Self::apply_to_replica) for several replicas
    /// at once: every apply is handed to its executor before the first is
    /// waited for, so a batch costs one wait instead of one hand-off per
    /// reactor. Outcomes in the batch's order; one replica's failure
    /// leaves the others applied. Blocks, as [`run_blocking`](Self::run_blocking)
    /// does.
    pub fn apply_to_replicas(
        &self,
        batch: Vec<(ReactorKey, Vec<RowChange>)>,
    ) -> Vec<Result<(), ReplicaError>> {
        type Started = (ReactorId, oneshot::Receiver<Result<(), ReactorError>>);
        let mut started: Vec<Result<Started, ReplicaError>> = Vec::with_capacity(batch.len());
        for (key, changes) in batch {
            started.push(self.start_replica_apply(&key, changes));
        }
        let outcomes: Vec<Result<(), ReplicaError>> = started
            .into_iter()
            .map(|start| {
                let (reactor, result) = start?;
                let applied = wait_parked(result).unwrap_or(Err(ReactorError::Shutdown));
                // Applied or not, the replica is unreadable (Invalid): on
                // failure it is stale until a copy replaces it.
                self.end_move(reactor, Some(|e: &mut Entry| e.invalid = true), None);
                applied.map_err(ReplicaError::Transaction)
            })
            .collect();
        outcomes
    }

    /// Checks one replica apply of [`apply_to_replicas`](Self::apply_to_replicas),
    /// marks the replica busy and hands its transaction to its executor.
    #[allow(clippy::type_complexity)]
    fn start_replica_apply(
        &self,
        key: &ReactorKey,
        changes: Vec<RowChange>,
    ) -> Result<(ReactorId, oneshot::Receiver<Result<(), ReactorError>>), ReplicaError> {
        let (reactor, _) = self.replica_entry(key)?;
        let relations = changes
            .iter()
            .map(|change| {
                self.shared
                    .schema
                    .relations
                    .iter()
                    .position(|r| {
                        r.reactor_type() == key.reactor_type() && r.name() == change.relation
                    })
                    .ok_or_else(|| ReplicaError::UnknownRelation {
                        reactor_type: key.reactor_type().to_owned(),
                        relation: change.relation.clone(),
                    })
            })
            .collect::<Result<Vec<usize>, ReplicaError>>()?;
        self.begin_replica_move(key, reactor)?;
        let changes = Arc::new((changes, relations));
        let prepared = self.prepare(reactor, Some((reactor, Relocation::Out)), move |ctx| {
            let changes = Arc::clone(&changes);
            async move { ctx.apply_row_changes(&changes.0, &changes.1) }
        });
        let submitted = prepared.and_then(|(executor, job, result)| {
            if self.shared.executors[executor].submit_blocking(job) {
                Ok(result)
            } else {
                Err(ReactorError::Shutdown)
            }
        });
        match submitted {
            Ok(result) => Ok((reactor, result)),
            Err(error) => {
                self.end_move(reactor, Some(|e: &mut Entry| e.invalid = true), None);
                Err(ReplicaError::Transaction(error))
            }
        }
    }

    /// Marks the replica `key` readable (Valid) or not. A change moves its
    /// placement word, so a read-only transaction that entered it before
    /// fails its validation; no change, no move.
    pub fn set_replica_readable(
        &self,
        key: &ReactorKey,
        readable: bool,
    ) -> Result<(), ReplicaError> {
        let (reactor, _) = self.replica_entry(key)?;
        let _directory = self.shared.directory.write().expect("directory lock");
        let entry = self.shared.placements.get(reactor).expect("registered");
        if !entry.replica || entry.remote {
            return Err(ReplicaError::NotReplica(key.clone()));
        }
        if entry.moving {
            return Err(ReplicaError::Busy);
        }
        if entry.invalid == readable {
            self.shared
                .placements
                .update(reactor, |e| e.invalid = !readable);
        }
        Ok(())
    }

    /// Makes the replica `key` this database's own (Zeus: this reader
    /// became the owner): writable from now on, with the rows it has.
    pub fn promote_replica(&self, key: &ReactorKey) -> Result<(), ReplicaError> {
        let (reactor, _) = self.replica_entry(key)?;
        let _directory = self.shared.directory.write().expect("directory lock");
        let entry = self.shared.placements.get(reactor).expect("registered");
        // Checked again under the lock: a drop that ended since the look
        // above left no replica (and no rows) to promote.
        if !entry.replica || entry.remote {
            return Err(ReplicaError::NotReplica(key.clone()));
        }
        if entry.moving {
            return Err(ReplicaError::Busy);
        }
        self.shared.placements.update(reactor, |e| {
            e.replica = false;
            e.invalid = false;
        });
        Ok(())
    }

    /// Turns the reactor `key`, writable here, into an unreadable replica
    /// in place (Zeus: the owner hands ownership over and stays a reader).
    /// Ends a freeze of it ([`freeze_reactor`](Self::freeze_reactor)); the
    /// caller vouches that no write of it awaits replication. Transactions
    /// that entered it before fail their commit.
    pub fn demote_to_replica(&self, key: &ReactorKey) -> Result<(), ReplicaError> {
        let reactor = self.reactor_by_key(key)?;
        let _directory = self.shared.directory.write().expect("directory lock");
        let entry = self.shared.placements.get(reactor).expect("registered");
        if entry.remote || entry.replica {
            return Err(ReplicaError::NotOwned(key.clone()));
        }
        self.shared.placements.update(reactor, |e| {
            e.moving = false;
            e.replica = true;
            e.invalid = true;
        });
        // Before the rows are read as a replica's: a committer that
        // validated the old word has locked its records by then.
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// A copy of the rows of `key`, held here (owned or a replica), without
    /// taking them out: what another node installs. Blocks, as
    /// [`run_blocking`](Self::run_blocking) does.
    pub fn snapshot_reactor(&self, key: &ReactorKey) -> Result<ExportedReactor, ExportError> {
        let reactor = self.reactor_by_key(key)?;
        let entry = self.shared.placements.get(reactor).expect("registered");
        if entry.remote {
            return Err(DirectoryError::NotLocal(key.to_string()).into());
        }
        let rows = self
            .run_blocking_with(
                reactor,
                Some((reactor, Relocation::Out)),
                |ctx| async move { ctx.extract_rows(false) },
            )
            .map_err(ExportError::Transaction)?;
        let rows = crate::relocate::encode_rows(&self.shared.schema, &rows);
        let version = {
            let directory = self.shared.directory.read().expect("directory lock");
            directory.versions.get(&reactor).copied().unwrap_or(0)
        };
        Ok(ExportedReactor::new(key.clone(), version, rows))
    }

    /// Removes the replica `key` and its rows (Zeus: this node is no
    /// longer one of its readers).
    pub fn drop_replica(&self, key: &ReactorKey) -> Result<(), ReplicaError> {
        let (reactor, _) = self.replica_entry(key)?;
        self.begin_replica_move(key, reactor)?;
        let removed = self.run_blocking_with(
            reactor,
            Some((reactor, Relocation::Out)),
            |ctx| async move { ctx.extract_rows(true).map(|_| ()) },
        );
        match removed {
            Ok(()) => {
                self.end_move(
                    reactor,
                    Some(|e: &mut Entry| {
                        e.remote = true;
                        e.replica = false;
                        e.invalid = false;
                    }),
                    None,
                );
                Ok(())
            }
            Err(e) => {
                self.end_move(reactor, None::<fn(&mut Entry)>, None);
                Err(ReplicaError::Transaction(e))
            }
        }
    }

    /// Plants a bug for the tests that show the move tests can fail: entering
    /// a reactor no longer checks whether it is moving or moved away.
    #[doc(hidden)]
    pub fn plant_bug_skip_placement_check(&self) {
        self.shared
            .skip_placement_check
            .store(true, Ordering::Relaxed);
    }

    /// Plants a bug for the test that shows the replica read test can fail:
    /// entering a replica no longer checks whether it is marked readable.
    #[doc(hidden)]
    pub fn plant_bug_read_invalid_replicas(&self) {
        self.shared
            .read_invalid_replicas
            .store(true, Ordering::Relaxed);
    }

    /// The last sequence number handed out to a write commit (0: none
    /// yet); every number up to it was or is being reported to
    /// [`Placement::sequenced`](crate::Placement::sequenced). Moves only
    /// while the placement [`replicates`](crate::Placement::replicates).
    pub fn last_sequence_number(&self) -> u64 {
        self.shared.sequencer.load(Ordering::SeqCst)
    }

    /// Index entries that partition listings (moves and exports of reactors
    /// with hash-indexed relations) copied so far, over every container: for
    /// the test that extraction visits only the moving reactor's rows.
    #[doc(hidden)]
    pub fn partition_entries_listed(&self) -> u64 {
        self.shared
            .containers
            .iter()
            .flat_map(|c| &c.relations)
            .map(|r| r.partition_entries_listed())
            .sum()
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
    /// async. On a thread of an async runtime it blocks that thread (the
    /// ownership driver's exports and installs, a few microseconds each);
    /// it must not be called from one of this database's executors. With
    /// the executor's mailbox full it blocks until there is room.
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
        relocating: Option<(ReactorId, Relocation)>,
        procedure: F,
    ) -> Result<T, ReactorError>
    where
        T: Send + 'static,
        F: Fn(ReactorCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ReactorError>> + 'static,
    {
        let (executor, job, result) = self.prepare(reactor, relocating, procedure)?;
        if !self.shared.executors[executor].submit_blocking(job) {
            return Err(ReactorError::Shutdown);
        }
        wait_parked(result).unwrap_or(Err(ReactorError::Shutdown))
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
        relocating: Option<(ReactorId, Relocation)>,
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
        // A remote reactor's transaction starts in the container its slot
        // names and waits there for the placement to acquire it.
        let container = self.shared.reactor_entry(reactor)?.container;
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
                let outcome = run_root(shared, reactor, executor, relocating, procedure).await;
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
            // Every commit reports its number within the same poll that
            // took it, so with the executors stopped all are reported.
            #[cfg(debug_assertions)]
            if !std::thread::panicking() {
                assert_eq!(
                    *shared.sequenced_reported.get_mut(),
                    *shared.sequencer.get_mut(),
                    "every sequence number handed out was reported once"
                );
            }
        } else {
            for executor in &self.shared.executors {
                executor.request_stop();
            }
        }
    }
}

/// Waits for `result` by parking this thread: unlike tokio's
/// `blocking_recv`, allowed on a thread that runs an async runtime (the
/// ownership driver's), which then simply waits, as a blocking call does.
fn wait_parked<T>(result: oneshot::Receiver<T>) -> Option<T> {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    // Unconstrained: on a runtime's thread, tokio's cooperative budget
    // would otherwise defer the wake-up to the runtime's next park, which a
    // parked thread never reaches.
    let mut result = std::pin::pin!(tokio::task::unconstrained(result));
    loop {
        match result.as_mut().poll(&mut cx) {
            Poll::Ready(outcome) => return outcome.ok(),
            // A spurious unpark only polls again.
            Poll::Pending => std::thread::park(),
        }
    }
}
