//! A typed layer over relations: keys through [`KeyCodec`] (order-preserving),
//! values through serde (postcard).

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::engine::Engine;
use crate::error::{CatalogError, TxError};
use crate::key::KeyCodec;
use crate::relation::{Relation, ScanDirection};
use crate::txn::Transaction;

/// Invariant in `K` and `V`, and `Send`/`Sync` whatever they are.
type TypeMarker<K, V> = fn(K, V) -> (K, V);

/// A relation with typed keys `K` and values `V`.
pub struct Table<K, V> {
    relation: Arc<Relation>,
    _types: PhantomData<TypeMarker<K, V>>,
}

impl<K, V> Clone for Table<K, V> {
    fn clone(&self) -> Self {
        Table {
            relation: Arc::clone(&self.relation),
            _types: PhantomData,
        }
    }
}

fn encode_key<K: KeyCodec>(key: &K) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    key.encode_into(&mut out);
    out
}

fn encode_value<V: Serialize>(value: &V) -> Result<Vec<u8>, TxError> {
    postcard::to_allocvec(value).map_err(|e| TxError::Codec(e.to_string()))
}

fn decode_value<V: DeserializeOwned>(bytes: &[u8]) -> Result<V, TxError> {
    postcard::from_bytes(bytes).map_err(|e| TxError::Codec(e.to_string()))
}

fn encode_bound<K: KeyCodec>(bound: Bound<&K>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(k) => Bound::Included(encode_key(k)),
        Bound::Excluded(k) => Bound::Excluded(encode_key(k)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl<K: KeyCodec, V: Serialize + DeserializeOwned> Table<K, V> {
    pub fn create(engine: &Engine, name: &str) -> Result<Self, CatalogError> {
        Ok(Table::open(engine.create_relation(name)?))
    }

    pub fn open(relation: Arc<Relation>) -> Self {
        Table {
            relation,
            _types: PhantomData,
        }
    }

    pub fn relation(&self) -> &Arc<Relation> {
        &self.relation
    }

    pub fn get<'r>(&'r self, tx: &mut Transaction<'_, 'r>, key: &K) -> Result<Option<V>, TxError> {
        tx.get_with(&self.relation, &encode_key(key), decode_value)?
            .transpose()
    }

    pub fn put<'r>(
        &'r self,
        tx: &mut Transaction<'_, 'r>,
        key: &K,
        value: &V,
    ) -> Result<(), TxError> {
        tx.put(&self.relation, &encode_key(key), &encode_value(value)?)
    }

    pub fn insert<'r>(
        &'r self,
        tx: &mut Transaction<'_, 'r>,
        key: &K,
        value: &V,
    ) -> Result<(), TxError> {
        tx.insert(&self.relation, &encode_key(key), &encode_value(value)?)
    }

    pub fn update<'r>(
        &'r self,
        tx: &mut Transaction<'_, 'r>,
        key: &K,
        value: &V,
    ) -> Result<(), TxError> {
        tx.update(&self.relation, &encode_key(key), &encode_value(value)?)
    }

    pub fn delete<'r>(&'r self, tx: &mut Transaction<'_, 'r>, key: &K) -> Result<bool, TxError> {
        tx.delete(&self.relation, &encode_key(key))
    }

    /// Up to `limit` records in `range`, in key order or reversed.
    pub fn scan<'r>(
        &'r self,
        tx: &mut Transaction<'_, 'r>,
        range: impl RangeBounds<K>,
        direction: ScanDirection,
        limit: usize,
    ) -> Result<Vec<(K, V)>, TxError> {
        let lower = encode_bound(range.start_bound());
        let upper = encode_bound(range.end_bound());
        let bounds = (
            lower.as_ref().map(Vec::as_slice),
            upper.as_ref().map(Vec::as_slice),
        );
        let mut rows = Vec::new();
        let mut failure = None;
        tx.scan(
            &self.relation,
            bounds,
            direction,
            limit,
            |k, v| match K::decode(k)
                .map_err(|e| TxError::Codec(e.to_string()))
                .and_then(|k| Ok((k, decode_value(v)?)))
            {
                Ok(row) => {
                    rows.push(row);
                    true
                }
                Err(e) => {
                    failure = Some(e);
                    false
                }
            },
        )?;
        match failure {
            Some(e) => Err(e),
            None => Ok(rows),
        }
    }
}
