//! Stage 9, `index_width_scan` (info only): index × stride products without int64 widening in
//! the lines the patch adds to kernel sources ([`crate::index_scan`]). Static, so it runs
//! early; the report shows it in stage order.

use indexmap::IndexMap;
use kg_contract::report::{Stage, StageStatus};

use super::{Ctx, State};
use crate::error::ValidateError;
use crate::index_scan;

/// Counts the unwidened products per kernel source.
pub(crate) fn run(st: &mut State<'_>, _ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    let mut products = IndexMap::new();
    for (path, lines) in &st.wt.files().added_lines {
        if !index_scan::is_kernel_source(path) {
            continue;
        }
        let n: u64 = lines.iter().map(|l| index_scan::products_in_line(l)).sum();
        if n > 0 {
            products.insert(path.clone(), n);
        }
    }
    let total: u64 = products.values().sum();
    let mut stage = Stage::new(
        StageStatus::Info,
        if st.wt.patch().is_some() {
            format!(
                "{total} index × stride product(s) without int64 widening in lines the change adds to kernel sources"
            )
        } else {
            "no --patch: no added lines to scan".into()
        },
    );
    stage.index_products = products;
    st.report.stages.index_width_scan = stage;
    Ok(())
}
