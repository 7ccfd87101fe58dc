//! Moving a reactor between containers: one transaction extracts every row of
//! the reactor in its container (deleting them and marking it moved away) and
//! installs them in the target container (clearing any old moved-away mark
//! there). Both halves commit together or not at all.

use crate::ctx::ReactorCtx;
use crate::txn::ReactorError;

pub(crate) async fn move_out(ctx: ReactorCtx, target: usize) -> Result<(), ReactorError> {
    let rows = ctx.extract_rows(true)?;
    ctx.set_moved_away(true)?;
    ctx.call_in_container(target, move |there| async move {
        there.set_moved_away(false)?;
        there.install_rows(&rows)
    })
    .await
}
