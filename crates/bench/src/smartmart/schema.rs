//! SmartMart's five reactor types, their eight relations, and the two
//! deployments (sync and async) of the same code, written as deployment TOML.
//!
//! | reactor type    | relation           | key                        | value            |
//! |-----------------|--------------------|----------------------------|------------------|
//! | `cart`          | `cart_info`        | `0u8` (one row)            | [`CartInfo`]     |
//! | `cart`          | `cart_purchases`   | (session, section, item)   | [`CartLine`]     |
//! | `customer`      | `customer_info`    | `0u8` (one row)            | [`CustomerInfo`] |
//! | `customer`      | `store_visits`     | session                    | [`StoreVisit`]   |
//! | `group_manager` | `discounts`        | item                       | fixed discount, basis points |
//! | `store_section` | `inventory`        | item                       | [`InventoryRow`] |
//! | `store_section` | `purchase_history` | (item, sequence number)    | [`Purchase`]     |
//! | `store`         | `sales`            | (cart, session)            | [`Sale`]         |
//!
//! The first seven follow the Manifesto case study (HPI's reconstruction, in
//! `seeds-implementations.md` §2.3). The seed counts five reactor types and
//! eight relations but the case study has four types and seven relations (HPI's
//! eighth, `passwd`, is theirs, not the case study's); the store the carts,
//! visits and sections already refer to by `store_id` is our fifth type, and
//! its `sales` ledger (one row per checkout) our eighth relation.

use std::fmt::Write as _;

use roost_reactor::{Deployment, DeploymentError, RelationDef, Schema, SchemaError};
use serde::{Deserialize, Serialize};

pub const CART: &str = "cart";
pub const CUSTOMER: &str = "customer";
pub const GROUP_MANAGER: &str = "group_manager";
pub const STORE_SECTION: &str = "store_section";
pub const STORE: &str = "store";

/// The one row of a cart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CartInfo {
    /// Index of the cart's customer.
    pub customer: u32,
    pub store: u32,
    /// Bumped by every `add_items`; the purchases of one session check out
    /// together.
    pub session: u64,
}

/// One item in a cart, priced and discounted by `add_items`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CartLine {
    pub quantity: u32,
    pub price_cents: u64,
    pub min_price_cents: u64,
    /// The customer group's fixed discount on the item.
    pub fixed_disc_bp: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomerInfo {
    pub name: String,
    /// Index of the customer's group (its group manager reactor).
    pub group: u32,
}

/// What a checkout cost, recorded at the customer (the case study's
/// `add_store_visit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreVisit {
    pub store: u32,
    pub time: u64,
    pub amount_cents: u64,
    pub fixed_disc_cents: u64,
    pub var_disc_cents: u64,
}

/// One item of a store section's inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryRow {
    pub price_cents: u64,
    pub min_price_cents: u64,
    pub quantity: i64,
    /// Upper bound of the variable discount.
    pub var_disc_bp: u32,
    /// Sequence number of the item's newest `purchase_history` row.
    pub history_seq: u64,
}

/// One sale of an item, in its section's purchase history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purchase {
    pub time: u64,
    pub quantity: u32,
    pub customer: u32,
}

/// One checkout, in the store's ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sale {
    pub customer: u32,
    pub items: u32,
    pub amount_cents: u64,
    pub fixed_disc_cents: u64,
    pub var_disc_cents: u64,
}

pub static CART_INFO: RelationDef<u8, CartInfo> = RelationDef::new(CART, "cart_info");
pub static CART_PURCHASES: RelationDef<(u64, u32, u32), CartLine> =
    RelationDef::new(CART, "cart_purchases");
pub static CUSTOMER_INFO: RelationDef<u8, CustomerInfo> =
    RelationDef::new(CUSTOMER, "customer_info");
pub static STORE_VISITS: RelationDef<u64, StoreVisit> = RelationDef::new(CUSTOMER, "store_visits");
pub static DISCOUNTS: RelationDef<u32, u32> = RelationDef::new(GROUP_MANAGER, "discounts");
pub static INVENTORY: RelationDef<u32, InventoryRow> = RelationDef::new(STORE_SECTION, "inventory");
pub static PURCHASE_HISTORY: RelationDef<(u32, u64), Purchase> =
    RelationDef::new(STORE_SECTION, "purchase_history");
pub static SALES: RelationDef<(u32, u64), Sale> = RelationDef::new(STORE, "sales");

/// The reactor types and relations, declared always in the same order (the
/// relation statics keep the index the first schema gave them).
pub fn schema() -> Result<Schema, SchemaError> {
    Schema::new()
        .reactor_type(CART, &[&CART_INFO, &CART_PURCHASES])?
        .reactor_type(CUSTOMER, &[&CUSTOMER_INFO, &STORE_VISITS])?
        .reactor_type(GROUP_MANAGER, &[&DISCOUNTS])?
        .reactor_type(STORE_SECTION, &[&INVENTORY, &PURCHASE_HISTORY])?
        .reactor_type(STORE, &[&SALES])
}

/// Reactor names, shared by the loader and the deployments.
pub fn cart_name(i: usize) -> String {
    format!("cart-{i}")
}

pub fn customer_name(i: usize) -> String {
    format!("customer-{i}")
}

pub fn group_name(i: usize) -> String {
    format!("group-{i}")
}

pub fn section_name(i: usize) -> String {
    format!("section-{i}")
}

pub const STORE_NAME: &str = "store-0";

/// The two deployments of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeploymentKind {
    /// Everything in one container: every call runs inline, sequentially.
    Sync,
    /// Carts, customers, group managers and the store in one container, each
    /// store section in a container of its own with one executor.
    Async,
}

impl DeploymentKind {
    pub const BOTH: [DeploymentKind; 2] = [DeploymentKind::Sync, DeploymentKind::Async];

    pub fn name(self) -> &'static str {
        match self {
            DeploymentKind::Sync => "sync",
            DeploymentKind::Async => "async",
        }
    }

    /// The deployment TOML: `cart_executors` executors serve the carts (one
    /// per worker when measuring scale-up; the affinity router keeps each
    /// cart on one of them), `sections` store sections.
    pub fn toml(self, cart_executors: usize, sections: usize) -> String {
        let mut toml = String::from("router = \"affinity\"\nmax_active_transactions = 64\n\n");
        match self {
            DeploymentKind::Sync => {
                let _ = write!(
                    toml,
                    "[[containers]]\nname = \"smartmart\"\nexecutors = {cart_executors}\n"
                );
            }
            DeploymentKind::Async => {
                let _ = write!(
                    toml,
                    "[[containers]]\nname = \"carts\"\nexecutors = {cart_executors}\n"
                );
                for s in 0..sections {
                    let _ = write!(
                        toml,
                        "\n[[containers]]\nname = \"{}\"\nexecutors = 1\n",
                        section_name(s)
                    );
                }
                toml.push_str("\n[placement]\ndefault = \"carts\"\n[placement.by_name]\n");
                for s in 0..sections {
                    let name = section_name(s);
                    let _ = writeln!(toml, "\"{name}\" = \"{name}\"");
                }
            }
        }
        toml
    }

    pub fn deployment(
        self,
        cart_executors: usize,
        sections: usize,
    ) -> Result<Deployment, DeploymentError> {
        Deployment::from_toml(&self.toml(cart_executors, sections))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_types_eight_relations() {
        let built = schema().expect("schema");
        for t in [CART, CUSTOMER, GROUP_MANAGER, STORE_SECTION, STORE] {
            assert!(built.has_reactor_type(t));
        }
        // Building it twice keeps the same relation indexes.
        schema().expect("schema again");
    }

    #[test]
    fn deployments_parse() {
        let sync = DeploymentKind::Sync.deployment(2, 8).expect("sync");
        assert_eq!(sync.containers.len(), 1);
        assert_eq!(sync.containers[0].executors, 2);
        let r#async = DeploymentKind::Async.deployment(1, 8).expect("async");
        assert_eq!(r#async.containers.len(), 9);
        assert_eq!(r#async.placement.by_name.len(), 8);
        assert_eq!(r#async.placement.by_name["section-3"], "section-3");
    }
}
