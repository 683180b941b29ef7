//! `/proc` scans: every process's parent, process group and state, and environment tags.

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcEntry {
    /// Process id.
    pub pid: u32,
    /// Parent's process id.
    pub ppid: u32,
    /// Process group id.
    pub pgrp: i32,
    /// State letter (`R`, `S`, `Z` for a zombie, ...).
    pub state: char,
    /// Start time in clock ticks since boot: with the pid, names the process (a pid may be
    /// reused, the pair is not).
    pub start_ticks: u64,
}

/// The entry of a `/proc/<pid>/stat` line, `pid (comm) state ppid pgrp ...` (comm may hold
/// spaces and parentheses).
fn parse_stat(pid: u32, stat: &str) -> Option<ProcEntry> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state); start time is field 22.
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcEntry {
        pid,
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        start_ticks: f.get(19)?.parse().ok()?,
    })
}

/// Process `pid` as `/proc/<pid>/stat` describes it now, if it exists.
pub fn proc_entry(pid: u32) -> Option<ProcEntry> {
    parse_stat(
        pid,
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

/// The start time of process `pid` in clock ticks since boot, if it exists.
pub fn start_ticks(pid: u32) -> Option<u64> {
    proc_entry(pid).map(|e| e.start_ticks)
}

/// Every process in `/proc` that could be read.
pub fn proc_table() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        out.extend(proc_entry(pid));
    }
    out
}

/// Every process descended from `root` (not `root` itself), by the parent links in `table`.
pub fn descendants_in(root: u32, table: &[ProcEntry]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for e in table {
            if e.ppid == p && e.pid != root && !out.contains(&e.pid) {
                out.push(e.pid);
                frontier.push(e.pid);
            }
        }
    }
    out
}

/// Processes in `table` whose environment holds the entry `kv` (`NAME=value`; readable
/// environments only).
pub fn with_env(kv: &str, table: &[ProcEntry]) -> Vec<u32> {
    table
        .iter()
        .filter(|e| {
            std::fs::read(format!("/proc/{}/environ", e.pid))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|x| x == kv.as_bytes()))
        })
        .map(|e| e.pid)
        .collect()
}

/// Live (not zombie) processes whose process group is `pgid`, sorted.
pub fn group_members(pgid: i32) -> Vec<u32> {
    // A zombie holds nothing (no device memory, no files); its parent reaps it.
    let mut out: Vec<u32> = proc_table()
        .into_iter()
        .filter(|e| e.pgrp == pgid && e.state != 'Z' && e.state != 'X')
        .map(|e| e.pid)
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(pid: u32, ppid: u32) -> ProcEntry {
        ProcEntry {
            pid,
            ppid,
            pgrp: 1,
            state: 'S',
            start_ticks: 0,
        }
    }

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let s = "42 (a (b) c) S 7 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98765 0 0";
        assert_eq!(
            parse_stat(42, s),
            Some(ProcEntry {
                pid: 42,
                ppid: 7,
                pgrp: 42,
                state: 'S',
                start_ticks: 98765,
            })
        );
        assert_eq!(parse_stat(1, "garbage"), None);
    }

    #[test]
    fn descendants_follow_parent_links_only() {
        let table = [e(10, 1), e(11, 10), e(12, 11), e(13, 1), e(14, 13)];
        let mut d = descendants_in(10, &table);
        d.sort_unstable();
        assert_eq!(d, vec![11, 12]);
        assert!(descendants_in(12, &table).is_empty());
    }

    #[test]
    fn this_process_is_in_the_table_and_its_group() {
        let me = std::process::id();
        let table = proc_table();
        let mine = table.iter().find(|e| e.pid == me).copied();
        let Some(mine) = mine else {
            panic!("this process ({me}) is not in /proc's table");
        };
        assert!(group_members(mine.pgrp).contains(&me));
        assert_eq!(start_ticks(me), Some(mine.start_ticks));
        assert_eq!(start_ticks(u32::MAX - 3), None);
    }
}
