//! The checks behind Roost's fuzz targets. Each function takes the fuzzer's
//! bytes, feeds them to one input surface of Roost (a wire decoder, a
//! configuration file, the command line) and asserts what must hold for any
//! input: no panic, and the surface's own invariants (round trips, bounds,
//! no authentication without the secret).
//!
//! `fuzz/` (not a workspace member) wraps each in a libFuzzer target built
//! with stable rustc's coverage flags (`scripts/fuzz.sh`); this crate's test
//! `tests/regressions.rs` replays every committed seed and every input a
//! fuzzer ever found (`fuzz/corpus/<target>/`, `fuzz/regressions/<target>/`)
//! through the same functions, in an ordinary `cargo test`.

use std::ffi::OsString;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use clap::Parser;
use roost_net::auth::{
    accept, decode_handshake, dial, encode_handshake, ClusterSecret, MAX_HANDSHAKE_BYTES,
};
use roost_net::frame::{decode_frame, encode_frame, Envelope, DEFAULT_MAX_FRAME_BYTES};
use roost_net::NodeId;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A fuzz target: its name (the folder of its corpus and regressions, the
/// libFuzzer binary) and its check.
pub struct Target {
    pub name: &'static str,
    pub check: fn(&[u8]),
}

/// Every target, in the order `scripts/fuzz.sh` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "resp_parse",
        check: resp_parse,
    },
    Target {
        name: "resp_commands",
        check: resp_commands,
    },
    Target {
        name: "net_frame",
        check: net_frame,
    },
    Target {
        name: "net_handshake",
        check: net_handshake,
    },
    Target {
        name: "escrow_wire",
        check: escrow_wire,
    },
    Target {
        name: "resp_config",
        check: resp_config,
    },
    Target {
        name: "reactor_deployment",
        check: reactor_deployment,
    },
    Target {
        name: "cluster_config",
        check: cluster_config,
    },
    Target {
        name: "cli_args",
        check: cli_args,
    },
];

// ---------------------------------------------------------------- RESP

use roost_resp::protocol::{parse_frame, Frame, InPlace, Limits, Protocol, RequestParser};

/// Small limits, so the fuzzer reaches every limit's error with short inputs.
fn small_limits() -> Limits {
    Limits {
        max_bulk_bytes: 512,
        max_array_len: 16,
        max_inline_bytes: 256,
        max_nesting: 8,
        max_request_bytes: 4096,
    }
}

/// The requests in `pieces` (fed one after another, as reads), through the
/// copying parser or, with `in_place`, the in-place one the server uses;
/// the first error ends it.
fn requests(limits: Limits, pieces: &[&[u8]], in_place: bool) -> Result<Vec<Vec<Vec<u8>>>, String> {
    let mut parser = RequestParser::new(limits);
    let mut buffer = Vec::new();
    let mut spans = Vec::new();
    let mut out = Vec::new();
    for piece in pieces {
        buffer.extend_from_slice(piece);
        loop {
            let (consumed, request) = if in_place {
                match parser
                    .parse_in_place(&buffer, &mut spans)
                    .map_err(|e| e.to_string())?
                {
                    InPlace::Spans { consumed } => {
                        let args: Vec<Vec<u8>> =
                            spans.iter().map(|s| buffer[s.clone()].to_vec()).collect();
                        (consumed, Some(args))
                    }
                    InPlace::Parsed(parsed) => (parsed.consumed, parsed.request),
                }
            } else {
                let parsed = parser.parse(&buffer).map_err(|e| e.to_string())?;
                (parsed.consumed, parsed.request)
            };
            assert!(consumed <= buffer.len(), "consumed past the input");
            buffer.drain(..consumed);
            match request {
                Some(request) => {
                    assert!(
                        !request.is_empty() && request.len() <= limits.max_array_len,
                        "a request of {} arguments",
                        request.len()
                    );
                    assert!(
                        request
                            .iter()
                            .all(|a| a.len() <= limits.max_bulk_bytes.max(limits.max_inline_bytes)),
                        "an argument over the limits"
                    );
                    out.push(request);
                }
                None => break,
            }
        }
    }
    Ok(out)
}

/// Both RESP parsers on arbitrary bytes (the first byte says where to split
/// the rest into two reads): no panic; the same requests whether the input
/// came whole or in two pieces, and from the in-place parser as from the
/// copying one; a frame parsed and re-encoded as RESP3 parses back to itself.
pub fn resp_parse(data: &[u8]) {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let limits = small_limits();
    let at = usize::from(split).min(input.len());
    let whole = requests(limits, &[input], false);
    let pieces = requests(limits, &[&input[..at], &input[at..]], false);
    let in_place = requests(limits, &[&input[..at], &input[at..]], true);
    if let (Ok(whole), Ok(pieces)) = (&whole, &pieces) {
        assert_eq!(whole, pieces, "split reads parse differently");
    }
    assert_eq!(in_place, pieces, "the in-place parser disagrees");
    if let Ok(Some((frame, used))) = parse_frame(input, &limits) {
        assert!(used <= input.len());
        let mut encoded = Vec::new();
        frame.encode(Protocol::Resp3, &mut encoded);
        if let Ok(Some((again, _))) = parse_frame(&encoded, &limits) {
            // NaN doubles are the one value not equal to itself.
            if !format!("{frame:?}").contains("NaN") {
                assert_eq!(
                    again,
                    resp3_form(&frame),
                    "a frame does not re-encode to itself"
                );
            }
        }
        let mut resp2 = Vec::new();
        frame.encode(Protocol::Resp2, &mut resp2);
    }
}

/// What `frame` reads back as after a RESP3 round trip: RESP3 has one nil,
/// so RESP2's nil array (`*-1`) comes back as `_`, `Frame::Null`
/// (fuzz/regressions/resp_parse/null-array-is-null-in-resp3).
fn resp3_form(frame: &Frame) -> Frame {
    let all = |items: &[Frame]| items.iter().map(resp3_form).collect();
    match frame {
        Frame::NullArray => Frame::Null,
        Frame::Array(items) => Frame::Array(all(items)),
        Frame::Set(items) => Frame::Set(all(items)),
        Frame::Push(items) => Frame::Push(all(items)),
        Frame::Map(pairs) => Frame::Map(
            pairs
                .iter()
                .map(|(k, v)| (resp3_form(k), resp3_form(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Requests parsed from arbitrary bytes and run as one pipelined batch on a
/// keyspace of their own: the command layer's argument parsing (every data
/// command, FCALL of the shipped functions) and the store's commands on
/// whatever values the earlier commands left. No panic, one reply per
/// command, and the replies parse as RESP3.
pub fn resp_commands(data: &[u8]) {
    let limits = Limits {
        max_array_len: 8,
        max_bulk_bytes: 64,
        ..small_limits()
    };
    let Ok(requests) = requests(limits, &[data], false) else {
        return;
    };
    // At most 16 commands: enough to build values and then misuse them.
    let requests: Vec<_> = requests.into_iter().take(16).collect();
    if requests.is_empty() {
        return;
    }
    let harness = roost_resp::fuzzing::StoreHarness::new();
    if let Ok(replies) = harness.run(requests) {
        let mut rest = replies.as_slice();
        while !rest.is_empty() {
            match parse_frame(rest, &Limits::default()) {
                Ok(Some((_, used))) => rest = &rest[used..],
                other => panic!("replies do not parse: {other:?}"),
            }
        }
    }
}

// ---------------------------------------------------------------- transport

/// The messages nodes exchange in production (membership and the register).
type NodeWire = roost_cluster::node::NodeMsg<roost_cluster::register::RegisterMsg>;

/// Arbitrary bytes as a stream of transport frames, decoded as production
/// node messages and as the fuzzing message type: every frame is decoded or
/// rejected with an error, no more is consumed than there is, and a decoded
/// envelope re-encodes to the same bytes it came from.
pub fn net_frame(data: &[u8]) {
    fn frames<M>(data: &[u8])
    where
        M: serde::Serialize + for<'de> serde::Deserialize<'de> + PartialEq + std::fmt::Debug,
    {
        let mut rest = data;
        // Bounded: every decoded frame consumes at least its 4-byte prefix.
        for _ in 0..data.len() / 4 + 1 {
            match decode_frame::<M>(rest, DEFAULT_MAX_FRAME_BYTES) {
                Ok(Some((envelope, consumed))) => {
                    assert!(consumed >= 4 && consumed <= rest.len());
                    let again = encode_frame::<M>(&envelope).expect("a decoded envelope encodes");
                    let (back, used): (Envelope<M>, usize) =
                        decode_frame(&again, DEFAULT_MAX_FRAME_BYTES)
                            .expect("re-encoded frame decodes")
                            .expect("re-encoded frame is whole");
                    assert_eq!(used, again.len());
                    assert_eq!(back, envelope, "an envelope changed in a round trip");
                    rest = &rest[consumed..];
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
    frames::<NodeWire>(data);
    frames::<roost_net::fuzzing::FuzzMsg>(data);
}

/// A stream whose reads come from the fuzzer's bytes and whose writes are
/// kept: the peer in a handshake.
struct Scripted<'a> {
    input: &'a [u8],
    written: Vec<u8>,
}

impl AsyncRead for Scripted<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.input).poll_read(cx, buf)
    }
}

impl AsyncWrite for Scripted<'_> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.written.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// One current-thread runtime per thread, with a clock for the handshake's
/// timeout (never reached: a scripted stream never waits).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime");
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// The handshake decoder, and both sides of the handshake against a peer
/// that says whatever the fuzzer says: the decoder rejects or decodes within
/// the size limit (and what it decodes encodes back to the same bytes);
/// neither side ever authenticates the scripted peer, which does not know
/// the secret and cannot predict the fresh nonce its MAC must cover.
pub fn net_handshake(data: &[u8]) {
    if let Ok(Some((msg, used))) = decode_handshake(data) {
        assert!(used <= 4 + MAX_HANDSHAKE_BYTES && used <= data.len());
        assert_eq!(encode_handshake(&msg), &data[..used]);
    }
    static SECRET: OnceLock<ClusterSecret> = OnceLock::new();
    let secret = SECRET.get_or_init(|| ClusterSecret::new(vec![0x5a; 32]).expect("32 bytes"));
    let mut peer = Scripted {
        input: data,
        written: Vec::new(),
    };
    let accepted = block_on(accept(
        &mut peer,
        secret,
        NodeId(1),
        &[NodeId(0), NodeId(2)],
        2_000,
    ));
    assert!(accepted.is_err(), "the acceptor authenticated a forger");
    let mut peer = Scripted {
        input: data,
        written: Vec::new(),
    };
    let dialed = block_on(dial(&mut peer, secret, NodeId(0), NodeId(1), 2_000));
    assert!(dialed.is_err(), "the dialer authenticated a forger");
}

// ---------------------------------------------------------------- escrow

/// A site message's body (the JSON a `SiteMessage` carries between sites):
/// decoded or rejected with an error; a decoded frame encodes and decodes
/// back to itself.
pub fn escrow_wire(data: &[u8]) {
    use roost_escrow::wire::{decode, encode};
    if let Ok(frame) = decode(data) {
        let bytes = encode(&frame).expect("a decoded frame encodes");
        let back = decode(&bytes).expect("an encoded frame decodes");
        assert_eq!(back, frame, "a site frame changed in a round trip");
    }
}

// ---------------------------------------------------------------- configuration

/// The RESP server's TOML configuration: parsed and validated or refused
/// with an error; a valid one yields limits within what it asked for.
pub fn resp_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = roost_resp::Config::from_toml(text) {
        let limits = config.limits();
        assert_eq!(limits.max_bulk_bytes, config.max_bulk_bytes);
        assert!(limits.max_array_len >= 1 && limits.max_request_bytes >= 1);
        let _ = config.auth_required();
        for user in &config.users {
            let _ = config.authenticate(&user.name, user.password.as_bytes());
        }
    }
}

/// The reactor deployment's TOML: parsed or refused; a parsed one validated
/// against a small schema or refused; a valid one places every reactor in
/// one of its containers.
pub fn reactor_deployment(data: &[u8]) {
    use roost_reactor::{Deployment, RelationDef, Schema};
    static ROWS_T: RelationDef<u64, u64> = RelationDef::new("t", "rows");
    static ROWS_U: RelationDef<u64, u64> = RelationDef::new("u", "rows");
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    let schema = SCHEMA.get_or_init(|| {
        Schema::new()
            .reactor_type("t", &[&ROWS_T])
            .and_then(|s| s.reactor_type("u", &[&ROWS_U]))
            .expect("a valid schema")
    });
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(deployment) = Deployment::from_toml(text) else {
        return;
    };
    let _ = (
        deployment.spin_before_park_us(),
        deployment.spin_while_active_us(),
        deployment.spin_yields(),
    );
    if deployment.validate(schema).is_err() {
        return;
    }
    let names = deployment
        .placement
        .by_name
        .keys()
        .map(String::as_str)
        .chain(["x", "section-0", ""]);
    for name in names {
        for reactor_type in ["t", "u", "other"] {
            let container = deployment.place(name, reactor_type);
            assert!(
                container < deployment.containers.len(),
                "{name}/{reactor_type} placed in container {container} of {}",
                deployment.containers.len()
            );
        }
    }
}

/// The cluster configuration file (`roost node --config`, `roost up
/// --config`) and the cluster secret file: parsed and validated or refused
/// with an error; a valid configuration round-trips through its TOML.
pub fn cluster_config(data: &[u8]) {
    use roost_cluster::config::ClusterConfig;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = ClusterSecret::from_hex(text);
    if let Ok(config) = ClusterConfig::from_toml(text, "fuzz.toml") {
        let again = config.to_toml();
        let back = ClusterConfig::from_toml(&again, "again.toml")
            .expect("a valid configuration's TOML is valid");
        assert_eq!(back, config, "a configuration changed in a round trip");
        for node in &config.nodes {
            assert_eq!(config.node(node.id).expect("listed").id, node.id);
        }
    }
}

// ---------------------------------------------------------------- command line

/// `roost`'s command line: the bytes split at NUL into arguments after
/// `roost`, parsed with the real clap definitions (`roost_cli::args`): a
/// clap error or a command, never a panic; the settings a parsed command
/// derives without touching files or the network are valid or a clear error.
pub fn cli_args(data: &[u8]) {
    use std::os::unix::ffi::OsStrExt;

    use roost_cli::args::{Benchmark, Cli, Command};
    let args = std::iter::once(OsString::from("roost")).chain(
        data.split(|&b| b == 0)
            .map(|arg| std::ffi::OsStr::from_bytes(arg).to_owned()),
    );
    let Ok(cli) = Cli::try_parse_from(args) else {
        return;
    };
    match &cli.command {
        Command::Bench(Benchmark::Engine(engine)) => {
            assert!(engine.config().validate().is_ok(), "{engine:?}");
        }
        Command::Bench(Benchmark::Smartmart(smartmart)) => {
            assert!(smartmart.config().validate().is_ok(), "{smartmart:?}");
        }
        Command::Node(node) if node.cluster.config.is_none() => {
            let _ = node.cluster.cluster();
        }
        Command::Up(up) if up.cluster.config.is_none() => {
            let _ = up.cluster.cluster();
        }
        Command::Sim(sim) => {
            let _ = sim.config();
        }
        Command::Resp(resp) if resp.config.is_none() => {
            let config = resp.config().expect("no file to read");
            assert!(config.validate().is_ok(), "{config:?}");
        }
        _ => {}
    }
    let _ = format!("{cli:?}");
}
