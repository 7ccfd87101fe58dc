//! Roost's reactor layer (ReactDB): applications are reactors, actors whose
//! state is relations; procedures are `async` functions; a call on another
//! reactor returns a future; the whole call tree of a request is one atomic,
//! serializable transaction.
//!
//! - [`Schema`], [`RelationDef`]: reactor types and their typed relations;
//! - [`Deployment`]: containers, executors, placement, router (TOML);
//! - [`Database`]: the directory of reactors and the entry points
//!   ([`Database::run`], [`Database::run_blocking`]);
//! - [`ReactorCtx`]: what a procedure sees: typed access to its reactor's
//!   relations and [`ReactorCtx::call`].

mod ctx;
mod database;
pub mod deployment;
pub mod error;
mod executor;
mod relocate;
pub mod schema;
mod txn;

pub use ctx::{Call, ReactorCtx};
pub use database::{Database, ReactorId, MAX_REACTORS};
pub use deployment::{ContainerSpec, Deployment, PlacementSpec, RouterPolicy};
pub use error::{DeploymentError, DirectoryError, SchemaError};
pub use roost_storage::{
    EngineConfig, KeyCodec, KeyDecodeError, PlantedBugs, ScanDirection, TxError,
};
pub use schema::{AnyRelationDef, RelationDef, Schema};
pub use txn::ReactorError;
