//! kg-proc: the process plumbing every kernelgate crate that runs a process shares.
//!
//! - [`cancel`]: [`CancelToken`], the flag that asks running work to stop.
//! - [`capture`]: [`Bounded`] output capture (head and tail kept) and [`tail`].
//! - [`table`]: `/proc` scans: parent links, process groups, environment tags.
//! - [`group`]: children in their own process group, ended as a group (SIGTERM, a grace
//!   period, SIGKILL), with what they left behind swept; [`output_with_timeout`] for short
//!   commands.
//!
//! - [`now_utc`]: the RFC 3339 timestamps every record carries.
//!
//! Linux only (it reads `/proc`), like the sandbox it serves.

pub mod cancel;
pub mod capture;
pub mod group;
pub mod table;

pub use cancel::CancelToken;
pub use capture::{Bounded, LOG_LIMIT, drain, tail};
pub use group::{
    CommandOutput, GRACE, Signal, become_child_subreaper, describe_exit, end_child_group,
    end_group, output_with_timeout, signal_group, sweep_descendants,
};
pub use table::{
    ProcEntry, descendants_in, group_members, proc_entry, proc_table, start_ticks, with_env,
};

/// The current UTC time, RFC 3339 (empty if the clock cannot be formatted).
pub fn now_utc() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}
