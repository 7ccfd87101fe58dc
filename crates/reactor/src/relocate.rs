//! Relocating a reactor. A move between containers is one transaction that
//! extracts (deletes) every row of the reactor in its container and installs
//! them in the target container; both halves commit together or not at all.
//! The database marks the reactor's placement slot moving before it starts
//! (which fails every transaction that entered the reactor before, at its
//! commit, and turns away new ones) and points it at the target after. An export is the first half alone, handing the rows out in a
//! form another database understands (relation names, keys without the
//! local reactor prefix); an install is the second half alone, in the
//! receiving database.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::ctx::{ExtractedRow, ReactorCtx};
use crate::error::InstallError;
use crate::placement::ReactorKey;
use crate::replication::RowChange;
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

/// One row of an export: (relation name, key, value).
pub type ExportedRow = (String, Vec<u8>, Vec<u8>);

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

    /// Every row as (relation name, key, value), in the export's order:
    /// what a node's durability log keeps of a copy it installed.
    pub fn row_list(&self) -> Result<Vec<ExportedRow>, InstallError> {
        let relations: Vec<WireRelation<'_>> =
            postcard::from_bytes(&self.rows).map_err(|e| InstallError::Malformed(e.to_string()))?;
        let mut rows = Vec::new();
        for relation in relations {
            rows.extend(
                relation
                    .rows
                    .into_iter()
                    .map(|(key, value)| (relation.name.to_owned(), key.to_vec(), value.to_vec())),
            );
        }
        Ok(rows)
    }

    /// A reactor holding `rows` (relation name, key, value; any order, a
    /// later duplicate wins) at placement version `version`: a copy rebuilt
    /// from a durability log, installed like one that moved here.
    pub fn from_rows(
        key: ReactorKey,
        version: u64,
        rows: impl IntoIterator<Item = ExportedRow>,
    ) -> Self {
        let mut table: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>> = BTreeMap::new();
        for (relation, key, value) in rows {
            table.entry(relation).or_default().insert(key, value);
        }
        let relations: Vec<WireRelation<'_>> = table
            .iter()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(name, rows)| WireRelation {
                name,
                rows: rows
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_slice()))
                    .collect(),
            })
            .collect();
        ExportedReactor {
            key,
            version,
            rows: postcard::to_allocvec(&relations).expect("encoding to a vector does not fail"),
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, InstallError> {
        postcard::from_bytes(bytes).map_err(|e| InstallError::Malformed(e.to_string()))
    }

    /// This reactor with `rows` applied in order (a [`RowChange`] with a
    /// value inserts or overwrites the row of its relation and key, one
    /// without deletes it, if there), at placement version `new_version`
    /// (not older than this one's): how a follower keeps its copy of a
    /// reactor current with the changes its leader's commits replicate
    /// ([`Sequenced::Committed`](crate::Sequenced::Committed)), in sequence
    /// order. Pure. The rows stay as an export orders them: relations by
    /// name, each one's rows by key (a relation left with no row is
    /// dropped, as an export has none). Relation names are not checked
    /// here: [`Database::install_reactor`](crate::Database::install_reactor)
    /// checks them against its schema.
    pub fn apply_changes(
        &self,
        rows: &[RowChange],
        new_version: u64,
    ) -> Result<ExportedReactor, InstallError> {
        if new_version < self.version {
            return Err(InstallError::Stale {
                have: self.version,
                got: new_version,
            });
        }
        let relations: Vec<WireRelation<'_>> =
            postcard::from_bytes(&self.rows).map_err(|e| InstallError::Malformed(e.to_string()))?;
        let mut table: BTreeMap<&str, BTreeMap<&[u8], &[u8]>> = BTreeMap::new();
        for relation in &relations {
            table
                .entry(relation.name)
                .or_default()
                .extend(relation.rows.iter().copied());
        }
        for change in rows {
            match &change.value {
                Some(value) => {
                    table
                        .entry(&change.relation)
                        .or_default()
                        .insert(&change.key, value);
                }
                None => {
                    if let Some(relation) = table.get_mut(change.relation.as_str()) {
                        relation.remove(change.key.as_slice());
                    }
                }
            }
        }
        let relations: Vec<WireRelation<'_>> = table
            .into_iter()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(name, rows)| WireRelation {
                name,
                rows: rows.into_iter().collect(),
            })
            .collect();
        Ok(ExportedReactor {
            key: self.key.clone(),
            version: new_version,
            rows: postcard::to_allocvec(&relations).expect("encoding to a vector does not fail"),
        })
    }
}

/// Encodes extracted rows grouped by relation, named as in the schema:
/// relations by name, each one's rows by key (canonical: equal contents
/// encode equally, whatever order extraction found them in, which a
/// partition listing does not fix).
pub(crate) fn encode_rows(schema: &Schema, rows: &[ExtractedRow]) -> Vec<u8> {
    let mut sorted: Vec<&ExtractedRow> = rows.iter().collect();
    sorted.sort_by(|a, b| {
        let (na, nb) = (
            schema.relations[a.relation].name(),
            schema.relations[b.relation].name(),
        );
        (na, &a.key).cmp(&(nb, &b.key))
    });
    let mut relations: Vec<WireRelation<'_>> = Vec::new();
    for row in sorted {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ReactorKey {
        ReactorKey::new("account", "alice").unwrap()
    }

    /// An export holding `relations` (name, rows) as given.
    fn exported(version: u64, relations: &[(&str, &[(&str, &str)])]) -> ExportedReactor {
        let wire: Vec<WireRelation<'_>> = relations
            .iter()
            .map(|(name, rows)| WireRelation {
                name,
                rows: rows
                    .iter()
                    .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
                    .collect(),
            })
            .collect();
        ExportedReactor::new(key(), version, postcard::to_allocvec(&wire).unwrap())
    }

    /// (relation name, its rows), in the export's order.
    type Contents = Vec<(String, Vec<(Vec<u8>, Vec<u8>)>)>;

    fn contents(exported: &ExportedReactor) -> Contents {
        let wire: Vec<WireRelation<'_>> = postcard::from_bytes(exported.rows()).unwrap();
        wire.into_iter()
            .map(|r| {
                let rows = r.rows.iter().map(|(k, v)| (k.to_vec(), v.to_vec()));
                (r.name.to_owned(), rows.collect())
            })
            .collect()
    }

    fn change(relation: &str, key: &[u8], value: Option<&[u8]>) -> RowChange {
        RowChange {
            relation: relation.into(),
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        }
    }

    #[test]
    fn changes_upsert_and_delete_rows_keeping_export_order() {
        let before = exported(
            3,
            &[
                ("balance", &[("a", "1"), ("c", "3")]),
                ("history", &[("x", "old")]),
            ],
        );
        let after = before
            .apply_changes(
                &[
                    change("balance", b"b", Some(b"2")),
                    change("balance", b"c", Some(b"33")),
                    change("history", b"x", None),
                    change("audit", b"k", Some(b"v")),
                    // Deleting a row that is not there changes nothing.
                    change("balance", b"zz", None),
                    change("nowhere", b"k", None),
                ],
                4,
            )
            .unwrap();
        assert_eq!(after.key(), before.key());
        assert_eq!(after.version(), 4);
        let bytes = |s: &str| s.as_bytes().to_vec();
        assert_eq!(
            contents(&after),
            vec![
                ("audit".into(), vec![(bytes("k"), bytes("v"))]),
                (
                    "balance".into(),
                    vec![
                        (bytes("a"), bytes("1")),
                        (bytes("b"), bytes("2")),
                        (bytes("c"), bytes("33")),
                    ]
                ),
                // "history" lost its only row: gone, as an export has it.
            ]
        );
        assert_eq!(before.version(), 3, "the original is unchanged");
        assert_eq!(contents(&before)[1].1.len(), 1);
    }

    #[test]
    fn changes_apply_in_order() {
        let empty = ExportedReactor::empty(key());
        let changes = [
            change("r", b"k", Some(b"1")),
            change("r", b"k", None),
            change("r", b"k", Some(b"2")),
            change("r", b"j", Some(b"0")),
            change("r", b"j", None),
        ];
        let after = empty.apply_changes(&changes, 1).unwrap();
        assert_eq!(
            contents(&after),
            vec![("r".into(), vec![(b"k".to_vec(), b"2".to_vec())])]
        );
        // Applying nothing to nothing is the empty export.
        assert_eq!(empty.apply_changes(&[], 1).unwrap(), empty);
        // A whole reactor deleted row by row is empty again.
        let gone = after.apply_changes(&[change("r", b"k", None)], 1).unwrap();
        assert_eq!(gone.rows(), empty.rows());
    }

    #[test]
    fn the_result_is_canonical() {
        // Equal contents, however reached, encode equally.
        let one = ExportedReactor::empty(key())
            .apply_changes(
                &[change("b", b"2", Some(b"y")), change("a", b"1", Some(b"x"))],
                2,
            )
            .unwrap();
        let two = exported(2, &[("a", &[("1", "x")]), ("b", &[("2", "y")])])
            .apply_changes(&[], 2)
            .unwrap();
        assert_eq!(one, two);
        assert_eq!(one.encode(), two.encode());
    }

    #[test]
    fn an_older_version_or_malformed_rows_are_refused() {
        let at_five = exported(5, &[("r", &[("k", "v")])]);
        assert_eq!(
            at_five.apply_changes(&[], 4),
            Err(InstallError::Stale { have: 5, got: 4 })
        );
        assert_eq!(at_five.apply_changes(&[], 5).unwrap(), at_five);
        let broken = ExportedReactor::new(key(), 1, vec![0xFF, 0xFF, 0xFF]);
        assert!(matches!(
            broken.apply_changes(&[], 1),
            Err(InstallError::Malformed(_))
        ));
    }

    #[test]
    fn a_row_list_rebuilds_the_same_export() {
        let original = exported(
            4,
            &[
                ("items", &[("a", "1"), ("b", "2")]),
                ("meta", &[("k", "v")]),
            ],
        );
        let rows = original.row_list().unwrap();
        assert_eq!(rows.len(), 3);
        // Any order, a later duplicate wins.
        let mut shuffled: Vec<_> = rows.iter().rev().cloned().collect();
        shuffled.insert(0, ("items".into(), b"a".to_vec(), b"stale".to_vec()));
        let rebuilt = ExportedReactor::from_rows(key(), 4, shuffled);
        assert_eq!(rebuilt, original);
        assert_eq!(contents(&rebuilt), contents(&original));
        let empty = ExportedReactor::from_rows(key(), 1, Vec::new());
        assert_eq!(empty, ExportedReactor::empty(key()));
    }
}
