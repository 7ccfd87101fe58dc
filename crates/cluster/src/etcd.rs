//! A small client for etcd's v3 API through its JSON gateway (`POST /v3/...`
//! with base64 keys and values), the consensus service under the membership
//! of multi-process clusters ([`crate::coordinated`]).
//!
//! Why the gateway rather than the gRPC `etcd-client` crate: the gRPC client
//! needs `protoc` at build time (tonic), and Roost must build on a fresh
//! machine with `cargo` alone; membership issues a few small requests per
//! second per node, so HTTP/1.1 with one connection per request costs nothing
//! that matters. The gateway is part of etcd's documented v3 API (3.4 serves
//! it at `/v3/`), with the same semantics as gRPC: the same leases, the same
//! transactions, the same linearizable reads.
//!
//! Only what membership needs: leases (grant, keep-alive, revoke), put with a
//! lease, prefix range, and a compare-and-swap transaction on a key's
//! `mod_revision`.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest gateway response we accept (a whole cluster's registrations
/// are a few KiB).
pub const MAX_RESPONSE_BYTES: usize = 4 << 20;

#[derive(Debug, Error)]
pub enum EtcdError {
    #[error("no etcd endpoint configured")]
    NoEndpoints,
    #[error("etcd {endpoint}: {source}")]
    Io {
        endpoint: String,
        source: std::io::Error,
    },
    #[error("etcd {endpoint}: no answer within {timeout_ms} ms")]
    Timeout { endpoint: String, timeout_ms: u64 },
    #[error("etcd {endpoint}: HTTP {code}: {body}")]
    Status {
        endpoint: String,
        code: u16,
        body: String,
    },
    #[error("etcd {endpoint}: malformed answer: {what}")]
    Malformed { endpoint: String, what: String },
    #[error("etcd {endpoint}: answer larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge { endpoint: String },
}

/// One key-value pair as etcd reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub mod_revision: i64,
    pub lease: i64,
}

/// A lease etcd granted: its id and time-to-live in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub id: i64,
    pub ttl_s: i64,
}

/// An etcd client over the JSON gateway. Requests go to the endpoints in turn
/// until one answers; cheap to clone.
#[derive(Debug, Clone)]
pub struct EtcdClient {
    endpoints: Vec<String>,
    request_timeout: Duration,
}

impl EtcdClient {
    /// `endpoints` are `host:port` (an `http://` prefix is accepted and
    /// dropped).
    pub fn new(endpoints: &[String], request_timeout_ms: u64) -> Result<Self, EtcdError> {
        let endpoints: Vec<String> = endpoints
            .iter()
            .map(|e| {
                e.trim_start_matches("http://")
                    .trim_end_matches('/')
                    .to_owned()
            })
            .filter(|e| !e.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        Ok(EtcdClient {
            endpoints,
            request_timeout: Duration::from_millis(request_timeout_ms.max(1)),
        })
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Grants a lease of `ttl_s` seconds (etcd may raise it to its minimum).
    pub async fn lease_grant(&self, ttl_s: i64) -> Result<Lease, EtcdError> {
        let (endpoint, answer) = self
            .call("/v3/lease/grant", json!({ "TTL": ttl_s }))
            .await?;
        Ok(Lease {
            id: int_field(&answer, "ID", &endpoint)?,
            ttl_s: int_field(&answer, "TTL", &endpoint)?,
        })
    }

    /// Refreshes a lease; `None` when etcd says it has expired (TTL 0 or absent).
    pub async fn lease_keep_alive(&self, id: i64) -> Result<Option<i64>, EtcdError> {
        let (endpoint, answer) = self
            .call("/v3/lease/keepalive", json!({ "ID": id.to_string() }))
            .await?;
        // A streaming RPC through the gateway: the answer is `{"result": {...}}`.
        let result = answer.get("result").unwrap_or(&answer);
        let ttl = optional_int(result, "TTL", &endpoint)?.unwrap_or(0);
        Ok((ttl > 0).then_some(ttl))
    }

    pub async fn lease_revoke(&self, id: i64) -> Result<(), EtcdError> {
        self.call("/v3/lease/revoke", json!({ "ID": id.to_string() }))
            .await
            .map(drop)
    }

    /// Puts `key = value`, attached to `lease` (0: none).
    pub async fn put(&self, key: &[u8], value: &[u8], lease: i64) -> Result<(), EtcdError> {
        let mut body = json!({ "key": B64.encode(key), "value": B64.encode(value) });
        if lease != 0 {
            body["lease"] = Value::String(lease.to_string());
        }
        self.call("/v3/kv/put", body).await.map(drop)
    }

    /// Every key starting with `prefix`, in key order (one linearizable read).
    pub async fn range_prefix(&self, prefix: &[u8]) -> Result<Vec<KeyValue>, EtcdError> {
        let body = json!({
            "key": B64.encode(prefix),
            "range_end": B64.encode(prefix_end(prefix)),
        });
        let (endpoint, answer) = self.call("/v3/kv/range", body).await?;
        kvs(&answer, &endpoint)
    }

    /// If `key`'s `mod_revision` is still `expected` (0: the key must not
    /// exist), applies every put and delete in one transaction. True if it
    /// happened.
    pub async fn put_if_revision(
        &self,
        key: &[u8],
        expected_mod_revision: i64,
        puts: &[(&[u8], &[u8])],
        deletes: &[&[u8]],
    ) -> Result<bool, EtcdError> {
        let mut success: Vec<Value> = puts
            .iter()
            .map(
                |(k, v)| json!({ "request_put": { "key": B64.encode(k), "value": B64.encode(v) } }),
            )
            .collect();
        success.extend(
            deletes
                .iter()
                .map(|k| json!({ "request_delete_range": { "key": B64.encode(k) } })),
        );
        let body = json!({
            "compare": [{
                "target": "MOD",
                "key": B64.encode(key),
                "result": "EQUAL",
                "mod_revision": expected_mod_revision.to_string(),
            }],
            "success": success,
        });
        let (_, answer) = self.call("/v3/kv/txn", body).await?;
        Ok(answer.get("succeeded").and_then(Value::as_bool) == Some(true))
    }

    /// Keys in `[from, to)`, in key order, at most `limit`.
    pub async fn range(
        &self,
        from: &[u8],
        to: &[u8],
        limit: u32,
    ) -> Result<Vec<KeyValue>, EtcdError> {
        let body = json!({
            "key": B64.encode(from),
            "range_end": B64.encode(to),
            "limit": limit,
        });
        let (endpoint, answer) = self.call("/v3/kv/range", body).await?;
        kvs(&answer, &endpoint)
    }

    /// Sends one request to the first endpoint that answers.
    async fn call(&self, path: &str, body: Value) -> Result<(String, Value), EtcdError> {
        let body = body.to_string();
        let mut last = EtcdError::NoEndpoints;
        for endpoint in &self.endpoints {
            match tokio::time::timeout(self.request_timeout, post(endpoint, path, &body)).await {
                Ok(Ok(answer)) => return Ok((endpoint.clone(), answer)),
                Ok(Err(error)) => last = error,
                Err(_) => {
                    last = EtcdError::Timeout {
                        endpoint: endpoint.clone(),
                        timeout_ms: self.request_timeout.as_millis() as u64,
                    }
                }
            }
        }
        Err(last)
    }
}

/// The first key after every key that starts with `prefix` (etcd's range_end
/// for a prefix query).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // every key
}

async fn post(endpoint: &str, path: &str, body: &str) -> Result<Value, EtcdError> {
    let io = |source| EtcdError::Io {
        endpoint: endpoint.to_owned(),
        source,
    };
    let mut stream = TcpStream::connect(endpoint).await.map_err(io)?;
    let _ = stream.set_nodelay(true);
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {endpoint}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.map_err(io)?;
    let mut response = Vec::with_capacity(1024);
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream.read(&mut chunk).await.map_err(io)?;
        if n == 0 {
            break;
        }
        if response.len() + n > MAX_RESPONSE_BYTES {
            return Err(EtcdError::TooLarge {
                endpoint: endpoint.to_owned(),
            });
        }
        response.extend_from_slice(&chunk[..n]);
    }
    parse_response(&response).map_err(|(code, what)| match code {
        Some(code) => EtcdError::Status {
            endpoint: endpoint.to_owned(),
            code,
            body: what,
        },
        None => EtcdError::Malformed {
            endpoint: endpoint.to_owned(),
            what,
        },
    })
}

/// Parses a whole HTTP/1.1 response (read to EOF): the status must be 200 and
/// the body JSON, plain or chunked. Errors carry the status code if there was
/// one.
pub fn parse_response(response: &[u8]) -> Result<Value, (Option<u16>, String)> {
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or((None, "no end of headers".to_owned()))?;
    let head =
        std::str::from_utf8(&response[..split]).map_err(|_| (None, "non-UTF-8 headers".into()))?;
    let raw_body = &response[split + 4..];
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code: u16 = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or((None, format!("bad status line {status:?}")))?;
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(raw_body).ok_or((Some(code), "bad chunked body".to_owned()))?
    } else {
        raw_body.to_vec()
    };
    if code != 200 {
        return Err((Some(code), String::from_utf8_lossy(&body).into_owned()));
    }
    serde_json::from_slice(&body).map_err(|e| (None, format!("body is not JSON: {e}")))
}

/// Decodes a chunked transfer-encoded body; `None` if malformed.
fn dechunk(mut input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len());
    // Each chunk takes at least 3 bytes, so this bounds the loop.
    for _ in 0..=input.len() {
        let line_end = input.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&input[..line_end]).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        input = &input[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        if input.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&input[..size]);
        input = &input[size + 2..];
    }
    None
}

/// etcd's gateway writes 64-bit integers as JSON strings; accept both.
fn optional_int(value: &Value, field: &str, endpoint: &str) -> Result<Option<i64>, EtcdError> {
    let parsed = match value.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse().ok(),
        Some(_) => None,
    };
    parsed.map(Some).ok_or_else(|| EtcdError::Malformed {
        endpoint: endpoint.to_owned(),
        what: format!("field {field} is not an integer"),
    })
}

fn int_field(value: &Value, field: &str, endpoint: &str) -> Result<i64, EtcdError> {
    optional_int(value, field, endpoint)?.ok_or_else(|| EtcdError::Malformed {
        endpoint: endpoint.to_owned(),
        what: format!("no field {field}"),
    })
}

fn bytes_field(value: &Value, field: &str, endpoint: &str) -> Result<Vec<u8>, EtcdError> {
    match value.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => B64.decode(s).map_err(|_| EtcdError::Malformed {
            endpoint: endpoint.to_owned(),
            what: format!("field {field} is not base64"),
        }),
        Some(_) => Err(EtcdError::Malformed {
            endpoint: endpoint.to_owned(),
            what: format!("field {field} is not a string"),
        }),
    }
}

fn kvs(answer: &Value, endpoint: &str) -> Result<Vec<KeyValue>, EtcdError> {
    let Some(list) = answer.get("kvs") else {
        return Ok(Vec::new()); // the gateway omits empty lists
    };
    let list = list.as_array().ok_or_else(|| EtcdError::Malformed {
        endpoint: endpoint.to_owned(),
        what: "kvs is not a list".into(),
    })?;
    list.iter()
        .map(|kv| {
            Ok(KeyValue {
                key: bytes_field(kv, "key", endpoint)?,
                value: bytes_field(kv, "value", endpoint)?,
                mod_revision: optional_int(kv, "mod_revision", endpoint)?.unwrap_or(0),
                lease: optional_int(kv, "lease", endpoint)?.unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end(b"/roost/"), b"/roost0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn responses_plain_and_chunked_parse() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{\"a\":\"1\"}";
        assert_eq!(parse_response(plain).unwrap()["a"], "1");
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n5\r\n:\"1\"}\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap()["a"], "1");
    }

    #[test]
    fn bad_responses_are_errors_not_panics() {
        assert_eq!(parse_response(b"garbage").unwrap_err().0, None);
        let (code, body) =
            parse_response(b"HTTP/1.1 400 Bad Request\r\n\r\n{\"error\":\"x\"}").unwrap_err();
        assert_eq!(code, Some(400));
        assert!(body.contains("error"));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n\r\nnot json").is_err());
        let truncated = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nab";
        assert!(parse_response(truncated).is_err());
    }

    #[test]
    fn gateway_integers_as_strings_or_numbers() {
        let v = json!({"a": "12", "b": 13, "c": true});
        assert_eq!(optional_int(&v, "a", "e").unwrap(), Some(12));
        assert_eq!(optional_int(&v, "b", "e").unwrap(), Some(13));
        assert_eq!(optional_int(&v, "z", "e").unwrap(), None);
        assert!(optional_int(&v, "c", "e").is_err());
    }

    #[test]
    fn kvs_decode() {
        let answer = json!({"kvs": [{"key": B64.encode("/k"), "value": B64.encode("v"),
            "mod_revision": "7", "lease": "99"}]});
        let kvs = kvs(&answer, "e").unwrap();
        assert_eq!(kvs[0].key, b"/k");
        assert_eq!(kvs[0].value, b"v");
        assert_eq!((kvs[0].mod_revision, kvs[0].lease), (7, 99));
        assert!(super::kvs(&json!({}), "e").unwrap().is_empty());
    }
}
