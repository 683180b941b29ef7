"""What drawing one round's inputs costs on the host (issue 4, criterion (c): both sides draw
every correctness round's inputs from its seed, 10 rounds a workload).

Run on a GPU: python3 crates/exec/bench/draws.py > draws.jsonl
For a few problems of problems/core (their first and last workload), REPEATS draws of
kg_inputs.random_input_set, each followed by a device sync, in ms; then the parts a draw is made
of on their own: torch.manual_seed, a device Generator made and seeded, one small randn.
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "py"))
REPEATS = 10
PROBLEMS = ("cross_entropy_bf16_llama3_1_8b", "embedding_fp32_minilm_l6", "fused_add_rmsnorm_bf16_gemma2_2b",
            "gelu_tanh_bf16_gemma2_2b", "layernorm_fp16_phi2")


def spec_of(definition, workload):
    """The draw spec the judge builds (judge.random_spec), for these problems' inputs."""
    axes = dict(workload["axes"])
    for k, a in definition["axes"].items():
        if a.get("type") == "const":
            axes[k] = a["value"]
    inputs = []
    for name, i in definition["inputs"].items():
        given = workload["inputs"][name]
        if given["type"] == "custom":
            inputs.append({"custom": name})
        elif given["type"] == "scalar":
            inputs.append({"value": given["value"]})
        else:
            inputs.append({"name": name, "dtype": i["dtype"], "shape": [axes[d] if isinstance(d, str) else d for d in i["shape"]]})
    if definition.get("custom_inputs_entrypoint"):
        return {"custom": {"source": definition["reference"], "entrypoint": definition["custom_inputs_entrypoint"],
                           "args": axes}, "inputs": inputs}
    return inputs


def timed(fn, dev):
    import torch

    out = []
    for _ in range(REPEATS):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(dev)
        out.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": round(statistics.median(out), 4), "max_ms": round(max(out), 4)}


def main():
    import torch

    import kg_wire
    import kg_inputs

    dev = torch.device("cuda:0")
    torch.zeros(1, device=dev)
    for p in PROBLEMS:
        d = json.load(open(os.path.join(ROOT, "problems/core", p, "definition.json")))
        ws = [json.loads(x) for x in open(os.path.join(ROOT, "problems/core", p, "workload.jsonl")) if x.strip()]
        for w in (ws[0], ws[-1]):
            spec = spec_of(d, w)
            kg_inputs.random_input_set(spec, 1, dev)  # first use: module import, kernel loads
            seeds = iter(range(100, 100 + REPEATS))
            r = timed(lambda: kg_inputs.random_input_set(spec, next(seeds), dev), dev)
            dig = timed(lambda: kg_inputs.digest(kg_inputs.random_input_set(spec, 7, dev)), dev)
            print(json.dumps({"problem": p, "axes": w["axes"], "draw": r, "draw_and_digest": dig}), flush=True)

    def gen():
        g = torch.Generator(device=dev)
        g.manual_seed(5)
        return g

    g = gen()
    print(json.dumps({"torch.manual_seed": timed(lambda: torch.manual_seed(5), dev),
                      "device Generator made and seeded": timed(gen, dev),
                      "randn 1000 with a generator": timed(lambda: torch.randn(1000, device=dev, generator=g), dev),
                      "empty sync": timed(lambda: None, dev)}), flush=True)


if __name__ == "__main__":
    main()
