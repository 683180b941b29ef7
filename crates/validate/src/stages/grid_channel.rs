//! The grid channel (no stage of its own; `correctness_s1_grid` proves it): how the head target
//! could take `--grid`, found structurally in the target and its `conftest.py` files
//! ([`crate::grid::find`]). Read after any no-device run, from the files as they are then.

use kg_inject::PySource;

use super::{Ctx, State, conftests};
use crate::error::ValidateError;
use crate::grid::{self, ChannelSearch};

/// Searches the head target for a grid channel; leaves the result in [`State::search`].
pub(crate) fn run(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    let mut sources: Vec<PySource> = Vec::new();
    if let Some(t) = &ctx.head_text
        && let Ok(s) = PySource::parse(ctx.target_abs(), t.as_str())
    {
        sources.push(s);
    }
    sources.extend(conftests(ctx.repo_root, ctx.target_file()));
    let search = find(ctx, &sources);
    st.report.test_selection.grid_channel_reason = search.reason.clone();
    st.search = search;
    Ok(())
}

/// [`grid::find`] with the runner and the `--shape-*` flags of this run.
pub(crate) fn find(ctx: &Ctx<'_>, sources: &[PySource]) -> ChannelSearch {
    let opts = ctx.opts;
    grid::find(
        sources,
        ctx.runner,
        opts.shape_env.as_deref(),
        opts.shape_arg.as_deref(),
        opts.shape_argnames.as_deref(),
    )
}
