//! The on-disk encoding of the peer membership's [`AcceptorRecord`]:
//! versioned and checksummed, so that a record from another build, a torn
//! or bit-flipped file, or another node's file is a [`RecordError`] at start,
//! never a panic and never silently taken for "no record".
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..8 | magic `b"ROOSTACC"` |
//! | 8..12 | format version, `u32` little-endian ([`RECORD_VERSION`]; 1 is read too) |
//! | 12..16 | payload length `n`, `u32` little-endian (at most [`MAX_RECORD_BYTES`]) |
//! | 16..16+n | payload: postcard of the version's fields |
//! | 16+n..20+n | CRC-32 (IEEE) of bytes `0..16+n`, `u32` little-endian |
//!
//! The payload uses plain integers rather than the membership's own types,
//! so that changing those types cannot change the file format unnoticed.
//! Version 2 adds the lineage (the incarnations whose votes the record
//! holds); a version 1 record, from the build before, is read with an empty
//! one, so its heir votes only as itself, as that build did: it cannot tell
//! whether the record's writer started without one.
//! Members are listed by increasing node id (one encoding per record), and
//! a decoded record must pass [`AcceptorRecord::check`] against the node and
//! the configuration it is read for.

use std::collections::BTreeMap;

use roost_net::{EpochId, NodeId};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::membership::{AcceptorRecord, Ballot, RecordInvalid, MAX_NODES};
use crate::protocol::View;

const MAGIC: &[u8; 8] = b"ROOSTACC";
/// The format this build writes (it reads this one and version 1).
pub const RECORD_VERSION: u32 = 2;
/// The first format: version 2 without the lineage.
const RECORD_VERSION_1: u32 = 1;
/// Header bytes: magic, version, payload length.
const HEADER_BYTES: usize = 16;
const CHECKSUM_BYTES: usize = 4;
/// The largest payload a record may have: two views of [`MAX_NODES`]
/// members take under 3 KiB, so anything near this is not a record.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// Why bytes are not a usable record.
#[derive(Debug, Error)]
pub enum RecordError {
    #[error("{len} bytes is shorter than a record's header and checksum")]
    TooShort { len: usize },
    #[error("not a membership record (bad magic)")]
    BadMagic,
    #[error("record format version {found}; this build reads versions 1 to {supported}")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("payload of {len} bytes exceeds {MAX_RECORD_BYTES}")]
    TooLarge { len: usize },
    #[error("the header says {declared} payload bytes, the file holds {actual}")]
    Length { declared: usize, actual: usize },
    #[error(
        "checksum mismatch (stored {stored:08x}, computed {computed:08x}): the file is corrupt"
    )]
    Checksum { stored: u32, computed: u32 },
    #[error("the payload does not decode: {0}")]
    Payload(#[source] postcard::Error),
    #[error("{0} trailing payload bytes")]
    Trailing(usize),
    #[error("members are not listed by strictly increasing node id")]
    Unordered,
    #[error(transparent)]
    Invalid(#[from] RecordInvalid),
}

#[derive(Debug, Serialize, Deserialize)]
struct AcceptedV1 {
    round: u64,
    proposer: u32,
    epoch: u64,
    members: Vec<(u32, u64)>,
}

#[derive(Debug, Serialize, Deserialize)]
struct RecordV1 {
    node: u32,
    installed_epoch: u64,
    installed_members: Vec<(u32, u64)>,
    promised_round: u64,
    promised_proposer: u32,
    accepted: Option<AcceptedV1>,
    proposed_round: u64,
}

/// Version 2: version 1's fields, then the lineage.
#[derive(Debug, Serialize, Deserialize)]
struct RecordV2 {
    v1: RecordV1,
    lineage: Vec<u64>,
}

fn members_out(view: &View) -> Vec<(u32, u64)> {
    view.members.iter().map(|(n, &i)| (n.0, i)).collect()
}

fn members_in(list: Vec<(u32, u64)>) -> Result<BTreeMap<NodeId, u64>, RecordError> {
    if list.len() > MAX_NODES {
        return Err(RecordInvalid::Inconsistent("a view with too many members").into());
    }
    if list.windows(2).any(|pair| pair[0].0 >= pair[1].0) {
        return Err(RecordError::Unordered);
    }
    Ok(list.into_iter().map(|(n, i)| (NodeId(n), i)).collect())
}

/// The bytes of `record` (a file's whole contents).
pub fn encode(record: &AcceptorRecord) -> Vec<u8> {
    let v1 = RecordV1 {
        node: record.node.0,
        installed_epoch: record.installed.epoch.0,
        installed_members: members_out(&record.installed),
        promised_round: record.promised.round,
        promised_proposer: record.promised.node.0,
        accepted: record.accepted.as_ref().map(|(ballot, view)| AcceptedV1 {
            round: ballot.round,
            proposer: ballot.node.0,
            epoch: view.epoch.0,
            members: members_out(view),
        }),
        proposed_round: record.proposed_round,
    };
    let wire = RecordV2 {
        v1,
        lineage: record.lineage.clone(),
    };
    let payload = postcard::to_stdvec(&wire).expect("plain integers and vectors encode");
    assert!(
        payload.len() <= MAX_RECORD_BYTES,
        "views are bounded by MAX_NODES"
    );
    let mut bytes = Vec::with_capacity(HEADER_BYTES + payload.len() + CHECKSUM_BYTES);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&RECORD_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&payload);
    let checksum = crc32(&bytes);
    bytes.extend_from_slice(&checksum.to_le_bytes());
    bytes
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// The record in `bytes`, for node `me` of a configuration of `nodes`.
pub fn decode(bytes: &[u8], me: NodeId, nodes: &[NodeId]) -> Result<AcceptorRecord, RecordError> {
    if bytes.len() < HEADER_BYTES + CHECKSUM_BYTES {
        return Err(RecordError::TooShort { len: bytes.len() });
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err(RecordError::BadMagic);
    }
    // The version before anything else: a later format may lay out the rest
    // differently.
    let version = u32_at(bytes, 8);
    if version != RECORD_VERSION && version != RECORD_VERSION_1 {
        return Err(RecordError::UnsupportedVersion {
            found: version,
            supported: RECORD_VERSION,
        });
    }
    let declared = u32_at(bytes, 12) as usize;
    if declared > MAX_RECORD_BYTES {
        return Err(RecordError::TooLarge { len: declared });
    }
    let actual = bytes.len() - HEADER_BYTES - CHECKSUM_BYTES;
    if declared != actual {
        return Err(RecordError::Length { declared, actual });
    }
    let body_end = HEADER_BYTES + declared;
    let stored = u32_at(bytes, body_end);
    let computed = crc32(&bytes[..body_end]);
    if stored != computed {
        return Err(RecordError::Checksum { stored, computed });
    }
    let payload = &bytes[HEADER_BYTES..body_end];
    let (wire, rest) = if version == RECORD_VERSION_1 {
        let (v1, rest): (RecordV1, &[u8]) =
            postcard::take_from_bytes(payload).map_err(RecordError::Payload)?;
        let lineage = Vec::new(); // unknown: see the module doc
        (RecordV2 { v1, lineage }, rest)
    } else {
        postcard::take_from_bytes(payload).map_err(RecordError::Payload)?
    };
    if !rest.is_empty() {
        return Err(RecordError::Trailing(rest.len()));
    }
    let RecordV2 { v1: wire, lineage } = wire;
    let accepted = match wire.accepted {
        None => None,
        Some(a) => Some((
            Ballot {
                round: a.round,
                node: NodeId(a.proposer),
            },
            View {
                epoch: EpochId(a.epoch),
                members: members_in(a.members)?,
            },
        )),
    };
    let record = AcceptorRecord {
        node: NodeId(wire.node),
        installed: View {
            epoch: EpochId(wire.installed_epoch),
            members: members_in(wire.installed_members)?,
        },
        promised: Ballot {
            round: wire.promised_round,
            node: NodeId(wire.promised_proposer),
        },
        accepted,
        proposed_round: wire.proposed_round,
        lineage,
    };
    record.check(me, nodes)?;
    Ok(record)
}

/// CRC-32 (IEEE 802.3, reflected, as zlib's), by table.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc = CRC_TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

const CRC_TABLE: [u32; 256] = crc_table();

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: [NodeId; 3] = [NodeId(0), NodeId(1), NodeId(2)];

    fn view(epoch: u64, members: &[(u32, u64)]) -> View {
        View {
            epoch: EpochId(epoch),
            members: members.iter().map(|&(n, i)| (NodeId(n), i)).collect(),
        }
    }

    fn sample() -> AcceptorRecord {
        AcceptorRecord {
            node: NodeId(1),
            installed: view(3, &[(0, 7), (1, 9)]),
            promised: Ballot {
                round: 12,
                node: NodeId(2),
            },
            accepted: Some((
                Ballot {
                    round: 11,
                    node: NodeId(0),
                },
                view(4, &[(0, 7), (1, 9), (2, 4)]),
            )),
            proposed_round: 10,
            lineage: vec![9, 11],
        }
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn records_round_trip() {
        for record in [sample(), AcceptorRecord::empty(NodeId(1))] {
            let bytes = encode(&record);
            assert_eq!(decode(&bytes, NodeId(1), &NODES).unwrap(), record);
        }
    }

    #[test]
    fn every_flipped_bit_and_every_truncation_is_an_error() {
        let bytes = encode(&sample());
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[at] ^= 1 << bit;
                assert!(
                    decode(&bad, NodeId(1), &NODES).is_err(),
                    "byte {at} bit {bit}"
                );
            }
        }
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len], NodeId(1), &NODES).is_err(), "{len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode(&longer, NodeId(1), &NODES),
            Err(RecordError::Length { .. })
        ));
    }

    /// A record whose header and checksum are right around `payload`.
    fn framed(version: u32, payload: &[u8]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(payload);
        let checksum = crc32(&bytes);
        bytes.extend_from_slice(&checksum.to_le_bytes());
        bytes
    }

    #[test]
    fn well_framed_but_wrong_records_are_clear_errors() {
        let decode1 = |bytes: &[u8]| decode(bytes, NodeId(1), &NODES).unwrap_err();
        assert!(matches!(
            decode1(&framed(3, b"")),
            RecordError::UnsupportedVersion { found: 3, .. }
        ));
        assert!(matches!(decode1(&framed(1, b"")), RecordError::Payload(_)));
        assert!(matches!(decode1(&framed(2, b"")), RecordError::Payload(_)));
        assert!(matches!(
            decode1(b"NOTROOST\x01\0\0\0\0\0\0\0\0\0\0\0"),
            RecordError::BadMagic
        ));
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&1u32.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&[0; 4]);
        assert!(matches!(decode1(&huge), RecordError::TooLarge { .. }));
        // Another node's record, or one naming a node no longer configured.
        let bytes = encode(&sample());
        assert!(matches!(
            decode(&bytes, NodeId(0), &NODES).unwrap_err(),
            RecordError::Invalid(RecordInvalid::WrongNode { .. })
        ));
        assert!(matches!(
            decode(&bytes, NodeId(1), &NODES[..2]).unwrap_err(),
            RecordError::Invalid(RecordInvalid::NotConfigured(NodeId(2)))
        ));
        // Trailing bytes inside the payload.
        let payload = &bytes[HEADER_BYTES..bytes.len() - CHECKSUM_BYTES];
        let mut padded = payload.to_vec();
        padded.push(0);
        assert!(matches!(
            decode1(&framed(RECORD_VERSION, &padded)),
            RecordError::Trailing(1)
        ));
        // Members out of order, and an accepted view of the wrong epoch.
        let unordered = RecordV1 {
            node: 1,
            installed_epoch: 1,
            installed_members: vec![(1, 1), (0, 1)],
            promised_round: 0,
            promised_proposer: 0,
            accepted: None,
            proposed_round: 0,
        };
        let payload = postcard::to_stdvec(&unordered).unwrap();
        assert!(matches!(
            decode1(&framed(1, &payload)),
            RecordError::Unordered
        ));
        let mut wrong = sample();
        wrong.accepted.as_mut().unwrap().1.epoch = EpochId(9);
        assert!(matches!(
            decode1(&encode(&wrong)),
            RecordError::Invalid(RecordInvalid::Inconsistent(_))
        ));
        // A lineage listing an incarnation twice, or too long to be one.
        let mut twice = sample();
        twice.lineage = vec![9, 9];
        assert!(matches!(
            decode1(&encode(&twice)),
            RecordError::Invalid(RecordInvalid::Inconsistent(_))
        ));
        let mut long = sample();
        long.lineage = (0..100).collect();
        assert!(matches!(
            decode1(&encode(&long)),
            RecordError::Invalid(RecordInvalid::Inconsistent(_))
        ));
    }

    /// The previous build's format is still read, with an empty lineage (its
    /// heir votes only as itself, as that build did).
    #[test]
    fn version_1_records_are_read_without_a_lineage() {
        let record = sample();
        let v1 = RecordV1 {
            node: 1,
            installed_epoch: 3,
            installed_members: vec![(0, 7), (1, 9)],
            promised_round: 12,
            promised_proposer: 2,
            accepted: Some(AcceptedV1 {
                round: 11,
                proposer: 0,
                epoch: 4,
                members: vec![(0, 7), (1, 9), (2, 4)],
            }),
            proposed_round: 10,
        };
        let bytes = framed(1, &postcard::to_stdvec(&v1).unwrap());
        let read = decode(&bytes, NodeId(1), &NODES).unwrap();
        assert_eq!(
            read,
            AcceptorRecord {
                lineage: Vec::new(),
                ..record
            }
        );
        // Written back, it is version 2.
        assert_eq!(u32_at(&encode(&read), 8), RECORD_VERSION);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = decode(&bytes, NodeId(1), &NODES);
        }

        #[test]
        fn arbitrary_payloads_in_a_good_frame_never_panic(
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
        ) {
            for version in [1, RECORD_VERSION] {
                let _ = decode(&framed(version, &payload), NodeId(1), &NODES);
            }
        }
    }
}
