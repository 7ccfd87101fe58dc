//! Measures the cost of a call into another container (dispatch to result),
//! against a call into the same container, inside one root transaction:
//! median and tail of each call's latency per round, then over all rounds.
//! `cargo run --release -p roost-reactor --example call_cost`

use std::time::Instant;

use roost_reactor::{Database, Deployment, RelationDef, Schema};

static COUNTER: RelationDef<u32, u64> = RelationDef::new("node", "counter");
const CALLS: u32 = 20_000;
const ROUNDS: usize = 5;

fn main() {
    let schema = Schema::new()
        .reactor_type("node", &[&COUNTER])
        .expect("schema");
    let deployment = Deployment::from_toml(
        "[[containers]]\nname = \"a\"\n[[containers]]\nname = \"b\"\n[placement]\nby_name = { far = \"b\" }\ndefault = \"a\"",
    )
    .expect("deployment");
    let db = Database::new(schema, deployment).expect("database");
    let (near, far) = (
        db.create_reactor("node", "near").unwrap(),
        db.create_reactor("node", "far").unwrap(),
    );
    for (label, target) in [("same container", near), ("other container", far)] {
        let mut round_medians = Vec::new();
        let mut all_ns = Vec::new();
        for _round in 0..ROUNDS {
            let mut samples_ns = db
                .run_blocking(near, move |ctx| async move {
                    let mut samples_ns = Vec::with_capacity(CALLS as usize);
                    for _ in 0..CALLS {
                        let start = Instant::now();
                        ctx.call(target, |_c| async move { Ok(()) }).await?;
                        samples_ns.push(start.elapsed().as_nanos() as u64);
                    }
                    Ok(samples_ns)
                })
                .expect("root transaction");
            samples_ns.sort_unstable();
            let at = |q: f64| samples_ns[((samples_ns.len() - 1) as f64 * q) as usize];
            println!(
                "{label:>16}: median {:6} ns, p90 {:6} ns, p99 {:7} ns over {CALLS} sequential calls",
                at(0.5),
                at(0.9),
                at(0.99)
            );
            round_medians.push(at(0.5));
            all_ns.extend(samples_ns);
        }
        all_ns.sort_unstable();
        round_medians.sort_unstable();
        let at = |q: f64| all_ns[((all_ns.len() - 1) as f64 * q) as usize];
        println!(
            "{label:>16}: all {ROUNDS} rounds: median {} ns (p10 {}, p90 {}, p99 {}, p99.9 {}); median of the round medians {} ns",
            at(0.5),
            at(0.1),
            at(0.9),
            at(0.99),
            at(0.999),
            round_medians[round_medians.len() / 2]
        );
    }
}
