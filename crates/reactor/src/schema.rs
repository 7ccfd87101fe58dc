//! Reactor types and their relations, declared by the application.
//!
//! A relation is declared once as a `static` [`RelationDef`] with typed keys and
//! values; the database assigns it a dense index when it is built, so an access
//! on the hot path is an array index, never a name lookup.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

use roost_storage::IndexKind;

use crate::error::SchemaError;

const UNASSIGNED: u32 = u32::MAX;

/// Invariant in `K` and `V`, and `Send`/`Sync` whatever they are.
type TypeMarker<K, V> = fn(K, V) -> (K, V);

/// A relation of a reactor type, with key type `K` and value type `V`.
pub struct RelationDef<K, V> {
    reactor_type: &'static str,
    name: &'static str,
    index_kind: IndexKind,
    index: AtomicU32,
    _types: PhantomData<TypeMarker<K, V>>,
}

impl<K, V> RelationDef<K, V> {
    pub const fn new(reactor_type: &'static str, name: &'static str) -> Self {
        RelationDef {
            reactor_type,
            name,
            index_kind: IndexKind::Ordered,
            index: AtomicU32::new(UNASSIGNED),
            _types: PhantomData,
        }
    }

    /// This relation only ever gets point access (get, put, delete: no
    /// scans), so it is hash-indexed: lookups cost about a fifth of the
    /// B+-tree's. Partitioned by reactor, so a move or export lists a
    /// reactor's rows without visiting other reactors'.
    pub const fn point_access_only(self) -> Self {
        RelationDef {
            index_kind: IndexKind::PartitionedHash,
            ..self
        }
    }

    pub fn reactor_type(&self) -> &'static str {
        self.reactor_type
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The dense index the schema gave this relation.
    pub(crate) fn index(&self) -> Result<usize, SchemaError> {
        match self.index.load(Ordering::Acquire) {
            UNASSIGNED => Err(SchemaError::UndeclaredRelation {
                reactor_type: self.reactor_type,
                relation: self.name,
            }),
            i => Ok(i as usize),
        }
    }
}

/// The type-erased face of a relation definition, for schema building.
pub trait AnyRelationDef: Sync {
    fn reactor_type(&self) -> &'static str;
    fn name(&self) -> &'static str;
    fn index_kind(&self) -> IndexKind;
    fn assign(&self, index: u32) -> Result<(), SchemaError>;
}

impl<K, V> AnyRelationDef for RelationDef<K, V> {
    fn reactor_type(&self) -> &'static str {
        self.reactor_type
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn index_kind(&self) -> IndexKind {
        self.index_kind
    }

    fn assign(&self, index: u32) -> Result<(), SchemaError> {
        match self
            .index
            .compare_exchange(UNASSIGNED, index, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(existing) if existing == index => Ok(()),
            Err(existing) => Err(SchemaError::ConflictingIndex {
                relation: self.name,
                existing,
                wanted: index,
            }),
        }
    }
}

/// The application's reactor types and relations.
#[derive(Default)]
pub struct Schema {
    pub(crate) reactor_types: Vec<&'static str>,
    pub(crate) relations: Vec<&'static dyn AnyRelationDef>,
}

impl Schema {
    pub fn new() -> Self {
        Schema::default()
    }

    /// Declares a reactor type and its relations.
    pub fn reactor_type(
        mut self,
        name: &'static str,
        relations: &[&'static dyn AnyRelationDef],
    ) -> Result<Self, SchemaError> {
        if self.reactor_types.contains(&name) {
            return Err(SchemaError::DuplicateReactorType(name));
        }
        for relation in relations {
            if relation.reactor_type() != name {
                return Err(SchemaError::WrongReactorType {
                    relation: relation.name(),
                    declared_for: relation.reactor_type(),
                    listed_under: name,
                });
            }
            if self
                .relations
                .iter()
                .any(|r| r.reactor_type() == name && r.name() == relation.name())
            {
                return Err(SchemaError::DuplicateRelation {
                    reactor_type: name,
                    relation: relation.name(),
                });
            }
            let index = u32::try_from(self.relations.len()).expect("fewer than 2^32 relations");
            relation.assign(index)?;
            self.relations.push(*relation);
        }
        self.reactor_types.push(name);
        Ok(self)
    }

    pub fn has_reactor_type(&self, name: &str) -> bool {
        self.reactor_types.contains(&name)
    }
}
