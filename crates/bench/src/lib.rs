//! Roost's benchmark harness.
//!
//! - [`results`]: the results format every benchmark writes (JSON + Markdown);
//! - [`zipf`]: uniform and scrambled-Zipfian key generators (YCSB's);
//! - [`harness`]: fixed-duration multi-threaded measurement with HDR latency;
//! - [`plot`]: grouped bar charts as PNG;
//! - [`engine`]: `roost bench engine`, Silo OCC against a no-concurrency-control
//!   baseline on the storage engine alone.

pub mod engine;
pub mod harness;
pub mod plot;
pub mod results;
pub mod sys;
pub mod zipf;
