//! Memory one million small reactors take beyond their rows (Zeus's Voter has a
//! million voters, each a reactor): resident bytes per reactor for creating
//! them, with no rows written.
//! `cargo run --release -p roost-reactor --example reactor_memory [-- COUNT]`

use roost_reactor::{Database, Deployment, RelationDef, Schema};

static VOTES: RelationDef<u32, u64> = RelationDef::new("voter", "votes");

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4096
}

fn main() {
    let count: u32 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |a| a.parse().expect("COUNT is a number"));
    let schema = Schema::new()
        .reactor_type("voter", &[&VOTES])
        .expect("schema");
    let db = Database::new(schema, Deployment::shared_everything(1)).expect("database");
    let before = resident_bytes();
    for i in 0..count {
        db.create_reactor("voter", &format!("voter-{i}"))
            .expect("create");
    }
    let after = resident_bytes();
    let per_reactor = (after - before) as f64 / f64::from(count);
    println!("{count} reactors: {} resident bytes in all, {per_reactor:.1} bytes per reactor (goal <= 256)", after - before);
}
