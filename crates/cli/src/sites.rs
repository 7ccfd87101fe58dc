//! `roost sites recover`: the seed's §IV-E for a deployment of sites
//! (`roost up --sites`): an operator declares a site permanently failed and
//! names one heir; every surviving site fences the failed one and reports
//! what it knows of its rights (BC.FENCE), then the heir takes them over,
//! counter by counter, from all the reports (BC.ADOPT).
//!
//! The operator is the single decider: run it once per failed site (a
//! second run recovers nothing more, since the heir's report then includes
//! the first recovery; two heirs at once would recover twice).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use roost_resp::protocol::{parse_frame, Frame, Limits, Protocol};

#[derive(Debug, Subcommand)]
pub enum SitesCommand {
    /// Recover the rights of a site declared permanently failed (§IV-E).
    Recover(RecoverArgs),
}

#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// The site declared permanently failed (its index).
    #[arg(long)]
    pub failed: usize,
    /// The one site that takes its rights over.
    #[arg(long)]
    pub heir: usize,
    /// Every site's RESP address, in site order (comma-separated; the
    /// failed site's entry is not contacted).
    #[arg(long, value_delimiter = ',', required = true)]
    pub resp: Vec<SocketAddr>,
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// One request, one reply, over a fresh connection.
fn call(addr: SocketAddr, args: &[&[u8]]) -> anyhow::Result<Frame> {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)
        .with_context(|| format!("connecting to the site at {addr}"))?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    let mut wire = Vec::new();
    Frame::Array(args.iter().map(|a| Frame::bulk(a.to_vec())).collect())
        .encode(Protocol::Resp2, &mut wire);
    stream.write_all(&wire)?;
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    loop {
        if let Some((frame, _)) = parse_frame(&buffer, &Limits::default())
            .map_err(|e| anyhow::anyhow!("a bad reply from {addr}: {e}"))?
        {
            return Ok(frame);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("{addr} closed the connection before replying");
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn run(command: &SitesCommand) -> anyhow::Result<()> {
    match command {
        SitesCommand::Recover(args) => recover(args),
    }
}

fn recover(args: &RecoverArgs) -> anyhow::Result<()> {
    let sites = args.resp.len();
    if args.failed >= sites || args.heir >= sites || args.failed == args.heir {
        bail!(
            "--failed {} and --heir {} must be two different sites of the {sites} in --resp",
            args.failed,
            args.heir
        );
    }
    let failed = args.failed.to_string();
    // 1. Every survivor fences the failed site, then reports.
    let mut reports: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    for (site, &addr) in args.resp.iter().enumerate() {
        if site == args.failed {
            continue;
        }
        match call(addr, &[b"BC.FENCE", failed.as_bytes()])? {
            Frame::Array(items) => {
                for pair in items.chunks(2) {
                    match pair {
                        [Frame::Bulk(key), Frame::Bulk(report)] => reports
                            .entry(text(key))
                            .or_default()
                            .push((site, text(report))),
                        other => bail!("site {site} answered BC.FENCE with {other:?}"),
                    }
                }
            }
            Frame::Error(e) => bail!("site {site} refused BC.FENCE: {e}"),
            other => bail!("site {site} answered BC.FENCE with {other:?}"),
        }
        println!("site {site} fenced site {}", args.failed);
    }
    // 2. The heir takes the rights over, counter by counter.
    let heir = args.resp[args.heir];
    let (mut recovered, mut skipped) = (0u64, 0usize);
    for (key, from) in &reports {
        if from.len() != sites - 1 {
            let reporters: Vec<usize> = from.iter().map(|(s, _)| *s).collect();
            eprintln!(
                "counter {key}: only sites {reporters:?} know it; every survivor must report, skipped"
            );
            skipped += 1;
            continue;
        }
        let mut request: Vec<&[u8]> = vec![b"BC.ADOPT", failed.as_bytes(), key.as_bytes()];
        request.extend(from.iter().map(|(_, report)| report.as_bytes()));
        match call(heir, &request)? {
            Frame::Integer(n) => {
                println!("counter {key}: site {} took over {n} rights", args.heir);
                recovered += n.unsigned_abs();
            }
            Frame::Error(e) => bail!("counter {key}: the heir refused BC.ADOPT: {e}"),
            other => bail!("counter {key}: the heir answered BC.ADOPT with {other:?}"),
        }
    }
    println!(
        "recovered {recovered} rights of site {} at site {} over {} counters ({skipped} skipped)",
        args.failed,
        args.heir,
        reports.len() - skipped
    );
    if skipped > 0 {
        bail!("{skipped} counters could not be recovered");
    }
    Ok(())
}
