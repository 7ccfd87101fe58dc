//! The database: schema, deployment (containers, executors, placement), the
//! reactor directory, and the entry points that run root transactions.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use roost_storage::{Engine, Relation};
use tokio::sync::oneshot;

use crate::ctx::ReactorCtx;
use crate::deployment::{Deployment, RouterPolicy};
use crate::error::{DeploymentError, DirectoryError};
use crate::executor::ExecutorHandle;
use crate::schema::Schema;
use crate::txn::{run_root, ReactorError};

/// A reactor's identity: dense, assigned by the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReactorId(pub u32);

/// Most reactors one database holds.
pub const MAX_REACTORS: usize = u32::MAX as usize - 1;
const MAX_REACTOR_NAME_BYTES: usize = 256;

pub(crate) struct ReactorEntry {
    pub(crate) reactor_type: u16,
    pub(crate) container: u16,
}

#[derive(Default)]
pub(crate) struct Directory {
    by_name: HashMap<Box<str>, ReactorId>,
    pub(crate) entries: Vec<ReactorEntry>,
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
    pub(crate) schema: Schema,
    pub(crate) deployment: Deployment,
    pub(crate) containers: Vec<Container>,
    pub(crate) executors: Vec<ExecutorHandle>,
    pub(crate) directory: RwLock<Directory>,
    pub(crate) next_txn_id: AtomicU64,
}

impl DbShared {
    pub(crate) fn reactor_entry(&self, reactor: ReactorId) -> Result<(u16, u16), ReactorError> {
        let directory = self.directory.read().expect("directory lock");
        let entry = directory.entries.get(reactor.0 as usize).ok_or_else(|| {
            ReactorError::Directory(DirectoryError::NoSuchReactor(format!("#{}", reactor.0)))
        })?;
        Ok((entry.reactor_type, entry.container))
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
        deployment.validate(&schema)?;
        let engine = Engine::default();
        let mut containers = Vec::new();
        let mut executors = Vec::new();
        for spec in &deployment.containers {
            let relations = schema
                .relations
                .iter()
                .map(|r| {
                    let name = format!("{}/{}/{}", spec.name, r.reactor_type(), r.name());
                    engine
                        .create_relation(&name)
                        .map_err(|e| DeploymentError::Toml(e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut own = Vec::new();
            for _ in 0..spec.executors {
                own.push(executors.len());
                let handle = ExecutorHandle::spawn(
                    executors.len(),
                    engine.clone(),
                    deployment.max_active_transactions,
                );
                executors.push(handle);
            }
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
        Ok(Database {
            shared: Arc::new(DbShared {
                schema,
                deployment,
                containers,
                executors,
                directory: RwLock::new(Directory::default()),
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
        let container = self.shared.deployment.place(name, reactor_type);
        let mut directory = self.shared.directory.write().expect("directory lock");
        if directory.by_name.contains_key(name) {
            return Err(DirectoryError::AlreadyExists(name.to_owned()));
        }
        if directory.entries.len() >= MAX_REACTORS {
            return Err(DirectoryError::Full(MAX_REACTORS));
        }
        let id = ReactorId(directory.entries.len() as u32);
        directory.entries.push(ReactorEntry {
            reactor_type: type_index as u16,
            container: container as u16,
        });
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
        let (_, from) = self.shared.reactor_entry(reactor)?;
        if from as usize == target {
            return Ok(());
        }
        self.run_blocking(reactor, move |ctx| crate::relocate::move_out(ctx, target))?;
        let mut directory = self.shared.directory.write().expect("directory lock");
        directory.entries[reactor.0 as usize].container = target as u16;
        Ok(())
    }

    /// Runs `procedure` on `reactor` as a root transaction, retrying it on
    /// conflicts; every call it makes, awaited or not, is part of it.
    pub async fn run<T, F, Fut>(&self, reactor: ReactorId, procedure: F) -> Result<T, ReactorError>
    where
        T: Send + 'static,
        F: Fn(ReactorCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ReactorError>> + 'static,
    {
        self.submit(reactor, procedure)?
            .await
            .unwrap_or(Err(ReactorError::Shutdown))
    }

    /// The blocking facade of [`Database::run`], for callers that are not async.
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
        self.submit(reactor, procedure)?
            .blocking_recv()
            .unwrap_or(Err(ReactorError::Shutdown))
    }

    fn submit<T, F, Fut>(
        &self,
        reactor: ReactorId,
        procedure: F,
    ) -> Result<oneshot::Receiver<Result<T, ReactorError>>, ReactorError>
    where
        T: Send + 'static,
        F: Fn(ReactorCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, ReactorError>> + 'static,
    {
        let (_, container) = self.shared.reactor_entry(reactor)?;
        let executor = self.shared.route(container as usize, reactor);
        let (reply, result) = oneshot::channel();
        let shared = Arc::clone(&self.shared);
        let procedure = Arc::new(procedure);
        let sent = self.shared.executors[executor].send(move || {
            tokio::task::spawn_local(async move {
                let outcome = run_root(shared, reactor, executor, procedure).await;
                let _ = reply.send(outcome);
            });
        });
        if !sent {
            return Err(ReactorError::Shutdown);
        }
        Ok(result)
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
                let _ = executor.sender.send(crate::executor::Job::Stop);
            }
        }
    }
}
