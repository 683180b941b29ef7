"""kernelgate for Python: problems, traces and their verification, SOL bounds and scores, and
evaluation through the same engine as kg-bench."""

from os import PathLike
from typing import Optional

__version__: str

class KernelgateError(Exception): ...
class ProblemError(KernelgateError): ...
class TraceError(KernelgateError): ...
class EvaluateError(KernelgateError): ...
class SolarError(KernelgateError): ...
class ScoreError(KernelgateError): ...

class Problem:
    name: str
    dir: str
    op_type: Optional[str]
    workloads: list[str]
    tree_sha256: str
    warnings: list[str]

class Trace:
    definition: str
    solution: Optional[str]
    workload: str
    status: Optional[str]
    reason: Optional[str]
    latency_ms: Optional[float]
    reference_latency_ms: Optional[float]
    speedup: Optional[float]
    hardware: Optional[str]
    log: Optional[str]
    json: str

class Verification:
    ok: bool
    path: str
    files: int
    lines: int
    findings: list[str]
    def __bool__(self) -> bool: ...

class SolBound:
    definition: str
    workload: str
    hardware: str
    t_sol_ms: float
    t_compute_ms: float
    t_memory_ms: float
    bound: str
    arithmetic_intensity: float

class Score:
    overall: float
    problems: dict[str, float]
    device: str
    timing_method: str
    json: str

def load_problem(path: str | PathLike[str]) -> Problem: ...
def read_traces(path: str | PathLike[str]) -> list[Trace]: ...
def verify_traces(path: str | PathLike[str], pubkey: Optional[str | PathLike[str]] = None) -> Verification: ...
def verify_run(summary: str | PathLike[str], pubkey: Optional[str | PathLike[str]] = None) -> Verification: ...
def sol_bounds(problem: str | PathLike[str], hardware: str = "h200", python: Optional[str | PathLike[str]] = None) -> list[SolBound]: ...
def sol_score(t_k: float, t_b: float, t_sol: float) -> float: ...
def score(candidate: str | PathLike[str], baseline: str | PathLike[str], sol: str | PathLike[str]) -> Score: ...
def evaluate(
    problem: str | PathLike[str],
    solution: str = "reference",
    device: str = "cpu",
    max_workloads: Optional[int] = None,
    rounds: int = 10,
    warmup: int = 10,
    iterations: int = 50,
    timeout: float = 600.0,
    python: Optional[str | PathLike[str]] = None,
    output: Optional[str | PathLike[str]] = None,
) -> list[Trace]: ...
