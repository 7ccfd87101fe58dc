//! The ownership protocol behind a node's runtime: admin routes, and
//! requests routed back to their callers by [`ReqId`].
//!
//! - `GET /ownership/acquire?key=<key>&kind=<kind>` runs one request
//!   (`kind`: `add-owner`, the default, `change-owner`, `add-reader` or
//!   `remove-reader`) and answers its outcome;
//! - `GET /ownership/inspect` answers what the node owns and holds blocked
//!   ([`Inspection`](crate::Inspection));
//! - `GET /ownership/describe?key=<key>` answers one object's metadata and
//!   this node's access to it.
//!
//! Keys are parsed with the key type's `FromStr`.

use std::collections::BTreeMap;
use std::str::FromStr;

use roost_cluster::runtime::{RequestId, Served};
use serde_json::Value;

use crate::key::ObjectKey;
use crate::meta::{ReqId, RequestKind};
use crate::ownership::{Ownership, OwnershipCmd, OwnershipOut};
use crate::store::ObjectStore;

fn kind_of(text: Option<&String>) -> Result<RequestKind, String> {
    match text.map(String::as_str) {
        None | Some("add-owner") => Ok(RequestKind::AddOwner),
        Some("change-owner") => Ok(RequestKind::ChangeOwner),
        Some("add-reader") => Ok(RequestKind::AddReader),
        Some("remove-reader") => Ok(RequestKind::RemoveReader),
        Some(other) => Err(format!(
            "kind must be add-owner, change-owner, add-reader or remove-reader, not {other:?}"
        )),
    }
}

impl<K, S> Served for Ownership<K, S>
where
    K: ObjectKey + FromStr,
    S: ObjectStore<K> + Send + 'static,
{
    fn command_for(
        path: &str,
        query: &BTreeMap<String, String>,
        request: RequestId,
    ) -> Option<Result<OwnershipCmd<K>, String>> {
        let req = ReqId(request);
        match path {
            "/ownership/inspect" => Some(Ok(OwnershipCmd::Inspect { req })),
            "/ownership/describe" => Some((|| {
                let text = query.get("key").ok_or("describe needs key=<key>")?;
                let key = K::from_str(text).map_err(|_| format!("bad key {text:?}"))?;
                Ok(OwnershipCmd::Describe { key, req })
            })()),
            "/ownership/acquire" => Some((|| {
                let text = query.get("key").ok_or("acquire needs key=<key>")?;
                let key = K::from_str(text).map_err(|_| format!("bad key {text:?}"))?;
                let kind = kind_of(query.get("kind"))?;
                Ok(OwnershipCmd::Acquire { key, req, kind })
            })()),
            _ => None,
        }
    }

    fn request_id(cmd: &OwnershipCmd<K>) -> RequestId {
        match cmd {
            OwnershipCmd::Acquire { req, .. }
            | OwnershipCmd::Create { req, .. }
            | OwnershipCmd::Inspect { req }
            | OwnershipCmd::Describe { req, .. } => req.0,
        }
    }

    fn answers(out: &OwnershipOut<K>) -> Option<RequestId> {
        match out {
            OwnershipOut::Acquired { req, .. }
            | OwnershipOut::Failed { req, .. }
            | OwnershipOut::Inspected { req, .. }
            | OwnershipOut::Described { req, .. } => Some(req.0),
            // A late win answers nothing: its request was answered before.
            OwnershipOut::LateWin { .. } => None,
        }
    }

    fn out_json(out: &OwnershipOut<K>) -> Value {
        serde_json::to_value(out).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    type Own = Ownership<u64, MemStore<u64>>;

    fn query(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn admin_routes_parse_and_route_by_request_id() {
        let cmd = Own::command_for("/ownership/acquire", &query(&[("key", "7")]), 42)
            .unwrap()
            .unwrap();
        assert_eq!(
            cmd,
            OwnershipCmd::Acquire {
                key: 7,
                req: ReqId(42),
                kind: RequestKind::AddOwner
            }
        );
        assert_eq!(Own::request_id(&cmd), 42);
        let reader = query(&[("key", "7"), ("kind", "add-reader")]);
        assert!(matches!(
            Own::command_for("/ownership/acquire", &reader, 1),
            Some(Ok(OwnershipCmd::Acquire {
                kind: RequestKind::AddReader,
                ..
            }))
        ));
        assert!(matches!(
            Own::command_for("/ownership/inspect", &query(&[]), 3),
            Some(Ok(OwnershipCmd::Inspect { req: ReqId(3) }))
        ));
        assert!(Own::command_for("/register/read", &query(&[]), 1).is_none());
        for bad in [
            query(&[]),
            query(&[("key", "x")]),
            query(&[("key", "1"), ("kind", "steal")]),
        ] {
            assert!(matches!(
                Own::command_for("/ownership/acquire", &bad, 1),
                Some(Err(_))
            ));
        }
        let late = OwnershipOut::LateWin {
            key: 7u64,
            kind: RequestKind::AddOwner,
            o_ts: Default::default(),
        };
        assert_eq!(Own::answers(&late), None);
    }
}
