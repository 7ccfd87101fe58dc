//! Roost's reactor layer (ReactDB): applications are reactors, actors whose
//! state is relations; procedures are `async` functions; a call on another
//! reactor returns a future; the whole call tree of a request is one atomic,
//! serializable transaction.
//!
//! - [`Schema`], [`RelationDef`]: reactor types and their typed relations;
//! - [`Deployment`]: containers, executors, placement, router (TOML);
//! - [`Database`]: the directory of reactors and the entry points
//!   ([`Database::run`], [`Database::run_blocking`]); moves between
//!   containers, and exports and installs between databases;
//! - [`ReactorKey`], [`Placement`]: a reactor's cluster-wide identity and
//!   the one seam that says where it lives ([`placement`]);
//! - [`replication`]: the hook a replicating placement uses: write commits
//!   numbered in a serial order, their changed rows, callers answered once
//!   the writes are replicated;
//! - [`ReactorCtx`]: what a procedure sees: typed access to its reactor's
//!   relations and [`ReactorCtx::call`].

mod ctx;
mod database;
pub mod deployment;
pub mod error;
mod executor;
pub mod placement;
mod relocate;
pub mod replication;
pub mod schema;
mod txn;

pub use ctx::{Call, ReactorCtx};
pub use database::{Database, Holding, ReactorId, MAX_CONTAINERS, MAX_REACTORS, MAX_REACTOR_TYPES};
pub use deployment::{ContainerSpec, Deployment, PlacementSpec, RouterPolicy};
pub use error::{
    DeploymentError, DirectoryError, ExportError, InstallError, ReplicaError, SchemaError,
};
pub use placement::{
    Acquire, AcquireError, LocalPlacement, Location, Placement, ReactorKey, ReplicaWait,
    MAX_REACTOR_NAME_BYTES,
};
pub use relocate::{ExportedReactor, ExportedRow};
pub use replication::{ReactorChanges, Replication, ReplicationError, RowChange, Sequenced};
pub use roost_storage::{
    Conflict, ConflictAt, ConflictKind, EngineConfig, KeyCodec, KeyDecodeError, PlantedBugs,
    ScanDirection, TxError,
};
pub use schema::{AnyRelationDef, RelationDef, Schema};
pub use txn::ReactorError;
