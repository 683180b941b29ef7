//! Runtime index (CUDA ordinal / HIP index) <-> SMI index, through PCI bus id and UUID.
//!
//! The SMI libraries number devices their own way, and the runtimes number them another:
//!
//! - **CUDA.** `CUDA_DEVICE_ORDER` defaults to `FASTEST_FIRST`: the fastest device is 0 and the
//!   order of the rest is unspecified; with `PCI_BUS_ID` ordinals follow the PCI bus id. We
//!   derive the ordinal as the rank of the device's PCI bus id, and say on what basis:
//!   [`IndexBasis::PciBusIdOrder`] when `PCI_BUS_ID` is set (documented CUDA behaviour),
//!   [`IndexBasis::FastestFirstSameModel`] when the order is `FASTEST_FIRST` but every device
//!   is the same model (the heuristic cannot tell them apart; observed to be PCI order), and
//!   [`IndexBasis::Unknown`] for mixed models under `FASTEST_FIRST`, where no SMI data can
//!   predict CUDA's choice. `CUDA_VISIBLE_DEVICES` is applied on top: integer entries index the
//!   ordered list, `GPU-` entries name UUIDs (prefixes allowed) and fix the order as listed;
//!   the list stops at the first entry CUDA would reject.
//! - **HIP.** HIP enumerates GPU agents in KFD topology order, which is not AMD SMI's order
//!   (the seed's warning). We read `/sys/class/kfd/kfd/topology/nodes/*/properties`, match each
//!   node to an AMD SMI device by PCI bus id (`domain`, `location_id`), and take the rank of its
//!   node id among GPU nodes ([`IndexBasis::KfdNodeOrder`]). `ROCR_VISIBLE_DEVICES` and then
//!   `HIP_VISIBLE_DEVICES` are applied on top. Partitioned devices (several nodes with one bus
//!   id) take their first node.
//!
//! A claimed child never depends on this derivation: `kg-gpu claim` names the device by UUID
//! (`CUDA_VISIBLE_DEVICES=GPU-…`, `ROCR_VISIBLE_DEVICES=GPU-<kfd unique id>`), so the child sees
//! exactly one device at index 0. The derived index is evidence for the claiming process.

use std::path::{Path, PathBuf};

use crate::device::{DeviceInfo, IndexBasis, Vendor};
use crate::env;

/// The environment variables that change runtime numbering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeEnv {
    /// `CUDA_DEVICE_ORDER`.
    pub cuda_device_order: Option<String>,
    /// `CUDA_VISIBLE_DEVICES`.
    pub cuda_visible_devices: Option<String>,
    /// `HIP_VISIBLE_DEVICES`.
    pub hip_visible_devices: Option<String>,
    /// `ROCR_VISIBLE_DEVICES`.
    pub rocr_visible_devices: Option<String>,
    /// KFD topology nodes directory.
    pub kfd_topology: PathBuf,
}

impl RuntimeEnv {
    /// Reads the variables of this process.
    pub fn from_process() -> RuntimeEnv {
        let var = |k: &str| std::env::var(k).ok();
        RuntimeEnv {
            cuda_device_order: var(env::CUDA_DEVICE_ORDER),
            cuda_visible_devices: var(env::CUDA_VISIBLE_DEVICES),
            hip_visible_devices: var(env::HIP_VISIBLE_DEVICES),
            rocr_visible_devices: var(env::ROCR_VISIBLE_DEVICES),
            kfd_topology: var(env::KG_KFD_TOPOLOGY)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/sys/class/kfd/kfd/topology/nodes")),
        }
    }
}

/// Fills `runtime_index` and `runtime_index_basis` of one backend's devices.
pub fn assign_runtime_indices(vendor: Vendor, devs: &mut [DeviceInfo], env: &RuntimeEnv) {
    match vendor {
        Vendor::Nvidia => cuda_ordinals(
            devs,
            env.cuda_device_order.as_deref(),
            env.cuda_visible_devices.as_deref(),
        ),
        Vendor::Amd => {
            let nodes = match read_kfd_topology(&env.kfd_topology) {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!(path = %env.kfd_topology.display(), error = %e, "no KFD topology");
                    Vec::new()
                }
            };
            hip_indices(
                devs,
                &nodes,
                env.hip_visible_devices.as_deref(),
                env.rocr_visible_devices.as_deref(),
            );
        }
        Vendor::Fake => {}
    }
}

/// Derives CUDA ordinals (see the module docs).
pub fn cuda_ordinals(devs: &mut [DeviceInfo], order: Option<&str>, visible: Option<&str>) {
    let mut by_bus: Vec<usize> = (0..devs.len()).collect();
    by_bus.sort_by(|&a, &b| devs[a].pci_bus_id.cmp(&devs[b].pci_bus_id));
    let pci_order = order.map(str::trim) == Some("PCI_BUS_ID");
    let same_model = devs.windows(2).all(|w| w[0].name == w[1].name);
    let order_basis = if pci_order {
        IndexBasis::PciBusIdOrder
    } else if same_model {
        IndexBasis::FastestFirstSameModel
    } else {
        IndexBasis::Unknown
    };
    for d in devs.iter_mut() {
        d.runtime_index = None;
        d.runtime_index_basis = IndexBasis::NotVisible;
    }
    let Some(visible) = visible else {
        for (rank, &i) in by_bus.iter().enumerate() {
            let known = order_basis != IndexBasis::Unknown;
            devs[i].runtime_index = known.then_some(rank as u32);
            devs[i].runtime_index_basis = order_basis;
        }
        return;
    };
    let mut listed: Vec<(usize, IndexBasis)> = Vec::new();
    for token in visible.split(',').map(str::trim) {
        if token.is_empty() {
            break;
        }
        let hit = if let Ok(n) = token.parse::<usize>() {
            if order_basis == IndexBasis::Unknown {
                // We cannot tell which device CUDA calls `n`: everything is unknown.
                for d in devs.iter_mut() {
                    d.runtime_index = None;
                    d.runtime_index_basis = IndexBasis::Unknown;
                }
                return;
            }
            by_bus.get(n).map(|&i| (i, order_basis))
        } else if token.starts_with("GPU-") {
            let matches: Vec<usize> = (0..devs.len())
                .filter(|&i| devs[i].uuid.starts_with(token))
                .collect();
            match matches.as_slice() {
                [one] => Some((*one, IndexBasis::PciBusIdOrder)),
                _ => None,
            }
        } else {
            // MIG-…, garbage: CUDA stops enumerating here; MIG instances are not our unit.
            None
        };
        match hit {
            Some(h) if !listed.iter().any(|(i, _)| *i == h.0) => listed.push(h),
            _ => break,
        }
    }
    for (pos, (i, basis)) in listed.into_iter().enumerate() {
        devs[i].runtime_index = Some(pos as u32);
        // A UUID list fixes the order exactly; an index list inherits the order basis.
        devs[i].runtime_index_basis = basis;
    }
}

/// One GPU node of the KFD topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdNode {
    /// Node number (directory name).
    pub node: u32,
    /// PCI bus id, `dddd:bb:dd.f`.
    pub pci_bus_id: String,
    /// `unique_id`, when present (`ROCR_VISIBLE_DEVICES=GPU-<hex>`).
    pub unique_id: Option<u64>,
    /// `gfx_target_version` (e.g. 90402 for gfx942), when present.
    pub gfx_target_version: Option<u32>,
}

impl KfdNode {
    /// `gfx942` from `gfx_target_version` 90402.
    pub fn arch(&self) -> Option<String> {
        gfx_name(self.gfx_target_version?)
    }
}

/// `gfx_target_version` (major*10000 + minor*100 + stepping) to its `gfxNNN` name.
pub fn gfx_name(v: u32) -> Option<String> {
    if v == 0 {
        return None;
    }
    let (major, minor, step) = (v / 10000, (v / 100) % 100, v % 100);
    if minor > 15 || step > 15 {
        return None;
    }
    Some(format!("gfx{major}{minor:x}{step:x}"))
}

/// Reads the GPU nodes (those with `simd_count > 0`) of a KFD topology directory, sorted by
/// node number.
pub fn read_kfd_topology(root: &Path) -> std::io::Result<Vec<KfdNode>> {
    let mut nodes = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let Some(node) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path().join("properties")) else {
            continue;
        };
        let prop = |key: &str| {
            text.lines().find_map(|l| {
                let mut it = l.split_whitespace();
                (it.next() == Some(key))
                    .then(|| it.next().and_then(|v| v.parse::<u64>().ok()))
                    .flatten()
            })
        };
        if prop("simd_count").unwrap_or(0) == 0 {
            continue; // a CPU node
        }
        let Some(location) = prop("location_id") else {
            continue;
        };
        let domain = prop("domain").unwrap_or(0);
        let bus = (location >> 8) & 0xff;
        let dev = (location >> 3) & 0x1f;
        let func = location & 0x7;
        nodes.push(KfdNode {
            node,
            pci_bus_id: format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"),
            unique_id: prop("unique_id").filter(|&u| u != 0),
            gfx_target_version: prop("gfx_target_version").and_then(|v| u32::try_from(v).ok()),
        });
    }
    nodes.sort_by_key(|n| n.node);
    Ok(nodes)
}

/// Derives HIP indices from KFD node order (see the module docs); also fills `arch` and
/// `kfd_unique_id` where the topology has them and the backend did not.
pub fn hip_indices(
    devs: &mut [DeviceInfo],
    nodes: &[KfdNode],
    hip_visible: Option<&str>,
    rocr_visible: Option<&str>,
) {
    for d in devs.iter_mut() {
        d.runtime_index = None;
        d.runtime_index_basis = IndexBasis::Unknown;
    }
    if nodes.is_empty() {
        return;
    }
    // First node per bus id, in node order: the ROCr agent list.
    let mut agents: Vec<&KfdNode> = Vec::new();
    for n in nodes {
        if !agents.iter().any(|a| a.pci_bus_id == n.pci_bus_id) {
            agents.push(n);
        }
    }
    for d in devs.iter_mut() {
        if let Some(n) = agents.iter().find(|a| a.pci_bus_id == d.pci_bus_id) {
            if d.arch.is_none() {
                d.arch = n.arch();
            }
            if d.kfd_unique_id.is_none() {
                d.kfd_unique_id = n.unique_id;
            }
        }
    }
    fn filter<'n>(list: Vec<&'n KfdNode>, spec: Option<&str>) -> Option<Vec<&'n KfdNode>> {
        let Some(spec) = spec else {
            return Some(list);
        };
        let mut out = Vec::new();
        for token in spec.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let hit = if let Ok(i) = token.parse::<usize>() {
                list.get(i).copied()
            } else if let Some(hex) = token.strip_prefix("GPU-") {
                let id = u64::from_str_radix(hex, 16).ok()?;
                list.iter().find(|n| n.unique_id == Some(id)).copied()
            } else {
                return None; // cannot interpret
            };
            out.push(hit?);
        }
        Some(out)
    }
    let Some(after_rocr) = filter(agents, rocr_visible) else {
        return;
    };
    let Some(visible) = filter(after_rocr, hip_visible) else {
        return;
    };
    for d in devs.iter_mut() {
        match visible.iter().position(|n| n.pci_bus_id == d.pci_bus_id) {
            Some(pos) => {
                d.runtime_index = Some(pos as u32);
                d.runtime_index_basis = IndexBasis::KfdNodeOrder;
            }
            None if hip_visible.is_some() || rocr_visible.is_some() => {
                d.runtime_index_basis = IndexBasis::NotVisible;
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Clocks, Sample};

    fn dev(name: &str, bus: &str, uuid: &str) -> DeviceInfo {
        DeviceInfo {
            vendor: Vendor::Nvidia,
            backend: "nvml".into(),
            smi_index: 0,
            runtime_index: None,
            runtime_index_basis: IndexBasis::Unknown,
            uuid: uuid.into(),
            pci_bus_id: bus.into(),
            name: name.into(),
            arch: None,
            memory_total_bytes: None,
            sample: Sample::default(),
            clocks: Clocks::default(),
            temperature_c: None,
            power_w: None,
            processes: None,
            kfd_unique_id: None,
        }
    }

    fn idx(devs: &[DeviceInfo]) -> Vec<(Option<u32>, &'static str)> {
        devs.iter()
            .map(|d| (d.runtime_index, d.runtime_index_basis.as_str()))
            .collect()
    }

    #[test]
    fn cuda_pci_order_ranks_by_bus_id_not_smi_order() {
        // SMI order deliberately differs from bus order.
        let mut d = vec![
            dev("H200", "0000:c1:00.0", "GPU-c"),
            dev("H200", "0000:19:00.0", "GPU-a"),
            dev("H200", "0000:3b:00.0", "GPU-b"),
        ];
        cuda_ordinals(&mut d, Some("PCI_BUS_ID"), None);
        assert_eq!(
            idx(&d),
            vec![
                (Some(2), "pci-bus-id-order"),
                (Some(0), "pci-bus-id-order"),
                (Some(1), "pci-bus-id-order")
            ]
        );
    }

    #[test]
    fn cuda_fastest_first_mixed_models_is_unknown() {
        let mut d = vec![
            dev("H200", "0000:19:00.0", "GPU-a"),
            dev("A100", "0000:3b:00.0", "GPU-b"),
        ];
        cuda_ordinals(&mut d, None, None);
        assert_eq!(idx(&d), vec![(None, "unknown"), (None, "unknown")]);
        // Same with an index visibility list: we cannot say which device `1` is.
        cuda_ordinals(&mut d, Some("FASTEST_FIRST"), Some("1"));
        assert_eq!(idx(&d), vec![(None, "unknown"), (None, "unknown")]);
        // A UUID list fixes the order whatever the heuristic.
        cuda_ordinals(&mut d, None, Some("GPU-b,GPU-a"));
        assert_eq!(
            idx(&d),
            vec![(Some(1), "pci-bus-id-order"), (Some(0), "pci-bus-id-order")]
        );
    }

    #[test]
    fn cuda_visible_devices_reorders_hides_and_stops_at_invalid() {
        let mut d = vec![
            dev("H200", "0000:19:00.0", "GPU-a"),
            dev("H200", "0000:3b:00.0", "GPU-b"),
            dev("H200", "0000:c1:00.0", "GPU-c"),
        ];
        cuda_ordinals(&mut d, None, Some("2,0"));
        assert_eq!(
            idx(&d),
            vec![
                (Some(1), "fastest-first-same-model"),
                (None, "not-visible"),
                (Some(0), "fastest-first-same-model")
            ]
        );
        // An invalid entry ends the list, as in CUDA.
        cuda_ordinals(&mut d, Some("PCI_BUS_ID"), Some("1,7,0"));
        assert_eq!(
            idx(&d),
            vec![
                (None, "not-visible"),
                (Some(0), "pci-bus-id-order"),
                (None, "not-visible")
            ]
        );
    }

    fn write_node(root: &Path, n: u32, props: &str) {
        let dir = root.join(n.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("properties"), props).unwrap();
    }

    #[test]
    fn hip_index_follows_kfd_node_order_and_visibility() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write_node(root, 0, "cpu_cores_count 64\nsimd_count 0\nlocation_id 0\n");
        // node 1 = bus 0xc1, node 2 = bus 0x23: KFD order differs from bus order.
        write_node(
            root,
            1,
            "simd_count 1216\nlocation_id 49408\ndomain 0\nunique_id 1311768467463790320\ngfx_target_version 90402\n",
        );
        write_node(
            root,
            2,
            "simd_count 1216\nlocation_id 8960\ndomain 0\nunique_id 42\ngfx_target_version 90010\n",
        );
        let nodes = read_kfd_topology(root).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].pci_bus_id, "0000:c1:00.0");
        assert_eq!(nodes[1].pci_bus_id, "0000:23:00.0");
        assert_eq!(nodes[0].arch().as_deref(), Some("gfx942"));
        assert_eq!(nodes[1].arch().as_deref(), Some("gfx90a"));

        // AMD SMI order (by bus) is the opposite of HIP's.
        let mut d = vec![
            dev("MI300X", "0000:23:00.0", "u23"),
            dev("MI300X", "0000:c1:00.0", "uc1"),
        ];
        hip_indices(&mut d, &nodes, None, None);
        assert_eq!(
            idx(&d),
            vec![(Some(1), "kfd-node-order"), (Some(0), "kfd-node-order")]
        );
        assert_eq!(d[0].arch.as_deref(), Some("gfx90a"));
        assert_eq!(d[1].kfd_unique_id, Some(1311768467463790320));

        hip_indices(&mut d, &nodes, Some("1"), None);
        assert_eq!(
            idx(&d),
            vec![(Some(0), "kfd-node-order"), (None, "not-visible")]
        );
        hip_indices(&mut d, &nodes, None, Some("GPU-2a"));
        assert_eq!(
            idx(&d),
            vec![(Some(0), "kfd-node-order"), (None, "not-visible")]
        );
        // No topology: unknown, never a guess.
        hip_indices(&mut d, &[], None, None);
        assert_eq!(idx(&d), vec![(None, "unknown"), (None, "unknown")]);
    }
}
