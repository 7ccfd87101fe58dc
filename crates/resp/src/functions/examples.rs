//! The functions every server registers unless its application passes its
//! own (library `roost`). They show the three shapes a procedure takes:
//!
//! - `transfer` (keys: from, to; argument: amount): moves money between two
//!   integer balances, refusing (and writing nothing) when `from` holds less
//!   than the amount. `FCALL transfer 2 acct:1 acct:2 25` replies the two new
//!   balances.
//! - `sum` (no-writes; keys: any): the sum of the integer values of its keys
//!   (absent: 0), one consistent snapshot. `FCALL_RO sum 3 a b c`.
//! - `reserve` (keys: bounded counters; arguments: one quantity per key, or
//!   one for all): decrements every counter or none, so an order for several
//!   items never takes stock from one while another runs out.
//!   `FCALL reserve 2 stock:apple stock:pear 3 1` replies the remaining stock.

use super::{Function, FunctionCtx, FunctionError, FunctionFuture};
use crate::protocol::Frame;

pub(super) const LIBRARY: &str = "roost";

pub(super) fn library() -> Vec<Function> {
    vec![
        Function::new("transfer", transfer)
            .description("transfer 2 from to amount: moves amount between integer balances"),
        Function::new("sum", sum)
            .no_writes()
            .description("sum N key...: the sum of the keys' integer values"),
        Function::new("reserve", reserve).description(
            "reserve N counter... quantity...: decrements every bounded counter or none",
        ),
    ]
}

fn transfer<'a>(ctx: &'a FunctionCtx<'a>) -> FunctionFuture<'a> {
    Box::pin(async move {
        if ctx.keys().len() != 2 || ctx.args().len() != 1 {
            return Err(FunctionError::reply(
                "transfer takes 2 keys (from, to) and 1 argument (amount)",
            ));
        }
        let amount = ctx.arg_i64(0)?;
        if amount <= 0 {
            return Err(FunctionError::reply("the amount must be positive"));
        }
        let from = ctx.get_i64(0).await?.unwrap_or(0);
        if from < amount {
            return Err(FunctionError::reply(format!(
                "insufficient funds: {from} < {amount}"
            )));
        }
        ctx.set_i64(0, from - amount)?;
        // Read after the write: when both keys are one key, this sees it.
        let to = ctx.get_i64(1).await?.unwrap_or(0);
        let to = to
            .checked_add(amount)
            .ok_or_else(|| FunctionError::reply("increment or decrement would overflow"))?;
        ctx.set_i64(1, to)?;
        Ok(Frame::Array(vec![
            Frame::Integer(from - amount),
            Frame::Integer(to),
        ]))
    })
}

fn sum<'a>(ctx: &'a FunctionCtx<'a>) -> FunctionFuture<'a> {
    Box::pin(async move {
        let mut total: i64 = 0;
        for key in 0..ctx.keys().len() {
            let value = ctx.get_i64(key).await?.unwrap_or(0);
            total = total
                .checked_add(value)
                .ok_or_else(|| FunctionError::reply("increment or decrement would overflow"))?;
        }
        Ok(Frame::Integer(total))
    })
}

fn reserve<'a>(ctx: &'a FunctionCtx<'a>) -> FunctionFuture<'a> {
    Box::pin(async move {
        let keys = ctx.keys().len();
        let args = ctx.args().len();
        if keys == 0 || !(args == 1 || args == keys) {
            return Err(FunctionError::reply(
                "reserve takes counters and one quantity per counter (or one for all)",
            ));
        }
        let mut left = Vec::with_capacity(keys);
        for key in 0..keys {
            let quantity = ctx.arg_i64(if args == 1 { 0 } else { key })?;
            if quantity <= 0 {
                return Err(FunctionError::reply("quantities must be positive"));
            }
            // A refusal (`BOUND ...`) drops the decrements made so far.
            left.push(Frame::Integer(ctx.counter_add(key, -quantity).await?));
        }
        Ok(Frame::Array(left))
    })
}
