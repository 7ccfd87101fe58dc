//! Roost's history checker (issue 7): record what concurrent clients saw,
//! then decide whether it is strictly serializable.
//!
//! - [`history`]: [`Op`]s with invocation/completion times and outcomes, the
//!   thread-safe [`Recorder`], JSON-lines save/load;
//! - [`workload`]: Elle-style generators (list-append, rw-register, bank,
//!   counter), a reference [`Model`](workload::Model) and [`simulate`](workload::simulate);
//! - [`checker`]: the dependency graph, cycle search and classification, and
//!   the non-cycle anomalies; [`check`] returns a [`Report`];
//! - [`runner`]: the workloads against the storage engine (`roost check`);
//! - [`reactor_run`]: the scan workload against the reactor layer
//!   (`roost check scan --reactors`);
//! - [`cluster_run`]: the register against a multi-process cluster under
//!   the [`nemesis`];
//! - [`resp_run`]: list-append, rw-register and bank through RESP against
//!   one database over a multi-process Zeus cluster, under the nemesis
//!   (`roost check list-append --cluster 3`).

mod budget;
pub mod checker;
pub mod cluster_run;
pub mod history;
pub mod nemesis;
pub mod reactor_run;
pub mod resp_run;
pub mod runner;
pub mod workload;

pub use checker::{check, Anomaly, AnomalyKind, CheckError, Report};
pub use history::{
    History, HistoryError, KeyBound, Meta, MicroOp, Op, Outcome, Recorder, ScanLayout, WorkloadKind,
};
