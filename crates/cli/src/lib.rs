//! The `roost` command's library: the argument definitions ([`args`]) and
//! the subcommands' bodies; `main.rs` is the binary (allocator, dispatch,
//! exit code).

pub mod args;
pub mod bench_commit;
pub mod bench_durability;
pub mod bench_escrow;
pub mod bench_handover;
pub mod bench_ownership;
pub mod bench_resp;
pub mod bench_resp_cluster;
pub mod bench_smallbank;
pub mod bench_tatp;
pub mod bench_transport;
pub mod bench_voter;
pub mod bench_voter_balance;
pub mod check;
pub mod cluster;
pub mod demo;
pub mod demo_handover;
pub(crate) mod remote_sweep;
pub mod resp;
pub mod sim;
pub mod sites;
