"""How the judge reads the candidate's outputs out of its device pool (`judge._candidate_outputs`):
every way the pool can fail is HandoverFailed, on which the parent asks for a file instead."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import judge  # noqa: E402
import kg_wire  # noqa: E402
import kgvmm  # noqa: E402


class Channel:
    def __init__(self, fd=None):
        self.fd = fd

    def recv_fd(self, timeout):
        if self.fd is None:
            raise OSError("timed out")
        return self.fd


@pytest.fixture(autouse=True)
def judge_state(monkeypatch):
    monkeypatch.setitem(judge.STATE, "device", torch.device("cpu"))
    judge.STATE.pop("pool", None)
    monkeypatch.setattr(kg_wire, "CHANNEL", [Channel()])
    yield
    judge.STATE.pop("pool", None)


DESC = {"pool": 1, "size": 2 << 20, "groups": [[{"dtype": "float32", "shape": [2], "offset": 0, "nbytes": 8}]]}


def test_a_descriptor_that_never_comes_fails_the_handover():
    with pytest.raises(judge.HandoverFailed, match="timed out"):
        judge._candidate_outputs({"device": dict(DESC, **{"import": True})})


def test_a_descriptor_the_driver_refuses_fails_the_handover_and_is_closed(monkeypatch):
    fd = os.open(os.devnull, os.O_RDONLY)
    kg_wire.CHANNEL[:] = [Channel(fd)]

    def refuse(fd, size, device):
        raise kgvmm.VmmError("cuMemImportFromShareableHandle failed: CUDA_ERROR_INVALID_VALUE (1)")

    monkeypatch.setattr(kgvmm.Pool, "open", staticmethod(refuse))
    with pytest.raises(judge.HandoverFailed, match="INVALID_VALUE"):
        judge._candidate_outputs({"device": dict(DESC, **{"import": True})})
    with pytest.raises(OSError):
        os.fstat(fd)


def test_outputs_said_to_be_in_a_pool_never_opened_fail_the_handover():
    with pytest.raises(judge.HandoverFailed, match="no pool"):
        judge._candidate_outputs({"device": dict(DESC, **{"import": False})})


def test_a_new_pool_replaces_the_open_one_and_outputs_are_read_from_it(monkeypatch):
    class Pool:
        def __init__(self, size, fill):
            self.size, self.mem, self.closed = size, torch.full((size,), fill, dtype=torch.uint8), False

        def view(self, n):
            return self.mem[:n]

        def close(self):
            self.closed = True

    old = Pool(2 << 20, 0)
    judge.STATE["pool"] = old
    fd = os.open(os.devnull, os.O_RDONLY)
    kg_wire.CHANNEL[:] = [Channel(fd)]
    monkeypatch.setattr(kgvmm.Pool, "open", staticmethod(lambda fd, size, device: Pool(size, 1)))
    (outs,) = judge._candidate_outputs({"device": dict(DESC, **{"import": True})})
    assert old.closed and judge.STATE["pool"].size == 2 << 20
    assert outs[0].dtype == torch.float32 and outs[0].view(torch.uint8).tolist() == [1] * 8


def test_round_outputs_are_poisoned_so_an_unwritten_element_cannot_pass_as_a_mismatch():
    import kg_handover

    outs = [torch.zeros(3, dtype=d) for d in (torch.bfloat16, torch.float8_e4m3fn, torch.int32, torch.uint8, torch.bool)]
    outs.append(torch.zeros(0))
    kg_handover.poison_outputs(outs)
    assert torch.isnan(outs[0].float()).all() and torch.isnan(outs[1].float()).all()
    assert (outs[2] == torch.iinfo(torch.int32).min).all()
    assert (outs[3] == 255).all()
    assert not outs[4].any(), "bool has no sentinel: left as it was"
