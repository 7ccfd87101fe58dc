//! Measures the cost of a call into another container (dispatch to result),
//! against a call into the same container, inside one root transaction:
//! median and tail of each call's latency, three rounds each.
//! `cargo run --release -p roost-reactor --example call_cost`

use std::time::Instant;

use roost_reactor::{Database, Deployment, RelationDef, Schema};

static COUNTER: RelationDef<u32, u64> = RelationDef::new("node", "counter");
const CALLS: u32 = 20_000;

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
        for _round in 0..3 {
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
        }
    }
}
