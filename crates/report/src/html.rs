//! The self-contained HTML page: inline CSS, SVG drawn here, one small inline script.
//!
//! Charts are SVG written by hand (no plotting crate): log-scaled axes, lines, circles and
//! rectangles are all a roofline and a histogram need, the markup is deterministic (the
//! browser test reads it back), and the page shows every chart with scripting off. The
//! script only sorts and filters the table, and reports its own errors into the DOM.

use std::fmt::Write as _;

use kg_contract::{Spread, Status};

use crate::model::{DeviceGroup, Report, Row, timing_str};

/// The page's Content-Security-Policy: nothing may be fetched; inline style, script and
/// `data:` images only.
pub const CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";

/// Escapes text for HTML element content and double-quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number with about four significant digits, plain where that reads well.
pub fn sig(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-4..1e6).contains(&a) {
        format!("{x:.3e}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.3}")
    } else {
        let digits = (3.0 - a.log10().floor()) as usize;
        format!("{x:.digits$}")
    }
}

/// A rate with an SI prefix: `12.3 GFLOP/s`.
pub fn si(x: f64, unit: &str) -> String {
    const P: [(f64, &str); 6] = [
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1.0, ""),
    ];
    for (f, p) in P {
        if x.abs() >= f {
            return format!("{} {p}{unit}", sig(x / f));
        }
    }
    format!("{} {unit}", sig(x))
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), sig)
}

/// Attribute value for a number: full precision (the test compares it with the traces).
fn num_attr(x: Option<f64>) -> String {
    x.map_or_else(String::new, |v| format!("{v:e}"))
}

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1em;color:#1b1f24}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #d0d4da;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f1f3f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
table.facts th{width:14em}code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.92em}
#results th{cursor:pointer;user-select:none}#results th[data-dir="asc"]::after{content:" ▲"}#results th[data-dir="desc"]::after{content:" ▼"}
tr.st-fail td.status{color:#b00020;font-weight:600}tr.st-pass td.status{color:#17692e}
tr:target{outline:3px solid #f2a900;background:#fff7db}
.controls{display:flex;gap:1em;align-items:center;margin:.5em 0}.controls input{width:22em}
svg{background:#fff;border:1px solid #d0d4da}svg text{font:12px system-ui,sans-serif;fill:#333}
.grid{stroke:#e5e8ec;stroke-width:1}.axis{stroke:#333;stroke-width:1}
.roof-bw{stroke:#1f5fbf;stroke-width:2;fill:none}.roof-c{stroke:#b3471d;stroke-width:2;fill:none}
circle.pt{fill:#2c9a4b;fill-opacity:.8;stroke:#0d4a22;stroke-width:1}circle.pt:hover{fill:#f2a900}
rect.bar{fill:#4f7cc4}rect.gbar{fill:#2c9a4b}rect.gbar.slow{fill:#c4584f}.one{stroke:#555;stroke-dasharray:4 3}
.note{color:#555}.bad{color:#b00020;font-weight:600}.ok{color:#17692e}
#kg-js-status{font-size:.8em;color:#777}#kg-js-errors:empty{display:none}#kg-js-errors{color:#b00020}
"#;

/// Registered first, before anything can fail: every error, rejected promise, `console.error`
/// and CSP violation (an attempted fetch) is written into `#kg-js-errors`, which the browser
/// test reads from the DOM (more robust than scraping browser logs, and visible to a reader).
const GUARD_JS: &str = r#"
(function(){
  var pending=[];
  function note(m){
    var ul=document.getElementById('kg-js-errors');
    if(!ul){pending.push(m);return;}
    var li=document.createElement('li');li.textContent=String(m);ul.appendChild(li);
  }
  window.kgNote=note;
  window.addEventListener('error',function(e){note('error: '+(e.message||(e.target&&e.target.tagName)||e.type));},true);
  window.addEventListener('unhandledrejection',function(e){note('unhandled rejection: '+e.reason);});
  document.addEventListener('securitypolicyviolation',function(e){note('blocked by CSP: '+e.violatedDirective+' '+e.blockedURI);});
  var ce=console.error;
  console.error=function(){note('console.error: '+Array.prototype.join.call(arguments,' '));return ce.apply(console,arguments);};
  document.addEventListener('DOMContentLoaded',function(){var p=pending;pending=[];p.forEach(note);});
})();
"#;

/// Sorting (click a header) and filtering (text and status) of `#results`.
const TABLE_JS: &str = r#"
(function(){
  var st=document.getElementById('kg-js-status');
  try{
    var table=document.getElementById('results');
    var body=table.tBodies[0];
    var rows=Array.prototype.slice.call(body.rows);
    var heads=table.tHead.rows[0].cells;
    var filter=document.getElementById('kg-filter');
    var status=document.getElementById('kg-status');
    var shown=document.getElementById('kg-shown');
    function key(r,i,num){
      var c=r.cells[i];var v=c.getAttribute('data-v');
      if(num){var x=parseFloat(v===null?c.textContent:v);return isNaN(x)?null:x;}
      return (v===null?c.textContent:v).toLowerCase();
    }
    Array.prototype.forEach.call(heads,function(th,i){
      th.addEventListener('click',function(){
        var num=th.getAttribute('data-type')==='num';
        var dir=th.getAttribute('data-dir')==='asc'?'desc':'asc';
        Array.prototype.forEach.call(heads,function(h){h.removeAttribute('data-dir');});
        th.setAttribute('data-dir',dir);
        var s=dir==='asc'?1:-1;
        rows.sort(function(a,b){
          var x=key(a,i,num),y=key(b,i,num);
          if(x===y)return 0;if(x===null)return 1;if(y===null)return -1;
          return (x<y?-1:1)*s;
        });
        rows.forEach(function(r){body.appendChild(r);});
      });
    });
    function apply(){
      var q=filter.value.toLowerCase();var want=status.value;var n=0;
      rows.forEach(function(r){
        var s=r.getAttribute('data-status');
        var ok=(want===''||(want==='FAILED'?s!=='PASSED':s===want))&&(q===''||r.textContent.toLowerCase().indexOf(q)>=0);
        r.hidden=!ok;if(ok)n++;
      });
      shown.textContent=n+' of '+rows.length+' rows shown';
    }
    filter.addEventListener('input',apply);status.addEventListener('change',apply);
    apply();
    st.setAttribute('data-state','ok');st.textContent='script ok';
  }catch(e){
    window.kgNote('report script: '+e);
    st.setAttribute('data-state','failed');st.textContent='script failed';
  }
})();
"#;

/// Renders the whole page.
pub fn render(r: &Report) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>kernelgate report</title>\n<style>{STYLE}</style>\n<script>{GUARD_JS}</script>\n</head>\n<body>\n"
    );
    h.push_str("<div id=\"kg-js-status\" data-state=\"not-run\">script not run (the table is not sortable)</div>\n<ul id=\"kg-js-errors\"></ul>\n");
    header(&mut h, r);
    roofline_section(&mut h, r);
    table_section(&mut h, r);
    speedup_section(&mut h, r);
    let _ = write!(h, "<script>{TABLE_JS}</script>\n</body></html>\n");
    h
}

fn fact(h: &mut String, name: &str, value: &str) {
    let _ = writeln!(h, "<tr><th>{}</th><td>{value}</td></tr>", esc(name));
}

fn joined(set: &std::collections::BTreeSet<String>, none: &str) -> String {
    if set.is_empty() {
        format!("<span class=\"note\">{}</span>", esc(none))
    } else {
        set.iter().map(|s| esc(s)).collect::<Vec<_>>().join("; ")
    }
}

fn header(h: &mut String, r: &Report) {
    h.push_str("<header id=\"run-header\">\n<h1>kernelgate report</h1>\n");
    let _ = writeln!(
        h,
        "<p class=\"note\">kg-report {}; from {}</p>",
        env!("CARGO_PKG_VERSION"),
        r.inputs
            .iter()
            .map(|i| format!("<code>{}</code>", esc(i)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    h.push_str("<table class=\"facts\" id=\"run-facts\">\n");
    for (dir, s) in &r.summaries {
        fact(
            h,
            "corpus",
            &format!(
                "<code>{}</code> (run <code>{}</code>, device chosen: {}, summary v{})",
                esc(&s.corpus),
                esc(&dir.display().to_string()),
                esc(&s.device),
                s.schema_version
            ),
        );
    }
    let counts = r
        .status_counts()
        .iter()
        .map(|(s, n)| format!("{n} {}", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    fact(
        h,
        "traces",
        &format!(
            "<span id=\"trace-count\" data-n=\"{}\">{}</span>: {counts}",
            r.rows.len(),
            r.rows.len()
        ),
    );
    fact(
        h,
        "geomean speedup",
        &r.overall_geomean().map_or_else(
            || "– (nothing passed)".into(),
            |g| format!("{}x over passed workloads", sig(g)),
        ),
    );
    h.push_str("</table>\n");
    for (i, d) in r.devices.iter().enumerate() {
        device_facts(h, i, d);
    }
    h.push_str("<h2>Corpus and solution hashes</h2>\n");
    if r.hashes.is_empty() {
        h.push_str(
            "<p class=\"note\">No trace carries a chain manifest, so no hashes are bound.</p>\n",
        );
    } else {
        h.push_str("<p class=\"note\">From each trace's chain manifest (<code>kernelgate_chain.manifest</code>): the problem directory's tree hash and the solution's SHA-256 when it ran. <code>kg-bench verify</code> checks them.</p>\n<table id=\"hashes\"><thead><tr><th>problem</th><th>solution</th><th>problem tree SHA-256</th><th>solution SHA-256</th></tr></thead><tbody>\n");
        for x in &r.hashes {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td></tr>",
                esc(&x.key),
                esc(&x.solution),
                esc(&x.problem_tree_sha256),
                esc(&x.solution_sha256)
            );
        }
        h.push_str("</tbody></table>\n");
    }
    if r.unchained > 0 {
        let _ = writeln!(
            h,
            "<p class=\"bad\">{} trace(s) carry no chain record: nothing binds them to a problem or solution.</p>",
            r.unchained
        );
    }
    if !r.warnings.is_empty() {
        h.push_str("<details><summary>warnings while loading</summary><ul>");
        for w in &r.warnings {
            let _ = write!(h, "<li>{}</li>", esc(w));
        }
        h.push_str("</ul></details>\n");
    }
    h.push_str("</header>\n");
}

fn device_facts(h: &mut String, i: usize, d: &DeviceGroup) {
    let _ = writeln!(
        h,
        "<h2 id=\"device-{i}\">Device {}</h2>\n<table class=\"facts device\" data-device=\"{i}\">",
        esc(&d.label())
    );
    let mut ident = format!("{} <code>{}</code>", esc(&d.name), esc(&d.kind));
    if let Some(u) = &d.uuid {
        let _ = write!(ident, ", UUID <code>{}</code>", esc(u));
    }
    if let Some(a) = &d.arch {
        let _ = write!(ident, ", {}", esc(a));
    }
    fact(h, "device", &ident);
    fact(
        h,
        "hardware",
        &joined(&d.hardware.iter().cloned().collect(), "not recorded"),
    );
    fact(h, "host", &joined(&d.hosts, "not recorded"));
    let driver = d.libs.get("driver").map_or_else(
        || "<span class=\"note\">not recorded in the traces</span>".to_string(),
        |v| joined(v, ""),
    );
    fact(h, "driver", &driver);
    let libs = d
        .libs
        .iter()
        .filter(|(k, _)| k.as_str() != "driver")
        .map(|(k, v)| {
            format!(
                "{} {}",
                esc(k),
                v.iter().map(|s| esc(s)).collect::<Vec<_>>().join(" / ")
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    fact(h, "libraries", &libs);
    let locked = if d.clocks_locked {
        "<span class=\"ok\" data-locked=\"true\">locked</span>"
    } else {
        "<span class=\"bad\" data-locked=\"false\">not locked</span>"
    };
    fact(
        h,
        "clocks",
        &format!("{locked}: {}", joined(&d.clocks, "not recorded")),
    );
    let timing: std::collections::BTreeSet<String> =
        d.timing.iter().map(|s| s.to_string()).collect();
    let timing_html = if timing.len() > 1 {
        format!(
            "{} <span class=\"bad\">(mixed: latencies are not comparable across methods)</span>",
            joined(&timing, "")
        )
    } else {
        joined(&timing, "no passed trace")
    };
    fact(h, "timing method", &timing_html);
    fact(
        h,
        "kernelgate version",
        &joined(&d.versions, "not recorded"),
    );
    let mut sandbox = format!(
        "{} trace(s) sandboxed, {} with the sandbox off",
        d.sandboxed.0, d.sandboxed.1
    );
    if !d.layers.is_empty() {
        sandbox.push_str("<ul class=\"layers\">");
        for (layer, c) in &d.layers {
            let cls = if c.held == c.seen { "ok" } else { "bad" };
            let _ = write!(
                sandbox,
                "<li class=\"{cls}\" data-layer=\"{}\">{}: held in {} of {}</li>",
                layer.as_str(),
                layer.as_str(),
                c.held,
                c.seen
            );
        }
        sandbox.push_str("</ul>");
    }
    fact(h, "sandbox layers", &sandbox);
    let spec = match &d.spec {
        Some(s) => format!(
            "{}: {}; vector fp32 {} TFLOP/s, bandwidth {} GB/s",
            esc(&s.spec.display_name),
            esc(&d.spec_note),
            sig(s.spec.vector_fp32_tflops.value),
            sig(s.spec.hbm_bandwidth_gbps.value)
        ),
        None => format!("<span class=\"note\">{}</span>", esc(&d.spec_note)),
    };
    fact(h, "hardware spec", &spec);
    fact(h, "traces", &d.traces.to_string());
    h.push_str("</table>\n");
}

/// A log10 axis mapping `[lo, hi]` (decades) onto `[a, b]` pixels.
#[derive(Debug, Clone, Copy)]
struct LogAxis {
    lo: f64,
    hi: f64,
    a: f64,
    b: f64,
}

impl LogAxis {
    fn fit(values: impl Iterator<Item = f64>, a: f64, b: f64) -> Option<LogAxis> {
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

    fn px(&self, v: f64) -> f64 {
        self.a + (v.log10() - self.lo) / (self.hi - self.lo) * (self.b - self.a)
    }

    fn decades(&self) -> impl Iterator<Item = i32> {
        (self.lo as i32)..=(self.hi as i32)
    }
}

/// A decade of a rate with an SI prefix and no decimals: `100 MFLOP/s`.
fn si_decade(k: i32, unit: &str) -> String {
    const P: [&str; 6] = ["", "k", "M", "G", "T", "P"];
    if (0..18).contains(&k) {
        let p = (k / 3) as usize;
        format!("{} {}{unit}", 10u64.pow((k % 3) as u32), P[p])
    } else {
        format!("1e{k} {unit}")
    }
}

fn decade_label(k: i32) -> String {
    if (-3..=4).contains(&k) {
        sig(10f64.powi(k))
    } else {
        format!("1e{k}")
    }
}

const W: f64 = 820.0;
const H: f64 = 500.0;
const ML: f64 = 100.0;
const MR: f64 = 20.0;
const MT: f64 = 20.0;
const MB: f64 = 50.0;

fn roofline_section(h: &mut String, r: &Report) {
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
    // Roofs: (label, FLOP/s); bandwidth in bytes/s.
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
    let ai: Vec<f64> = pts
        .iter()
        .filter_map(|p| p.sol.as_ref().and_then(|e| e.intensity()))
        .collect();
    let fl: Vec<f64> = pts.iter().filter_map(|p| p.flops_per_s()).collect();
    let ridges: Vec<f64> = bw.map_or_else(Vec::new, |b| roofs.iter().map(|(_, p)| p / b).collect());
    let (Some(x), Some(y)) = (
        LogAxis::fit(ai.iter().copied().chain(ridges.iter().copied()), ML, W - MR),
        LogAxis::fit(
            fl.iter().copied().chain(roofs.iter().map(|(_, p)| *p)),
            H - MB,
            MT,
        ),
    ) else {
        h.push_str("</figure>\n");
        return;
    };
    let _ = writeln!(
        h,
        "<svg class=\"roofline-svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"roofline of {}\" data-x-decades=\"{} {}\" data-y-decades=\"{} {}\">",
        esc(&d.label()),
        x.lo,
        x.hi,
        y.lo,
        y.hi
    );
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
    let _ = writeln!(
        h,
        "<rect class=\"axis\" x=\"{ML}\" y=\"{MT}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte, kg-solar fused bytes)</text>",
        W - MR - ML,
        H - MB - MT,
        (ML + W - MR) / 2.0,
        H - 10.0
    );
    let xmin = 10f64.powf(x.lo);
    let xmax = 10f64.powf(x.hi);
    if let Some(b) = bw {
        let top = roofs.iter().map(|(_, p)| *p).fold(0.0, f64::max);
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
        for (label, p) in &roofs {
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
    h.push_str("</svg>\n</figure>\n");
}

fn spread_text(s: &Option<Spread>) -> String {
    s.as_ref().map_or_else(String::new, |s| {
        format!(
            " <span class=\"note\">[{}–{}]</span>",
            sig(s.p25_ms),
            sig(s.p75_ms)
        )
    })
}

fn num_td(v: Option<f64>, text: String) -> String {
    format!("<td class=\"n\" data-v=\"{}\">{text}</td>", num_attr(v))
}

fn table_section(h: &mut String, r: &Report) {
    h.push_str("<section id=\"table\">\n<h2>Workloads</h2>\n<div class=\"controls\"><label>filter <input id=\"kg-filter\" type=\"search\" placeholder=\"problem, solution, workload, reason…\"></label><label>status <select id=\"kg-status\"><option value=\"\">all</option><option value=\"FAILED\">not passed</option>");
    for s in Status::ALL {
        let _ = write!(h, "<option value=\"{0}\">{0}</option>", s.as_str());
    }
    h.push_str("</select></label><span id=\"kg-shown\" class=\"note\"></span></div>\n");
    h.push_str("<p class=\"note\">Latencies are medians in ms, [p25–p75] of the timed calls after them; speedup is reference / candidate; fraction of SOL is T_SOL on the device's spec / latency (1 is the speed of light). Click a header to sort.</p>\n");
    h.push_str("<table id=\"results\"><thead><tr><th>problem</th><th>solution</th><th>workload</th><th>status</th><th data-type=\"num\">latency ms</th><th data-type=\"num\">ref ms</th><th data-type=\"num\">speedup</th><th data-type=\"num\">fraction of SOL</th><th>timing</th><th>device</th><th data-type=\"num\">wall s</th><th>reason codes</th><th>reason</th></tr></thead><tbody>\n");
    for row in &r.rows {
        let pass = row.status == Status::Passed;
        let device = r
            .devices
            .get(row.device)
            .map(DeviceGroup::label)
            .unwrap_or_default();
        let _ = writeln!(
            h,
            "<tr id=\"{}\" class=\"{}\" data-status=\"{}\" data-problem=\"{}\" data-solution=\"{}\" data-workload=\"{}\" title=\"{}\"><td>{}</td><td>{}</td><td class=\"mono\" title=\"{}\">{}</td><td class=\"status\">{}</td>{}{}{}{}<td>{}</td><td>{}</td>{}<td class=\"mono reasons\">{}</td><td>{}</td></tr>",
            esc(&row.id),
            if pass { "st-pass" } else { "st-fail" },
            row.status.as_str(),
            esc(&row.key),
            esc(&row.solution),
            esc(&row.workload),
            esc(&row.source),
            esc(&row.key),
            esc(&row.solution),
            esc(&row.axes),
            esc(&row.workload),
            row.status.as_str(),
            num_td(
                row.latency_ms,
                format!("{}{}", opt(row.latency_ms), spread_text(&row.spread))
            ),
            num_td(
                row.ref_latency_ms,
                format!(
                    "{}{}",
                    opt(row.ref_latency_ms),
                    spread_text(&row.ref_spread)
                )
            ),
            num_td(
                row.speedup,
                row.speedup
                    .map_or_else(|| "–".into(), |s| format!("{}x", sig(s)))
            ),
            num_td(row.frac_sol, opt(row.frac_sol)),
            row.timing.map_or("–", timing_str),
            esc(&device),
            num_td(row.wall_s, opt(row.wall_s)),
            esc(&row.reasons.join(" ")),
            esc(&row.reason),
        );
    }
    h.push_str("</tbody></table>\n</section>\n");
}

fn speedup_section(h: &mut String, r: &Report) {
    h.push_str("<section id=\"speedups\">\n<h2>Speedups</h2>\n");
    let s: Vec<f64> = r
        .rows
        .iter()
        .filter(|x| x.status == Status::Passed)
        .filter_map(|x| x.speedup)
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    histogram(h, &s);
    geomeans(h, r);
    h.push_str("</section>\n");
}

/// Histogram of log2(speedup) in quarter-octave bins.
fn histogram(h: &mut String, s: &[f64]) {
    let _ = writeln!(
        h,
        "<figure id=\"speedup-hist\" data-n=\"{}\"><figcaption>Distribution of speedup over {} passed workload(s), quarter-octave bins (log scale); the dashed line is 1x.</figcaption>",
        s.len(),
        s.len()
    );
    if s.is_empty() {
        h.push_str("<p class=\"note\">No passed workload.</p></figure>\n");
        return;
    }
    let bin = |v: f64| (v.log2() * 4.0).floor() as i64;
    let lo = s.iter().map(|v| bin(*v)).min().unwrap_or(0).min(-1);
    let hi = s.iter().map(|v| bin(*v)).max().unwrap_or(0).max(0);
    let n = (hi - lo + 1) as usize;
    let mut counts = vec![0usize; n];
    for v in s {
        counts[(bin(*v) - lo) as usize] += 1;
    }
    let (w, ht, ml, mb, mt) = (820.0, 260.0, 50.0, 40.0, 15.0);
    let bw = (w - ml - 20.0) / n as f64;
    let top = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let _ = writeln!(
        h,
        "<svg width=\"{w}\" height=\"{ht}\" viewBox=\"0 0 {w} {ht}\" role=\"img\" aria-label=\"speedup histogram\">"
    );
    let _ = writeln!(
        h,
        "<line class=\"axis\" x1=\"{ml}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/>",
        ht - mb,
        w - 20.0,
        ht - mb
    );
    for (i, c) in counts.iter().enumerate() {
        let k = lo + i as i64;
        let (a, b) = (2f64.powf(k as f64 / 4.0), 2f64.powf((k + 1) as f64 / 4.0));
        let bh = *c as f64 / top * (ht - mb - mt);
        let x0 = ml + i as f64 * bw;
        let _ = writeln!(
            h,
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" data-lo=\"{a:e}\" data-hi=\"{b:e}\" data-count=\"{c}\"><title>{}x–{}x: {c}</title></rect>",
            x0 + 1.0,
            ht - mb - bh,
            (bw - 2.0).max(1.0),
            sig(a),
            sig(b)
        );
        if *c > 0 {
            let _ = writeln!(
                h,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{c}</text>",
                x0 + bw / 2.0,
                ht - mb - bh - 3.0
            );
        }
        if k % 4 == 0 {
            let _ = writeln!(
                h,
                "<text x=\"{x0:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}x</text>",
                ht - mb + 16.0,
                sig(a)
            );
        }
        if k == 0 {
            let _ = writeln!(
                h,
                "<line class=\"one\" x1=\"{x0:.1}\" y1=\"{mt}\" x2=\"{x0:.1}\" y2=\"{:.1}\"/>",
                ht - mb
            );
        }
    }
    let _ = writeln!(
        h,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">speedup (reference / candidate)</text>",
        (ml + w) / 2.0,
        ht - 6.0
    );
    h.push_str("</svg></figure>\n");
}

fn geomeans(h: &mut String, r: &Report) {
    h.push_str("<h3>Geomean speedup per problem</h3>\n<table id=\"geomeans\"><thead><tr><th>problem</th><th>solution</th><th>passed</th><th>workloads</th><th>geomean speedup</th><th>chart (log scale, 1x in the middle)</th></tr></thead><tbody>\n");
    let span = r
        .geomeans
        .iter()
        .filter_map(|g| g.geomean)
        .map(|g| g.log2().abs())
        .fold(1.0, f64::max);
    let (w, ht) = (240.0, 14.0);
    for g in &r.geomeans {
        let bar = g.geomean.map_or_else(String::new, |v| {
            let mid = w / 2.0;
            let len = v.log2() / span * (w / 2.0 - 2.0);
            let (x, wd) = if len >= 0.0 { (mid, len) } else { (mid + len, -len) };
            format!(
                "<svg width=\"{w}\" height=\"{ht}\" viewBox=\"0 0 {w} {ht}\"><rect class=\"gbar{}\" x=\"{x:.1}\" y=\"2\" width=\"{:.1}\" height=\"{:.1}\"/><line class=\"one\" x1=\"{mid}\" y1=\"0\" x2=\"{mid}\" y2=\"{ht}\"/></svg>",
                if v < 1.0 { " slow" } else { "" },
                wd.max(1.0),
                ht - 4.0
            )
        });
        let _ = writeln!(
            h,
            "<tr data-problem=\"{}\" data-solution=\"{}\" data-geomean=\"{}\"><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{bar}</td></tr>",
            esc(&g.key),
            esc(&g.solution),
            num_attr(g.geomean),
            esc(&g.key),
            esc(&g.solution),
            g.passed,
            g.total,
            g.geomean
                .map_or_else(|| "–".into(), |v| format!("{}x", sig(v)))
        );
    }
    h.push_str("</tbody></table>\n");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn escaping_covers_attribute_breakers() {
        assert_eq!(esc("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
    }

    #[test]
    fn numbers_keep_four_significant_digits() {
        assert_eq!(sig(0.012341), "0.01234");
        assert_eq!(sig(1.23456), "1.235");
        assert_eq!(sig(123.456), "123.5");
        assert_eq!(sig(2.5e7), "2.500e7");
        assert_eq!(si(2.5e12, "FLOP/s"), "2.500 TFLOP/s");
        assert_eq!(si_decade(8, "FLOP/s"), "100 MFLOP/s");
        assert_eq!(si_decade(12, "FLOP/s"), "1 TFLOP/s");
    }

    #[test]
    fn log_axis_spans_whole_decades_around_the_data() {
        let a = LogAxis::fit([3.0, 300.0].into_iter(), 0.0, 100.0).unwrap();
        assert_eq!((a.lo, a.hi), (0.0, 3.0));
        assert!((a.px(10.0) - 100.0 / 3.0).abs() < 1e-9);
    }
}
