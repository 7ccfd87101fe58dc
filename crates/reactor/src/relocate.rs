//! Relocating a reactor. A move between containers is one transaction that
//! extracts (deletes) every row of the reactor in its container and installs
//! them in the target container; both halves commit together or not at all.
//! The database marks the reactor's placement slot moving before it starts
//! (which fails every transaction that entered the reactor before, at its
//! commit, and turns away new ones) and points it at the target after. An export is the first half alone, handing the rows out in a
//! form another database understands (relation names, keys without the
//! local reactor prefix); an install is the second half alone, in the
//! receiving database.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::ctx::{ExtractedRow, ReactorCtx};
use crate::error::InstallError;
use crate::placement::ReactorKey;
use crate::schema::Schema;
use crate::txn::ReactorError;

pub(crate) async fn move_out(ctx: ReactorCtx, target: usize) -> Result<(), ReactorError> {
    let rows = ctx.extract_rows(true)?;
    ctx.call_in_container(
        target,
        move |there| async move { there.install_rows(&rows) },
    )
    .await
}

pub(crate) async fn export(ctx: ReactorCtx) -> Result<Vec<ExtractedRow>, ReactorError> {
    ctx.extract_rows(true)
}

pub(crate) async fn install(
    ctx: ReactorCtx,
    rows: Arc<Vec<ExtractedRow>>,
) -> Result<(), ReactorError> {
    ctx.install_rows(&rows)
}

/// A reactor taken out of one database by
/// [`Database::export_reactor`](crate::Database::export_reactor), for
/// [`Database::install_reactor`](crate::Database::install_reactor) in another
/// with the same schema. Serializable as a whole ([`encode`](Self::encode)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedReactor {
    key: ReactorKey,
    version: u64,
    rows: Vec<u8>,
}

/// The rows of one relation, as shipped.
#[derive(Serialize, Deserialize)]
struct WireRelation<'a> {
    name: &'a str,
    /// (key without the reactor prefix, value), as the storage holds them.
    #[serde(borrow)]
    rows: Vec<(&'a [u8], &'a [u8])>,
}

impl ExportedReactor {
    pub(crate) fn new(key: ReactorKey, version: u64, rows: Vec<u8>) -> Self {
        ExportedReactor { key, version, rows }
    }

    /// A new reactor with no rows, at placement version 1: how a cluster
    /// creates a reactor at the node its placement chose, through the same
    /// install path as a reactor that moved there.
    pub fn empty(key: ReactorKey) -> Self {
        let rows = postcard::to_allocvec(&Vec::<WireRelation<'_>>::new())
            .expect("encoding to a vector does not fail");
        ExportedReactor {
            key,
            version: 1,
            rows,
        }
    }

    pub fn key(&self) -> &ReactorKey {
        &self.key
    }

    /// The reactor's placement version after the export: every move, export
    /// and install moves it up, and an install refuses a version not newer
    /// than the receiver last had.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The rows, encoded (relation names, keys, values).
    pub fn rows(&self) -> &[u8] {
        &self.rows
    }

    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("encoding to a vector does not fail")
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, InstallError> {
        postcard::from_bytes(bytes).map_err(|e| InstallError::Malformed(e.to_string()))
    }
}

/// Encodes extracted rows grouped by relation, named as in the schema.
pub(crate) fn encode_rows(schema: &Schema, rows: &[ExtractedRow]) -> Vec<u8> {
    let mut relations: Vec<WireRelation<'_>> = Vec::new();
    for row in rows {
        let name = schema.relations[row.relation].name();
        match relations.last_mut() {
            Some(last) if last.name == name => last.rows.push((&row.key, &row.value)),
            _ => relations.push(WireRelation {
                name,
                rows: vec![(&row.key, &row.value)],
            }),
        }
    }
    postcard::to_allocvec(&relations).expect("encoding to a vector does not fail")
}

/// Decodes rows encoded by [`encode_rows`] for a reactor of `reactor_type`,
/// mapping relation names to this schema's relations.
pub(crate) fn decode_rows(
    schema: &Schema,
    reactor_type: &str,
    bytes: &[u8],
) -> Result<Vec<ExtractedRow>, InstallError> {
    let relations: Vec<WireRelation<'_>> =
        postcard::from_bytes(bytes).map_err(|e| InstallError::Malformed(e.to_string()))?;
    let mut rows = Vec::new();
    for wire in relations {
        let relation = schema
            .relations
            .iter()
            .position(|r| r.reactor_type() == reactor_type && r.name() == wire.name)
            .ok_or_else(|| InstallError::UnknownRelation {
                reactor_type: reactor_type.to_owned(),
                relation: wire.name.to_owned(),
            })?;
        rows.extend(wire.rows.into_iter().map(|(key, value)| ExtractedRow {
            relation,
            key: key.to_vec(),
            value: value.to_vec(),
        }));
    }
    Ok(rows)
}
