//! SmartMart's procedures, written once against the reactor API and run
//! unchanged under either deployment, and the loader.
//!
//! One interaction is one root transaction on a cart: `add_items` then
//! `checkout`.
//!
//! - `add_items`: bump the cart's session; ask every store section of the
//!   order for its items' prices (`get_prices`, all calls started, then
//!   awaited) and, meanwhile, the customer for its group and the group
//!   manager for its fixed discounts; join them into `cart_purchases`.
//! - `checkout`: read the session's `cart_purchases`; start
//!   `variable_discount_update_inventory` on every section of the order;
//!   meanwhile clear the session's cart lines; await the sections and sum;
//!   then record the visit at the customer and the sale at the store,
//!   fire-and-forget (un-awaited calls: the reactor layer completes them
//!   before the commit).
//! - `variable_discount_update_inventory`, per item: decrement the stock;
//!   scan the newest `window` rows of the item's purchase history and compute
//!   their mean and standard deviation (Delay variant: busy work instead of
//!   the scan); append the sale to the history; price the item.
//!
//! The purchase history is a ring per item: exactly `history_len` rows, the
//! newest sale appended (sequence number `history_seq + 1`, kept in the
//! inventory row) and the oldest deleted, so the window moves with every sale
//! while memory stays flat over a long run. Stores visits and sales keep the
//! last [`KEPT_SESSIONS`] sessions per customer and cart for the same reason.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roost_reactor::{Database, ReactorCtx, ReactorError, ReactorId, ScanDirection};
use thiserror::Error;

use super::schema::{
    self, CartInfo, CartLine, CustomerInfo, DeploymentKind, InventoryRow, Purchase, Sale,
    StoreVisit, CART, CART_INFO, CART_PURCHASES, CUSTOMER, CUSTOMER_INFO, DISCOUNTS, GROUP_MANAGER,
    INVENTORY, PURCHASE_HISTORY, SALES, STORE, STORE_SECTION, STORE_VISITS,
};
use super::workload::{busy_trend, price_item, Order, Totals, Trend};

/// Store visits (per customer) and sales (per cart) kept.
pub const KEPT_SESSIONS: u64 = 16;
/// Stock of every item at load: never runs out in a benchmark.
pub const INITIAL_STOCK: i64 = 1 << 40;
/// Items per loading transaction.
const LOAD_BATCH_ITEMS: u32 = 8;
const MAX_SECTIONS: usize = 64;

#[derive(Debug, Error)]
pub enum SetupError {
    #[error("SmartMart data: {0}")]
    Config(String),
    #[error(transparent)]
    Schema(#[from] roost_reactor::SchemaError),
    #[error(transparent)]
    Deployment(#[from] roost_reactor::DeploymentError),
    #[error(transparent)]
    Directory(#[from] roost_reactor::DirectoryError),
    #[error("loading: {0}")]
    Load(#[from] ReactorError),
}

/// What a SmartMart database holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataConfig {
    pub sections: usize,
    pub items_per_section: u32,
    /// Purchase-history rows per item (at least the largest window scanned).
    pub history_len: u32,
    /// Carts (one per worker), each with its own customer.
    pub carts: usize,
    pub groups: usize,
    /// Executors serving the carts.
    pub cart_executors: usize,
    pub load_threads: usize,
}

impl DataConfig {
    pub fn validate(&self) -> Result<(), SetupError> {
        let bad = |what: &str| Err(SetupError::Config(what.to_owned()));
        if self.sections == 0 || self.sections > MAX_SECTIONS {
            return bad("sections must be 1..=64");
        }
        if self.items_per_section == 0 || self.items_per_section > (1 << 20) {
            return bad("items per section must be 1..=1048576");
        }
        if self.history_len == 0 || self.history_len > 100_000 {
            return bad("history length must be 1..=100000");
        }
        if self.carts == 0 || self.groups == 0 || self.cart_executors == 0 {
            return bad("carts, groups and cart executors must be at least 1");
        }
        Ok(())
    }
}

/// The reactors, by index: what procedures need to address each other.
#[derive(Debug)]
pub struct Topology {
    pub carts: Vec<ReactorId>,
    pub customers: Vec<ReactorId>,
    pub groups: Vec<ReactorId>,
    pub sections: Vec<ReactorId>,
    pub store: ReactorId,
    pub history_len: u32,
}

/// Per-caller instrumentation of root transactions: attempts (every run of
/// the procedure; more than one means conflict retries) and when the last
/// attempt's body ended, so the caller can time what follows (waiting for
/// un-awaited calls, the commit across containers, the reply).
#[derive(Debug)]
pub struct Probe {
    base: Instant,
    attempts: AtomicU64,
    body_end_ns: AtomicU64,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            base: Instant::now(),
            attempts: AtomicU64::new(0),
            body_end_ns: AtomicU64::new(0),
        }
    }
}

impl Probe {
    fn attempt(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
    }

    fn body_done(&self) {
        let ns = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.body_end_ns.store(ns, Ordering::Release);
    }

    /// Attempts since the last call.
    pub fn take_attempts(&self) -> u64 {
        self.attempts.swap(0, Ordering::Relaxed)
    }

    /// Time from the end of the last body to `now`.
    pub fn after_body(&self, now: Instant) -> Duration {
        let end = self.base + Duration::from_nanos(self.body_end_ns.load(Ordering::Acquire));
        now.saturating_duration_since(end)
    }
}

/// What a committed interaction bought and paid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Receipt {
    pub session: u64,
    pub totals: Totals,
}

/// A loaded SmartMart database under one deployment.
pub struct SmartMart {
    pub db: Database,
    pub topology: Arc<Topology>,
    pub kind: DeploymentKind,
    pub data: DataConfig,
    pub deployment_toml: String,
    pub load_time: Duration,
}

/// Deterministic pseudo-random numbers for the loaded data.
fn mix(a: u64, b: u64) -> u64 {
    let mut x = (a ^ 0x5353_4D41_5254).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b;
    x = (x ^ (x >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

fn inventory_row(item: u32, history_len: u32) -> InventoryRow {
    let h = mix(u64::from(item), 1);
    let price = 100 + h % 9_900;
    InventoryRow {
        price_cents: price,
        min_price_cents: price * 6 / 10,
        quantity: INITIAL_STOCK,
        var_disc_bp: 500 + (h >> 20) as u32 % 1_500,
        history_seq: u64::from(history_len),
    }
}

impl SmartMart {
    /// Builds the database, creates every reactor and loads the data.
    pub fn new(kind: DeploymentKind, data: &DataConfig) -> Result<Self, SetupError> {
        data.validate()?;
        let started = Instant::now();
        let deployment_toml = kind.toml(data.cart_executors, data.sections);
        let db = Database::new(
            schema::schema()?,
            kind.deployment(data.cart_executors, data.sections)?,
        )?;
        // Carts first: the affinity router spreads reactor ids 0..carts over
        // the cart executors.
        let carts = (0..data.carts)
            .map(|i| db.create_reactor(CART, &schema::cart_name(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let customers = (0..data.carts)
            .map(|i| db.create_reactor(CUSTOMER, &schema::customer_name(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let groups = (0..data.groups)
            .map(|i| db.create_reactor(GROUP_MANAGER, &schema::group_name(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let sections = (0..data.sections)
            .map(|i| db.create_reactor(STORE_SECTION, &schema::section_name(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let store = db.create_reactor(STORE, schema::STORE_NAME)?;
        let topology = Arc::new(Topology {
            carts,
            customers,
            groups,
            sections,
            store,
            history_len: data.history_len,
        });
        let mart = SmartMart {
            db,
            topology,
            kind,
            data: data.clone(),
            deployment_toml,
            load_time: Duration::ZERO,
        };
        mart.load()?;
        Ok(SmartMart {
            load_time: started.elapsed(),
            ..mart
        })
    }

    fn load(&self) -> Result<(), SetupError> {
        let (data, topo) = (&self.data, &self.topology);
        for (i, &cart) in topo.carts.iter().enumerate() {
            let info = CartInfo {
                customer: i as u32,
                store: 0,
                session: 0,
            };
            self.db.run_blocking(
                cart,
                move |ctx| async move { ctx.put(&CART_INFO, &0, &info) },
            )?;
            let customer = CustomerInfo {
                name: schema::customer_name(i),
                group: (i % data.groups) as u32,
            };
            self.db.run_blocking(topo.customers[i], move |ctx| {
                let customer = customer.clone();
                async move { ctx.put(&CUSTOMER_INFO, &0, &customer) }
            })?;
        }
        let total_items = data.items_per_section * data.sections as u32;
        for (g, &group) in topo.groups.iter().enumerate() {
            self.db.run_blocking(group, move |ctx| async move {
                for item in 0..total_items {
                    let bp = (mix(g as u64 + 1, u64::from(item)) % 1_500) as u32;
                    ctx.put(&DISCOUNTS, &item, &bp)?;
                }
                Ok(())
            })?;
        }
        // Sections: batches of items, each its inventory rows and full
        // purchase history, from several threads.
        let batches: Vec<(usize, u32)> = (0..data.sections)
            .flat_map(|s| {
                (0..data.items_per_section)
                    .step_by(LOAD_BATCH_ITEMS as usize)
                    .map(move |first| (s, first))
            })
            .collect();
        let threads = data.load_threads.clamp(1, batches.len().max(1));
        let next = AtomicU64::new(0);
        let (ips, history_len, carts) = (data.items_per_section, data.history_len, data.carts);
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| -> Result<(), ReactorError> {
                        loop {
                            let b = next.fetch_add(1, Ordering::Relaxed) as usize;
                            let Some(&(section, first)) = batches.get(b) else {
                                return Ok(());
                            };
                            let base = section as u32 * ips;
                            let items =
                                (base + first)..(base + (first + LOAD_BATCH_ITEMS).min(ips));
                            self.db.run_blocking(topo.sections[section], move |ctx| {
                                let items = items.clone();
                                async move {
                                    for item in items {
                                        ctx.put(
                                            &INVENTORY,
                                            &item,
                                            &inventory_row(item, history_len),
                                        )?;
                                        for seq in 1..=u64::from(history_len) {
                                            let h = mix(u64::from(item), seq);
                                            let purchase = Purchase {
                                                time: seq,
                                                quantity: 1 + (h % 8) as u32,
                                                customer: ((h >> 8) % carts as u64) as u32,
                                            };
                                            ctx.put(&PURCHASE_HISTORY, &(item, seq), &purchase)?;
                                        }
                                    }
                                    Ok(())
                                }
                            })?;
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().expect("loader thread"))
        })?;
        Ok(())
    }

    /// One interaction (`add_items` then `checkout`) on cart `cart`, as one
    /// root transaction, retried on conflicts by the reactor layer.
    pub fn interaction(
        &self,
        cart: usize,
        order: &Arc<Order>,
        probe: &Arc<Probe>,
    ) -> Result<Receipt, ReactorError> {
        let topo = Arc::clone(&self.topology);
        let (order, probe) = (Arc::clone(order), Arc::clone(probe));
        self.db.run_blocking(self.topology.carts[cart], move |ctx| {
            let (topo, order, probe) = (Arc::clone(&topo), Arc::clone(&order), Arc::clone(&probe));
            async move {
                probe.attempt();
                let receipt = shop(ctx, topo, cart as u32, order).await;
                probe.body_done();
                receipt
            }
        })
    }

    /// A root transaction that only reads the cart's row: what a commit costs
    /// with (almost) nothing to validate, for comparison.
    pub fn ping(&self, cart: usize, probe: &Arc<Probe>) -> Result<u64, ReactorError> {
        let probe = Arc::clone(probe);
        self.db.run_blocking(self.topology.carts[cart], move |ctx| {
            let probe = Arc::clone(&probe);
            async move {
                probe.attempt();
                let session = ctx.get(&CART_INFO, &0)?.map_or(0, |i| i.session);
                probe.body_done();
                Ok(session)
            }
        })
    }

    /// Per section: (stock sold since load, sum of `history_seq` advances),
    /// read through the reactor API in one transaction per section.
    pub fn section_sales(&self) -> Result<Vec<(u64, u64)>, ReactorError> {
        let history_len = u64::from(self.data.history_len);
        self.topology
            .sections
            .iter()
            .map(|&s| {
                self.db.run_blocking(s, move |ctx| async move {
                    let rows = ctx.scan(&INVENTORY, .., ScanDirection::Forward, usize::MAX)?;
                    let sold = rows
                        .iter()
                        .map(|(_, r)| (INITIAL_STOCK - r.quantity) as u64)
                        .sum();
                    let sales = rows.iter().map(|(_, r)| r.history_seq - history_len).sum();
                    Ok((sold, sales))
                })
            })
            .collect()
    }

    /// The purchase-history rows of `item` (in its section), oldest first.
    pub fn history_of(&self, item: u32) -> Result<Vec<(u64, Purchase)>, ReactorError> {
        let section = self.topology.sections[(item / self.data.items_per_section) as usize];
        self.db.run_blocking(section, move |ctx| async move {
            let rows = ctx.scan(
                &PURCHASE_HISTORY,
                (item, 0)..=(item, u64::MAX),
                ScanDirection::Forward,
                usize::MAX,
            )?;
            Ok(rows.into_iter().map(|((_, seq), p)| (seq, p)).collect())
        })
    }

    /// The store's sales ledger rows of `cart`.
    pub fn sales_of(&self, cart: usize) -> Result<Vec<(u64, Sale)>, ReactorError> {
        let cart = cart as u32;
        self.db
            .run_blocking(self.topology.store, move |ctx| async move {
                let rows = ctx.scan(
                    &SALES,
                    (cart, 0)..=(cart, u64::MAX),
                    ScanDirection::Forward,
                    usize::MAX,
                )?;
                Ok(rows.into_iter().map(|((_, s), sale)| (s, sale)).collect())
            })
    }
}

/// The interaction: `add_items`, then `checkout` of the same session.
async fn shop(
    ctx: ReactorCtx,
    topo: Arc<Topology>,
    cart: u32,
    order: Arc<Order>,
) -> Result<Receipt, ReactorError> {
    let info = add_items(&ctx, &topo, &order).await?;
    checkout(&ctx, &topo, cart, info, &order).await
}

fn missing(what: &str) -> ReactorError {
    ReactorError::user_abort(format!("missing row: {what}"))
}

/// Prices every item of the order and puts it in the cart; returns the cart
/// row with its new session.
async fn add_items(
    ctx: &ReactorCtx,
    topo: &Topology,
    order: &Order,
) -> Result<CartInfo, ReactorError> {
    let mut info = ctx
        .get(&CART_INFO, &0)?
        .ok_or_else(|| missing("cart_info"))?;
    info.session += 1;
    ctx.put(&CART_INFO, &0, &info)?;
    // Every section's prices, in parallel.
    let price_calls: Vec<_> = order
        .groups
        .iter()
        .map(|g| {
            let items = g.items.clone();
            ctx.call(topo.sections[g.section as usize], move |s| {
                get_prices(s, items)
            })
        })
        .collect();
    // Meanwhile, here: the customer's group and its fixed discounts.
    let group = ctx
        .call(topo.customers[info.customer as usize], |c| async move {
            c.get(&CUSTOMER_INFO, &0)?
                .map(|i| i.group)
                .ok_or_else(|| missing("customer_info"))
        })
        .await?;
    let all_items: Vec<u32> = order.groups.iter().flat_map(|g| g.items.clone()).collect();
    let discounts = ctx
        .call(topo.groups[group as usize], move |g| {
            get_fixed_discounts(g, all_items)
        })
        .await?;
    let mut discounts = discounts.into_iter();
    for (g, call) in order.groups.iter().zip(price_calls) {
        let prices = call.await?;
        for ((&item, &quantity), (price_cents, min_price_cents)) in
            g.items.iter().zip(&g.quantities).zip(prices)
        {
            let line = CartLine {
                quantity,
                price_cents,
                min_price_cents,
                fixed_disc_bp: discounts.next().unwrap_or(0),
            };
            ctx.put(&CART_PURCHASES, &(info.session, g.section, item), &line)?;
        }
    }
    Ok(info)
}

/// At a store section: (price, minimum price) of each item.
async fn get_prices(ctx: ReactorCtx, items: Vec<u32>) -> Result<Vec<(u64, u64)>, ReactorError> {
    items
        .iter()
        .map(|item| {
            let row = ctx
                .get(&INVENTORY, item)?
                .ok_or_else(|| missing("inventory"))?;
            Ok((row.price_cents, row.min_price_cents))
        })
        .collect()
}

/// At a group manager: the group's fixed discount of each item.
async fn get_fixed_discounts(ctx: ReactorCtx, items: Vec<u32>) -> Result<Vec<u32>, ReactorError> {
    items
        .iter()
        .map(|item| Ok(ctx.get(&DISCOUNTS, item)?.unwrap_or(0)))
        .collect()
}

/// One cart line, as sent to its section at checkout.
#[derive(Debug, Clone, Copy)]
struct CheckoutLine {
    item: u32,
    line: CartLine,
}

/// What a section needs to check out its part of a session.
struct SectionCheckout {
    customer: u32,
    time: u64,
    window: u32,
    delay_iterations: u64,
    history_len: u32,
    lines: Vec<CheckoutLine>,
}

async fn checkout(
    ctx: &ReactorCtx,
    topo: &Topology,
    cart: u32,
    info: CartInfo,
    order: &Order,
) -> Result<Receipt, ReactorError> {
    let session = info.session;
    let lines = ctx.scan(
        &CART_PURCHASES,
        (session, 0, 0)..=(session, u32::MAX, u32::MAX),
        ScanDirection::Forward,
        usize::MAX,
    )?;
    // Group by section (the scan is in section order).
    let mut by_section: Vec<(u32, Vec<CheckoutLine>)> = Vec::new();
    for &((_, section, item), line) in &lines {
        match by_section.last_mut() {
            Some((s, group)) if *s == section => group.push(CheckoutLine { item, line }),
            _ => by_section.push((section, vec![CheckoutLine { item, line }])),
        }
    }
    let calls: Vec<_> = by_section
        .into_iter()
        .map(|(section, lines)| {
            let request = SectionCheckout {
                customer: info.customer,
                time: session,
                window: order.window,
                delay_iterations: order.delay_iterations,
                history_len: topo.history_len,
                lines,
            };
            ctx.call(topo.sections[section as usize], move |s| {
                variable_discount_update_inventory(s, request)
            })
        })
        .collect();
    // Meanwhile, here: the session's lines leave the cart.
    for (key, _) in &lines {
        ctx.delete(&CART_PURCHASES, key)?;
    }
    let mut totals = Totals::default();
    for call in calls {
        totals += call.await?;
    }
    // Fire-and-forget: the visit at the customer, the sale at the store.
    let visit = StoreVisit {
        store: info.store,
        time: session,
        amount_cents: totals.amount_cents,
        fixed_disc_cents: totals.fixed_disc_cents,
        var_disc_cents: totals.var_disc_cents,
    };
    drop(ctx.call(
        topo.customers[info.customer as usize],
        move |c| async move {
            c.put(&STORE_VISITS, &session, &visit)?;
            if session > KEPT_SESSIONS {
                c.delete(&STORE_VISITS, &(session - KEPT_SESSIONS))?;
            }
            Ok(())
        },
    ));
    let sale = Sale {
        customer: info.customer,
        items: totals.items,
        amount_cents: totals.amount_cents,
        fixed_disc_cents: totals.fixed_disc_cents,
        var_disc_cents: totals.var_disc_cents,
    };
    drop(ctx.call(topo.store, move |s| async move {
        s.put(&SALES, &(cart, session), &sale)?;
        if session > KEPT_SESSIONS {
            s.delete(&SALES, &(cart, session - KEPT_SESSIONS))?;
        }
        Ok(())
    }));
    Ok(Receipt { session, totals })
}

/// At a store section, per item: take the stock, compute the trend from the
/// purchase-history window (or busy work, in the Delay variant), append the
/// sale to the history, price the item.
async fn variable_discount_update_inventory(
    ctx: ReactorCtx,
    request: SectionCheckout,
) -> Result<Totals, ReactorError> {
    let mut totals = Totals::default();
    for CheckoutLine { item, line } in request.lines {
        let mut row = ctx
            .get(&INVENTORY, &item)?
            .ok_or_else(|| missing("inventory"))?;
        if row.quantity < i64::from(line.quantity) {
            return Err(ReactorError::user_abort(format!("item {item} is sold out")));
        }
        row.quantity -= i64::from(line.quantity);
        let trend = if request.delay_iterations > 0 {
            busy_trend(
                request.delay_iterations,
                u64::from(item) ^ (request.time << 32),
            )
        } else {
            // The newest `window` purchases of the item: a reverse scan
            // from its newest row.
            let window = ctx.scan(
                &PURCHASE_HISTORY,
                (item, 0)..=(item, row.history_seq),
                ScanDirection::Reverse,
                request.window as usize,
            )?;
            Trend::of(window.iter().map(|(_, p)| f64::from(p.quantity)))
        };
        row.history_seq += 1;
        let purchase = Purchase {
            time: request.time,
            quantity: line.quantity,
            customer: request.customer,
        };
        ctx.put(&PURCHASE_HISTORY, &(item, row.history_seq), &purchase)?;
        if let Some(oldest) = row.history_seq.checked_sub(u64::from(request.history_len)) {
            ctx.delete(&PURCHASE_HISTORY, &(item, oldest))?;
        }
        ctx.put(&INVENTORY, &item, &row)?;
        totals += price_item(
            line.price_cents,
            line.min_price_cents,
            line.quantity,
            line.fixed_disc_bp,
            row.var_disc_bp,
            trend,
        );
    }
    Ok(totals)
}
