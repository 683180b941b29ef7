//! Criterion benchmark: parse and rewrite 1,000 vllm-style task runners (target: < 1 s for all).

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kg_inject::{PySource, replace_test_shapes};

fn runner(i: usize) -> String {
    let mut s = format!(
        "#!/usr/bin/env python3\n\"\"\"Task runner {i} — naïve ☕\"\"\"\nimport os, json, argparse\n\n\
         N = int(os.getenv('KG_N_{i}', '4096'))\n\n# (batch, hidden)\nTEST_SHAPES = [\n"
    );
    for r in 0..(5 + i % 7) {
        s.push_str(&format!(
            "    ({}, {}),  # row {r}\n",
            1 << (r % 6),
            128 * (r + 1 + i % 3)
        ));
    }
    s.push_str("    # (4096, 8192),\n]\n\n");
    for f in 0..20 {
        s.push_str(&format!(
            "def helper_{f}(x, atol=1e-3):\n    for i, (batch, hidden) in enumerate(TEST_SHAPES):\n        \
             assert hidden % 64 == 0\n        x = x * {f} + batch\n    return x\n\n"
        ));
    }
    s
}

fn bench(c: &mut Criterion) {
    let files: Vec<String> = (0..1000).map(runner).collect();
    let replacement =
        "TEST_SHAPES = [\n    (1, 127),  # edge\n    (37, 4099),  # alignment-stress\n]";
    c.bench_function("rewrite 1000 task runners", |b| {
        b.iter(|| {
            let mut bytes = 0usize;
            for (i, text) in files.iter().enumerate() {
                let src = PySource::parse(format!("runner_{i}.py"), text.as_str()).unwrap();
                let out = replace_test_shapes(&src, replacement).unwrap();
                bytes += out.len();
            }
            black_box(bytes)
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
