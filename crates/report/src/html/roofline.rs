//! The roofline: one log-log SVG per device, its roofs from the device spec and a point per
//! passed workload with kg-solar counts.

use std::fmt::Write as _;

use super::format::{esc, num_attr, opt, si, sig};
use crate::model::{DeviceGroup, Report, Row};

/// A log10 axis mapping `[lo, hi]` (decades) onto `[a, b]` pixels.
#[derive(Debug, Clone, Copy)]
pub(super) struct LogAxis {
    /// Lowest decade.
    pub(super) lo: f64,
    /// Highest decade.
    pub(super) hi: f64,
    a: f64,
    b: f64,
}

impl LogAxis {
    /// Whole decades around the positive, finite `values`; `None` when there are none.
    pub(super) fn fit(values: impl Iterator<Item = f64>, a: f64, b: f64) -> Option<LogAxis> {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite() && *v > 0.0) {
            lo = lo.min(v.log10());
            hi = hi.max(v.log10());
        }
        if !lo.is_finite() {
            return None;
        }
        // Whole decades, with room around the extremes so no point sits on the frame.
        let (mut lo, mut hi) = ((lo - 0.3).floor(), (hi + 0.3).ceil());
        if hi - lo < 2.0 {
            lo -= 1.0;
            hi += 1.0;
        }
        Some(LogAxis { lo, hi, a, b })
    }

    /// The pixel of `v`.
    pub(super) fn px(&self, v: f64) -> f64 {
        self.a + (v.log10() - self.lo) / (self.hi - self.lo) * (self.b - self.a)
    }

    fn decades(&self) -> impl Iterator<Item = i32> {
        (self.lo as i32)..=(self.hi as i32)
    }
}

/// A decade of a rate with an SI prefix and no decimals: `100 MFLOP/s`.
pub(super) fn si_decade(k: i32, unit: &str) -> String {
    const P: [&str; 6] = ["", "k", "M", "G", "T", "P"];
    if (0..18).contains(&k) {
        let p = (k / 3) as usize;
        format!("{} {}{unit}", 10u64.pow((k % 3) as u32), P[p])
    } else {
        format!("1e{k} {unit}")
    }
}

/// A decade of arithmetic intensity: plain where short, else `1e{k}`.
fn decade_label(k: i32) -> String {
    if (-3..=4).contains(&k) {
        sig(10f64.powi(k))
    } else {
        format!("1e{k}")
    }
}

// The roofline's size and its margins (left, right, top, bottom), in pixels.
const W: f64 = 820.0;
const H: f64 = 500.0;
const ML: f64 = 100.0;
const MR: f64 = 20.0;
const MT: f64 = 20.0;
const MB: f64 = 50.0;

/// The roofline section: a figure per device, or a note when no kg-solar counts were given.
pub(super) fn roofline_section(h: &mut String, r: &Report) {
    h.push_str("<section id=\"roofline\">\n<h2>Roofline</h2>\n");
    if !r.has_sol {
        h.push_str("<p class=\"note\" id=\"roofline-missing\">No FLOPs or bytes were given: pass <code>--sol DIR</code> (from <code>kg-bench solar analyze CORPUS -o DIR</code>) for a roofline and fraction of SOL.</p>\n</section>\n");
        return;
    }
    h.push_str("<p class=\"note\">Arithmetic intensity is kg-solar's FLOPs over its fused bytes (graph inputs as touched and outputs); achieved FLOP/s and bytes/s are those counts over the measured median latency. Roofs are the device spec's peaks: bandwidth (diagonal), vector fp32 and each tensor peak the workloads' dtypes use. Each point links to its table row.</p>\n");
    for (di, d) in r.devices.iter().enumerate() {
        let pts: Vec<&Row> = r
            .rows
            .iter()
            .filter(|x| x.device == di && x.on_roofline())
            .collect();
        roofline(h, di, d, &pts);
    }
    h.push_str("</section>\n");
}

/// One device's figure: its roofs and a point per workload on the roofline.
fn roofline(h: &mut String, di: usize, d: &DeviceGroup, pts: &[&Row]) {
    let _ = writeln!(
        h,
        "<figure class=\"roofline\" data-device=\"{di}\" data-points=\"{}\">",
        pts.len()
    );
    let _ = writeln!(
        h,
        "<figcaption>{}: {} passed workload(s) with FLOPs and bytes</figcaption>",
        esc(&d.label()),
        pts.len()
    );
    if pts.is_empty() {
        h.push_str("<p class=\"note\">No passed workload of this device has kg-solar counts.</p></figure>\n");
        return;
    }
    let roofs = Roofs::of(d, pts);
    let Some(plot) = Plot::fit(pts, &roofs) else {
        h.push_str("</figure>\n");
        return;
    };
    plot.open(h, d);
    plot.grid(h);
    plot.frame(h);
    plot.roofs(h, &roofs, d);
    plot.points(h, pts);
    h.push_str("</svg>\n</figure>\n");
}

/// One device's roofs, from its spec (none without one).
struct Roofs {
    /// Bandwidth in bytes/s.
    bw: Option<f64>,
    /// (label, FLOP/s): vector fp32, then each tensor peak the points' dtypes use.
    compute: Vec<(String, f64)>,
}

impl Roofs {
    fn of(d: &DeviceGroup, pts: &[&Row]) -> Roofs {
        let mut roofs: Vec<(String, f64)> = Vec::new();
        let mut bw = None;
        if let Some(s) = &d.spec {
            bw = Some(s.spec.hbm_bandwidth_gbps.value * 1e9);
            roofs.push(("vector fp32".into(), s.spec.vector_fp32_tflops.value * 1e12));
            let mut dtypes: Vec<&String> = pts
                .iter()
                .filter_map(|p| p.sol.as_ref())
                .flat_map(|e| e.tensor_flops.keys())
                .collect();
            dtypes.sort();
            dtypes.dedup();
            for dt in dtypes {
                if let Some(Ok((t, field))) =
                    kg_contract::DType::parse(dt).map(|x| s.spec.tensor_peak(x))
                {
                    let label = format!("tensor {field}");
                    if !roofs.iter().any(|(l, _)| *l == label) {
                        roofs.push((label, t * 1e12));
                    }
                }
            }
        }
        Roofs { bw, compute: roofs }
    }
}

/// One device's plot area: intensity (FLOP/byte) across, FLOP/s up.
struct Plot {
    x: LogAxis,
    y: LogAxis,
}

impl Plot {
    /// Axes that hold every point, roof and ridge; `None` when nothing can be placed.
    fn fit(pts: &[&Row], roofs: &Roofs) -> Option<Plot> {
        let ai: Vec<f64> = pts
            .iter()
            .filter_map(|p| p.sol.as_ref().and_then(|e| e.intensity()))
            .collect();
        let fl: Vec<f64> = pts.iter().filter_map(|p| p.flops_per_s()).collect();
        let ridges: Vec<f64> = roofs.bw.map_or_else(Vec::new, |b| {
            roofs.compute.iter().map(|(_, p)| p / b).collect()
        });
        let (Some(x), Some(y)) = (
            LogAxis::fit(ai.iter().copied().chain(ridges.iter().copied()), ML, W - MR),
            LogAxis::fit(
                fl.iter()
                    .copied()
                    .chain(roofs.compute.iter().map(|(_, p)| *p)),
                H - MB,
                MT,
            ),
        ) else {
            return None;
        };
        Some(Plot { x, y })
    }

    fn open(&self, h: &mut String, d: &DeviceGroup) {
        let Plot { x, y } = self;
        let _ = writeln!(
            h,
            "<svg class=\"roofline-svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"roofline of {}\" data-x-decades=\"{} {}\" data-y-decades=\"{} {}\">",
            esc(&d.label()),
            x.lo,
            x.hi,
            y.lo,
            y.hi
        );
    }

    /// A grid line and label per decade on each axis.
    fn grid(&self, h: &mut String) {
        let Plot { x, y } = self;
        for k in x.decades() {
            let px = x.px(10f64.powi(k));
            let _ = writeln!(
                h,
                "<line class=\"grid\" x1=\"{px:.1}\" y1=\"{MT}\" x2=\"{px:.1}\" y2=\"{:.1}\"/><text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                H - MB,
                H - MB + 16.0,
                decade_label(k)
            );
        }
        for k in y.decades() {
            let py = y.px(10f64.powi(k));
            let _ = writeln!(
                h,
                "<line class=\"grid\" x1=\"{ML}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                W - MR,
                ML - 6.0,
                py + 4.0,
                si_decade(k, "FLOP/s")
            );
        }
    }

    /// The plot's frame and the x axis's title.
    fn frame(&self, h: &mut String) {
        let _ = writeln!(
            h,
            "<rect class=\"axis\" x=\"{ML}\" y=\"{MT}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte, kg-solar fused bytes)</text>",
            W - MR - ML,
            H - MB - MT,
            (ML + W - MR) / 2.0,
            H - 10.0
        );
    }

    /// The bandwidth diagonal and a line per compute roof, or a note that there are none.
    fn roofs(&self, h: &mut String, roofs: &Roofs, d: &DeviceGroup) {
        let Plot { x, y } = self;
        let xmin = 10f64.powf(x.lo);
        let xmax = 10f64.powf(x.hi);
        if let Some(b) = roofs.bw {
            let top = roofs.compute.iter().map(|(_, p)| *p).fold(0.0, f64::max);
            let ridge = top / b;
            // The diagonal starts where it enters the plot (left edge or bottom) and ends at the
            // highest roof's ridge.
            let x0 = xmin.max(10f64.powf(y.lo) / b);
            let _ = writeln!(
                h,
                "<line class=\"roof-bw\" data-roof=\"bandwidth\" data-bytes-per-s=\"{b:e}\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"><title>bandwidth {}</title></line>",
                x.px(x0),
                y.px(x0 * b),
                x.px(ridge),
                y.px(top),
                si(b, "B/s")
            );
            let _ = writeln!(
                h,
                "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                x.px(x0) + 4.0,
                y.px(x0 * b) - 6.0,
                si(b, "B/s")
            );
            for (label, p) in &roofs.compute {
                let r0 = p / b;
                let _ = writeln!(
                    h,
                    "<line class=\"roof-c\" data-roof=\"{}\" data-flops-per-s=\"{p:e}\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"><title>{} {}</title></line><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{} {}</text>",
                    esc(label),
                    x.px(r0),
                    y.px(*p),
                    x.px(xmax),
                    y.px(*p),
                    esc(label),
                    si(*p, "FLOP/s"),
                    W - MR - 4.0,
                    y.px(*p) - 5.0,
                    esc(label),
                    si(*p, "FLOP/s")
                );
            }
        } else {
            let _ = writeln!(
                h,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"note\">no roofs: {}</text>",
                ML + 8.0,
                MT + 16.0,
                esc(&d.spec_note)
            );
        }
    }

    /// A point per workload with FLOPs, bytes and a latency, linked to its table row.
    fn points(&self, h: &mut String, pts: &[&Row]) {
        let Plot { x, y } = self;
        for p in pts {
            let (Some(e), Some(f)) = (p.sol.as_ref(), p.flops_per_s()) else {
                continue;
            };
            let Some(i) = e.intensity() else { continue };
            let _ = writeln!(
                h,
                "<a href=\"#{id}\"><circle class=\"pt\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"5\" data-row=\"{id}\" data-problem=\"{}\" data-solution=\"{}\" data-workload=\"{}\" data-latency-ms=\"{}\" data-ai=\"{}\" data-flops-per-s=\"{}\" data-bytes-per-s=\"{}\"><title>{} / {} / {}: {} ms, AI {}, {}, {}</title></circle></a>",
                x.px(i),
                y.px(f),
                esc(&p.key),
                esc(&p.solution),
                esc(&p.workload),
                num_attr(p.latency_ms),
                num_attr(Some(i)),
                num_attr(Some(f)),
                num_attr(p.bytes_per_s()),
                esc(&p.key),
                esc(&p.solution),
                esc(&p.workload),
                opt(p.latency_ms),
                sig(i),
                si(f, "FLOP/s"),
                si(p.bytes_per_s().unwrap_or(0.0), "B/s"),
                id = esc(&p.id),
            );
        }
    }
}
