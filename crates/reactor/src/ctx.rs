//! The context a procedure runs in: its reactor, its container's database
//! context for the root transaction, typed access to the reactor's relations,
//! and asynchronous calls on other reactors.

use std::cell::RefCell;
use std::future::Future;
use std::ops::{Bound, RangeBounds};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use roost_storage::{
    ConflictKind, IndexKind, KeyCodec, Relation, ScanDirection, TxError, PARTITION_PREFIX_BYTES,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::database::{Entry, ReactorId};
use crate::executor::{with_local, Participant, PRESENT_MEMO_LIMIT};
use crate::schema::RelationDef;
use crate::txn::{ReactorError, Relocation, RootTxn};

/// Bytes of the reactor handle that prefixes every key: a reactor's rows are
/// one contiguous range of each ordered relation, and one partition of each
/// hash-indexed one.
pub(crate) const REACTOR_PREFIX_BYTES: usize = 4;
const _: () = assert!(REACTOR_PREFIX_BYTES == PARTITION_PREFIX_BYTES);

/// One row of a reactor being moved: schema relation index, key without the
/// reactor prefix, value bytes.
pub(crate) struct ExtractedRow {
    pub(crate) relation: usize,
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
}

/// What a procedure sees. Cheap to clone; lives on its executor.
#[derive(Clone)]
pub struct ReactorCtx {
    root: Arc<RootTxn>,
    reactor: ReactorId,
    reactor_type: u16,
    container: usize,
    /// The reactor is a replica here (Zeus: this node is one of its
    /// readers): this transaction may read it; a write first needs the
    /// placement to acquire it.
    replica: bool,
    participant: Rc<Participant>,
}

impl ReactorCtx {
    /// Enters `container` (on the executor serving it for this root),
    /// creating the root's context there on first use, and checks the reactor
    /// lives there (see `check_placement`) and observes its placement word.
    pub(crate) fn enter(
        root: Arc<RootTxn>,
        reactor: ReactorId,
        container: usize,
    ) -> Result<Self, ReactorError> {
        if root.relocating == Some((reactor, Relocation::In)) {
            // Installing it here: it does not live here yet.
            return ReactorCtx::enter_unchecked(root, reactor, container);
        }
        let entry = root.db.reactor_entry(reactor)?;
        check_placement(&root, reactor, entry, container)?;
        let replica = read_only_replica(&root, reactor, entry);
        let ctx = ReactorCtx::enter_as(root, reactor, entry.reactor_type, container, replica);
        ctx.observe_placement(entry);
        Ok(ctx)
    }

    /// Enters without the placement check (the install half of a move).
    pub(crate) fn enter_unchecked(
        root: Arc<RootTxn>,
        reactor: ReactorId,
        container: usize,
    ) -> Result<Self, ReactorError> {
        let reactor_type = root.db.reactor_entry(reactor)?.reactor_type;
        Ok(ReactorCtx::enter_as(
            root,
            reactor,
            reactor_type,
            container,
            false,
        ))
    }

    fn enter_as(
        root: Arc<RootTxn>,
        reactor: ReactorId,
        reactor_type: u16,
        container: usize,
        replica: bool,
    ) -> Self {
        let (participant, created) = with_local(|l| l.participant(root.id));
        if created {
            root.register_context(container, &participant.context);
        }
        ReactorCtx {
            root,
            reactor,
            reactor_type,
            container,
            replica,
            participant,
        }
    }

    /// A write to a replica aborts the attempt for want of the reactor:
    /// the placement acquires it (ownership), then the transaction runs
    /// again (the seed: readers never run write transactions).
    #[inline]
    fn writable(&self) -> Result<(), ReactorError> {
        if self.replica {
            return Err(self.root.unavailable(self.reactor));
        }
        self.root.note_write();
        Ok(())
    }

    /// Adds this reactor's placement word, as checked on entering it, to the
    /// transaction's read set: commit fails if a move, export or install of
    /// it began since (every one rewrites the word, with a new epoch, before
    /// it touches a row). Once per reactor per container per transaction.
    fn observe_placement(&self, entry: Entry) {
        if self.root.db.skip_placement_check.load(Ordering::Relaxed) {
            return;
        }
        let mut observed = self.participant.present.borrow_mut();
        if observed.contains(&self.reactor) {
            return;
        }
        if self.root.db.placement.replicates() {
            self.root.note_entered(self.reactor);
        }
        let slot = self
            .root
            .db
            .placements
            .slot(self.reactor)
            .expect("an entered reactor has a slot");
        // SAFETY: slots live as long as the database, which the root holds
        // until its contexts have committed or aborted.
        self.with_context(|c, _| unsafe { c.observe_version(slot, entry.word) });
        if observed.len() < PRESENT_MEMO_LIMIT {
            observed.push(self.reactor);
        }
    }

    /// Every row of this reactor, per schema relation index, as raw bytes
    /// (keys without the reactor prefix), deleting them if `remove`. Visits
    /// this reactor's rows only: a range scan of each ordered relation, a
    /// partition listing of each hash-indexed one.
    pub(crate) fn extract_rows(&self, remove: bool) -> Result<Vec<ExtractedRow>, ReactorError> {
        let schema = &self.root.db.schema;
        let my_type = schema.reactor_types[self.reactor_type as usize];
        let (prefix, next) = self.row_range();
        let upper = next
            .as_ref()
            .map_or(Bound::Unbounded, |n| Bound::Excluded(&n[..]));
        let mut rows = Vec::new();
        for (index, _) in schema
            .relations
            .iter()
            .enumerate()
            .filter(|(_, d)| d.reactor_type() == my_type)
        {
            let relation = &self.root.db.containers[self.container].relations[index];
            let mut found: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut collect = |k: &[u8], v: &[u8]| {
                found.push((k.to_vec(), v.to_vec()));
                true
            };
            // SAFETY: the participant's guard lives until the context is released.
            self.with_context(|c, g| unsafe {
                match relation.index_kind() {
                    IndexKind::Ordered => c.scan(
                        g,
                        relation,
                        (Bound::Included(&prefix[..]), upper),
                        ScanDirection::Forward,
                        usize::MAX,
                        &mut collect,
                    ),
                    IndexKind::PartitionedHash => {
                        c.scan_partition(g, relation, prefix, &mut collect)
                    }
                    IndexKind::Hashed => unreachable!("reactor relations are never plain-hashed"),
                }
            })?;
            for (key, value) in found {
                assert_eq!(key[..REACTOR_PREFIX_BYTES], prefix, "a row of this reactor");
                if remove {
                    // SAFETY: as above.
                    self.with_context(|c, g| unsafe { c.delete(g, relation, &key) })?;
                }
                rows.push(ExtractedRow {
                    relation: index,
                    key: key[REACTOR_PREFIX_BYTES..].to_vec(),
                    value,
                });
            }
        }
        Ok(rows)
    }

    /// Installs rows extracted by `extract_rows` for this reactor here (as
    /// inserts: a reactor has no rows where it is installed).
    pub(crate) fn install_rows(&self, rows: &[ExtractedRow]) -> Result<(), ReactorError> {
        for ExtractedRow {
            relation,
            key,
            value,
        } in rows
        {
            let relation = &self.root.db.containers[self.container].relations[*relation];
            let mut full = Vec::with_capacity(REACTOR_PREFIX_BYTES + key.len());
            full.extend_from_slice(&self.reactor.0.to_be_bytes());
            full.extend_from_slice(key);
            // SAFETY: as above.
            self.with_context(|c, g| unsafe { c.insert(g, relation, &full, value) })?;
        }
        Ok(())
    }

    /// Applies a reliable commit's changed rows to this replica: each row
    /// upserted, or deleted (`value: None`). `relations` maps each change
    /// to its schema relation index (checked by the caller).
    pub(crate) fn apply_row_changes(
        &self,
        changes: &[crate::replication::RowChange],
        relations: &[usize],
    ) -> Result<(), ReactorError> {
        debug_assert_eq!(changes.len(), relations.len());
        debug_assert!(!self.replica, "the applying relocation writes");
        for (change, &relation) in changes.iter().zip(relations) {
            let relation = &self.root.db.containers[self.container].relations[relation];
            let mut full = Vec::with_capacity(REACTOR_PREFIX_BYTES + change.key.len());
            full.extend_from_slice(&self.reactor.0.to_be_bytes());
            full.extend_from_slice(&change.key);
            match &change.value {
                // SAFETY: as in `install_rows`.
                Some(value) => {
                    self.with_context(|c, g| unsafe { c.put(g, relation, &full, value) })?
                }
                None => {
                    // SAFETY: as above.
                    self.with_context(|c, g| unsafe { c.delete(g, relation, &full) })?;
                }
            }
        }
        Ok(())
    }

    /// Runs `procedure` for this reactor in another container (the install
    /// half of a move), as part of this transaction.
    pub(crate) fn call_in_container<T, F, Fut>(&self, container: usize, procedure: F) -> Call<T>
    where
        T: Send + 'static,
        F: FnOnce(ReactorCtx) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ReactorError>> + 'static,
    {
        self.dispatch(container, self.reactor, false, procedure)
    }

    pub fn reactor(&self) -> ReactorId {
        self.reactor
    }

    /// The root transaction's identifier, shared by every call in its tree.
    pub fn transaction_id(&self) -> u64 {
        self.root.id
    }

    fn relation<K, V>(&self, def: &RelationDef<K, V>) -> Result<&Arc<Relation>, ReactorError> {
        let actual = self.root.db.schema.reactor_types[self.reactor_type as usize];
        if def.reactor_type() != actual {
            return Err(ReactorError::WrongReactorType {
                relation: def.name(),
                expected: def.reactor_type(),
                actual,
            });
        }
        Ok(&self.root.db.containers[self.container].relations[def.index()?])
    }

    /// This reactor's rows: keys from its id prefix (inclusive) up to the next
    /// id's prefix (exclusive; none after the last id).
    fn row_range(
        &self,
    ) -> (
        [u8; REACTOR_PREFIX_BYTES],
        Option<[u8; REACTOR_PREFIX_BYTES]>,
    ) {
        (
            self.reactor.0.to_be_bytes(),
            self.reactor.0.checked_add(1).map(u32::to_be_bytes),
        )
    }

    fn key<K: KeyCodec>(&self, key: &K) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.encode_key_into(key, &mut out);
        out
    }

    fn encode_key_into<K: KeyCodec>(&self, key: &K, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.reactor.0.to_be_bytes());
        key.encode_into(out);
    }

    /// Runs `op` with `key` encoded (reactor prefix first) in this thread's
    /// reusable key buffer: a point operation allocates no key.
    fn with_key<K: KeyCodec, R>(&self, key: &K, op: impl FnOnce(&[u8]) -> R) -> R {
        with_scratch(&KEY_SCRATCH, |buf| {
            self.encode_key_into(key, buf);
            op(buf)
        })
    }

    fn with_context<R>(
        &self,
        op: impl FnOnce(&mut roost_storage::TxContext, &roost_storage::Guard) -> R,
    ) -> R {
        let mut context = self
            .participant
            .context
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        op(&mut context, &self.participant.guard)
    }

    pub fn get<K: KeyCodec, V: DeserializeOwned>(
        &self,
        def: &RelationDef<K, V>,
        key: &K,
    ) -> Result<Option<V>, ReactorError> {
        let relation = self.relation(def)?;
        let value = self.with_key(key, |key| {
            // SAFETY: the participant's guard lives until the context is released.
            self.with_context(|c, g| unsafe { c.get_with(g, relation, key, decode::<V>) })
        })?;
        Ok(value.transpose()?)
    }

    /// Reads the row at `key` and writes what `modify` returns in its place
    /// (`None`: no write), with one key encoding and one index search: the
    /// read-modify-write of a counter. Returns `modify`'s other result.
    pub fn modify<K: KeyCodec, V: Serialize + DeserializeOwned, R>(
        &self,
        def: &RelationDef<K, V>,
        key: &K,
        modify: impl FnOnce(Option<V>) -> (Option<V>, R),
    ) -> Result<R, ReactorError> {
        self.writable()?;
        let relation = self.relation(def)?;
        self.with_key(key, |key| {
            self.with_context(|c, g| {
                // SAFETY: as in `get`.
                let old = unsafe { c.get_with(g, relation, key, decode::<V>) }?.transpose()?;
                let (new, result) = modify(old);
                if let Some(new) = new {
                    with_scratch(&VALUE_SCRATCH, |value| {
                        encode_into(&new, value)?;
                        // SAFETY: as in `get`.
                        unsafe { c.put(g, relation, key, value) }
                    })?;
                }
                Ok(result)
            })
        })
    }

    pub fn put<K: KeyCodec, V: Serialize>(
        &self,
        def: &RelationDef<K, V>,
        key: &K,
        value: &V,
    ) -> Result<(), ReactorError> {
        self.writable()?;
        let relation = self.relation(def)?;
        self.with_encoded(key, value, |key, value| {
            // SAFETY: as in `get`.
            self.with_context(|c, g| unsafe { c.put(g, relation, key, value) })
        })
    }

    pub fn insert<K: KeyCodec, V: Serialize>(
        &self,
        def: &RelationDef<K, V>,
        key: &K,
        value: &V,
    ) -> Result<(), ReactorError> {
        self.writable()?;
        let relation = self.relation(def)?;
        self.with_encoded(key, value, |key, value| {
            // SAFETY: as in `get`.
            self.with_context(|c, g| unsafe { c.insert(g, relation, key, value) })
        })
    }

    pub fn update<K: KeyCodec, V: Serialize>(
        &self,
        def: &RelationDef<K, V>,
        key: &K,
        value: &V,
    ) -> Result<(), ReactorError> {
        self.writable()?;
        let relation = self.relation(def)?;
        self.with_encoded(key, value, |key, value| {
            // SAFETY: as in `get`.
            self.with_context(|c, g| unsafe { c.update(g, relation, key, value) })
        })
    }

    pub fn delete<K: KeyCodec, V>(
        &self,
        def: &RelationDef<K, V>,
        key: &K,
    ) -> Result<bool, ReactorError> {
        self.writable()?;
        let relation = self.relation(def)?;
        Ok(self.with_key(key, |key| {
            // SAFETY: as in `get`.
            self.with_context(|c, g| unsafe { c.delete(g, relation, key) })
        })?)
    }

    /// Runs a write with `key` and `value` encoded in this thread's reusable
    /// buffers (the storage copies both into the transaction's own buffers).
    fn with_encoded<K: KeyCodec, V: Serialize>(
        &self,
        key: &K,
        value: &V,
        write: impl FnOnce(&[u8], &[u8]) -> Result<(), TxError>,
    ) -> Result<(), ReactorError> {
        with_scratch(&VALUE_SCRATCH, |value_buf| {
            encode_into(value, value_buf)?;
            self.with_key(key, |key| write(key, value_buf))?;
            Ok(())
        })
    }

    /// Up to `limit` rows of this reactor in `range`, in key order or reversed.
    pub fn scan<K: KeyCodec, V: DeserializeOwned>(
        &self,
        def: &RelationDef<K, V>,
        range: impl RangeBounds<K>,
        direction: ScanDirection,
        limit: usize,
    ) -> Result<Vec<(K, V)>, ReactorError> {
        let relation = self.relation(def)?;
        let (prefix, next_prefix) = self.row_range();
        let lower = match range.start_bound() {
            Bound::Included(k) => Bound::Included(self.key(k)),
            Bound::Excluded(k) => Bound::Excluded(self.key(k)),
            Bound::Unbounded => Bound::Included(prefix.to_vec()),
        };
        let upper = match range.end_bound() {
            Bound::Included(k) => Bound::Included(self.key(k)),
            Bound::Excluded(k) => Bound::Excluded(self.key(k)),
            // The next reactor's prefix, as 4 bytes (or past every 4-byte id).
            Bound::Unbounded => {
                next_prefix.map_or(Bound::Unbounded, |n| Bound::Excluded(n.to_vec()))
            }
        };
        let bounds = (
            lower.as_ref().map(Vec::as_slice),
            upper.as_ref().map(Vec::as_slice),
        );
        let mut rows = Vec::new();
        let mut failure = None;
        // SAFETY: as in `get`.
        self.with_context(|c, g| unsafe {
            c.scan(g, relation, bounds, direction, limit, |k, v| {
                let row = K::decode(&k[REACTOR_PREFIX_BYTES..])
                    .map_err(|e| TxError::Codec(e.to_string()))
                    .and_then(|k| Ok((k, decode::<V>(v)?)));
                match row {
                    Ok(row) => rows.push(row),
                    Err(e) => failure = Some(e),
                }
                failure.is_none()
            })
        })?;
        match failure {
            Some(e) => Err(e.into()),
            None => Ok(rows),
        }
    }

    /// Calls `procedure` on reactor `target` (the seed's `fn(args) on reactor
    /// X`) as part of this transaction. Returns a future; await it now, later,
    /// or never: the root transaction commits only after every call finished.
    /// In the same container the call runs inline on this executor; in another
    /// container it is enqueued on the executor serving this transaction there.
    pub fn call<T, F, Fut>(&self, target: ReactorId, procedure: F) -> Call<T>
    where
        T: Send + 'static,
        F: FnOnce(ReactorCtx) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ReactorError>> + 'static,
    {
        let root = Arc::clone(&self.root);
        root.call_started();
        let entry = match root.db.reactor_entry(target) {
            Ok(entry) => entry,
            Err(e) => return Call::failed(&root, e),
        };
        let (reactor_type, container) = (entry.reactor_type, entry.container as usize);
        if container == self.container || entry.remote {
            // This reactor's own placement was checked and observed when the
            // transaction entered it.
            if target != self.reactor {
                if let Err(e) = check_placement(&root, target, entry, self.container) {
                    return Call::failed(&root, e);
                }
            }
            let child = ReactorCtx {
                reactor: target,
                reactor_type,
                replica: read_only_replica(&root, target, entry),
                ..self.clone()
            };
            if target != self.reactor {
                child.observe_placement(entry);
            }
            let future: Pin<Box<dyn Future<Output = Result<T, ReactorError>>>> =
                Box::pin(procedure(child));
            return Call {
                state: CallState::Inline {
                    future: Some(future),
                    root,
                },
            };
        }
        drop(root);
        self.dispatch(container, target, true, procedure)
    }

    /// Whether `target` lives in this database now rather than on another
    /// node, as the placement table says at this instant. Not part of the
    /// transaction's reads: for work that only the holder should do (a
    /// background sweep skips reactors held elsewhere instead of acquiring
    /// them); entering `target` still checks and records its placement.
    pub fn lives_here(&self, target: ReactorId) -> bool {
        self.root
            .db
            .reactor_entry(target)
            .is_ok_and(|entry| !entry.remote && !entry.replica)
    }

    /// The context of reactor `target` when it lives in this container, for
    /// synchronous access to its relations as part of this transaction: what
    /// [`call`](Self::call) would hand an inline procedure, without the
    /// future, its allocation and the call bookkeeping. `None` when `target`
    /// lives in another container (use `call`). An error (the reactor moved
    /// away meanwhile) aborts the transaction when the procedure returns it.
    pub fn local(&self, target: ReactorId) -> Result<Option<ReactorCtx>, ReactorError> {
        if target == self.reactor {
            return Ok(Some(self.clone()));
        }
        let entry = self.root.db.reactor_entry(target)?;
        if entry.container as usize != self.container && !entry.remote {
            return Ok(None);
        }
        check_placement(&self.root, target, entry, self.container)?;
        let child = ReactorCtx {
            reactor: target,
            reactor_type: entry.reactor_type,
            replica: read_only_replica(&self.root, target, entry),
            ..self.clone()
        };
        child.observe_placement(entry);
        Ok(Some(child))
    }

    /// Enqueues `procedure` on the executor serving this transaction in
    /// `container`; the call was already counted as started.
    fn dispatch<T, F, Fut>(
        &self,
        container: usize,
        target: ReactorId,
        check_placement: bool,
        procedure: F,
    ) -> Call<T>
    where
        T: Send + 'static,
        F: FnOnce(ReactorCtx) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ReactorError>> + 'static,
    {
        let root = Arc::clone(&self.root);
        if !check_placement {
            root.call_started();
        }
        let executor = root.executor_for(container, target);
        let (reply, result) = oneshot::channel();
        let remote_root = Arc::clone(&root);
        let sent = root.db.executors[executor].send(move || {
            run_soon(async move {
                let entered = if check_placement {
                    ReactorCtx::enter(Arc::clone(&remote_root), target, container)
                } else {
                    ReactorCtx::enter_unchecked(Arc::clone(&remote_root), target, container)
                };
                let outcome = match entered {
                    Ok(ctx) => procedure(ctx).await,
                    Err(e) => Err(e),
                };
                remote_root.call_finished(&outcome);
                let _ = reply.send(outcome);
            });
        });
        if !sent {
            return Call::failed(&root, ReactorError::Shutdown);
        }
        Call {
            state: CallState::Remote(result),
        }
    }
}

/// Whether a transaction may enter `reactor` in `container` given its
/// placement `entry`: it lives here (else the placement must acquire it), in
/// that container (else it moved since the caller looked), and no move,
/// export or install of it is in progress, unless this transaction is that
/// relocation. Entering while one is in progress would let a transaction
/// observe the relocation's own word and commit after it moved the rows.
fn check_placement(
    root: &RootTxn,
    reactor: ReactorId,
    entry: Entry,
    container: usize,
) -> Result<(), ReactorError> {
    if root.db.skip_placement_check.load(Ordering::Relaxed) {
        return Ok(());
    }
    if entry.remote {
        return Err(root.unavailable(reactor));
    }
    let relocating = root.relocating == Some((reactor, Relocation::Out));
    // An Invalid replica is never read (the seed): the attempt retries
    // until its R-VAL (or the next owner's) makes it valid again.
    let unreadable = entry.replica
        && (entry.invalid || entry.moving)
        && !root.db.read_invalid_replicas.load(Ordering::Relaxed);
    if unreadable && !relocating && entry.container as usize == container {
        return Err(root.invalid_replica(reactor));
    }
    if ((entry.moving || unreadable) && !relocating) || entry.container as usize != container {
        return Err(ReactorError::Tx(TxError::Conflict(
            ConflictKind::RecordUnlinked.into(),
        )));
    }
    Ok(())
}

/// Whether a transaction entering `reactor` with placement `entry` may only
/// read it: a replica, unless this transaction is the relocation that
/// applies changes to it.
fn read_only_replica(root: &RootTxn, reactor: ReactorId, entry: Entry) -> bool {
    let replica = entry.replica && root.relocating.map(|(r, _)| r) != Some(reactor);
    if replica {
        root.read_replica(reactor);
    }
    replica
}

/// Runs a dispatched call on this executor: polled once at once, and
/// spawned as a task only if it must wait. Most sub-calls finish without
/// waiting, and then cost no task allocation and no trip through the
/// scheduler. Safe with a no-op waker: a pending future is spawned, and a
/// spawned task is polled again, registering its real waker.
pub(crate) fn run_soon(future: impl Future<Output = ()> + 'static) {
    let mut future = Box::pin(future);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    if future.as_mut().poll(&mut cx).is_pending() {
        roost_exec::spawn(future);
    }
}

fn decode<V: DeserializeOwned>(bytes: &[u8]) -> Result<V, TxError> {
    postcard::from_bytes(bytes).map_err(|e| TxError::Codec(e.to_string()))
}

/// Appends `value`'s postcard encoding to `out`.
fn encode_into<V: Serialize>(value: &V, out: &mut Vec<u8>) -> Result<(), TxError> {
    postcard::serialize_with_flavor(value, AppendVec(out))
        .map_err(|e| TxError::Codec(e.to_string()))
}

/// A postcard output that appends to a borrowed buffer (reused across
/// operations instead of a fresh vector per write).
struct AppendVec<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for AppendVec<'_> {
    type Output = ();

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Buffers larger than this are not kept between operations.
const SCRATCH_KEEP_BYTES: usize = 64 << 10;

thread_local! {
    static KEY_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static VALUE_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `op` with an empty buffer: this thread's `scratch`, or a fresh one if
/// it is in use (an operation nested in another's encoding).
fn with_scratch<R>(
    scratch: &'static std::thread::LocalKey<RefCell<Vec<u8>>>,
    op: impl FnOnce(&mut Vec<u8>) -> R,
) -> R {
    scratch.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let result = op(&mut buf);
            if buf.capacity() > SCRATCH_KEEP_BYTES {
                *buf = Vec::new();
            }
            result
        }
        Err(_) => op(&mut Vec::with_capacity(64)),
    })
}

type LocalFuture<T> = Pin<Box<dyn Future<Output = Result<T, ReactorError>>>>;

enum CallState<T> {
    /// Same container: polled by whoever awaits the call; if nobody does, it is
    /// spawned on this executor when the handle is dropped.
    Inline {
        future: Option<LocalFuture<T>>,
        root: Arc<RootTxn>,
    },
    Remote(oneshot::Receiver<Result<T, ReactorError>>),
    Done(Option<Result<T, ReactorError>>),
}

/// The future of a call on a reactor.
pub struct Call<T: 'static> {
    state: CallState<T>,
}

impl<T: 'static> Call<T> {
    /// A call that failed before it started (it was counted as started).
    fn failed(root: &RootTxn, error: ReactorError) -> Self {
        let result = Err(error);
        root.call_finished(&result);
        Call {
            state: CallState::Done(Some(result)),
        }
    }
}

// Nothing in a `Call` is structurally pinned: the inline future is boxed.
impl<T: 'static> Unpin for Call<T> {}

impl<T: 'static> Future for Call<T> {
    type Output = Result<T, ReactorError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            CallState::Inline { future, root } => {
                let f = future.as_mut().expect("polled after completion");
                match f.as_mut().poll(cx) {
                    Poll::Ready(result) => {
                        *future = None;
                        root.call_finished(&result);
                        Poll::Ready(result)
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
            CallState::Remote(receiver) => Pin::new(receiver)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(ReactorError::Shutdown))),
            CallState::Done(result) => Poll::Ready(result.take().expect("polled after completion")),
        }
    }
}

impl<T: 'static> Drop for Call<T> {
    fn drop(&mut self) {
        if let CallState::Inline { future, root } = &mut self.state {
            if let Some(future) = future.take() {
                let root = Arc::clone(root);
                roost_exec::spawn(async move {
                    let result = future.await;
                    root.call_finished(&result);
                });
            }
        }
    }
}
