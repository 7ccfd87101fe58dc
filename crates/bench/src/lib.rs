//! Roost's benchmark harness.
//!
//! - [`results`]: the results format every benchmark writes (JSON + Markdown);
//! - [`zipf`]: uniform and scrambled-Zipfian key generators (YCSB's);
//! - [`harness`]: fixed-duration multi-threaded measurement with HDR latency;
//! - [`plot`]: grouped bar charts as PNG;
//! - [`engine`]: `roost bench engine`, Silo OCC against a no-concurrency-control
//!   baseline on the storage engine alone;
//! - [`smallbank`]: `roost bench smallbank`, Smallbank over a cluster: Roost
//!   against static sharding with 2PC and perfect sharding;
//! - [`postgres`]: PostgreSQL as a peer (a server of its own, pgbench);
//! - [`progress`]: a benchmark's progress bar and per-cell lines;
//! - [`tatp`]: `roost bench tatp`, TATP over a cluster: Roost (reads on the
//!   local replica) against static sharding and perfect sharding;
//! - [`voter`]: `roost bench voter`, the Zeus seed's popular contestant moving
//!   between nodes under load;
//! - [`smartmart`]: `roost bench smartmart`, the ReactDB seed's SmartMart
//!   application on the reactor layer, sync against async deployments.

pub mod cluster_load;
pub mod engine;
pub mod handover;
pub mod harness;
pub mod plot;
pub mod postgres;
pub mod progress;
pub mod results;
pub mod smallbank;
pub mod smartmart;
pub mod sys;
pub mod tatp;
pub mod voter;
pub mod zipf;
