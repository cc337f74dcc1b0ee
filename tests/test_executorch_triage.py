"""ExecuTorch workarounds found by triaging the catalogue's ExecuTorch static sweep (branches ettriage, hieramax).

Each test lowers a small module that repeats the transformers construct, so the default suite lowers little;
the sweep classes that hit them (BigBirdPegasusForSequenceClassification, HieraForImageClassification) are
exported whole by the slow tests.
"""

from __future__ import annotations

import pytest
import torch
from pte_runtime import run_pte

from exporters.dynamo.exporter import DynamoConfig, DynamoExporter
from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter
from exporters.fx_rewrites import drop_assertion_only_chain

EOS = 2


class EosClassifier(torch.nn.Module):
    """The BART-style classification head: every row must hold as many EOS tokens (checked with
    ``unique_consecutive`` as transformers' ``torch_compilable_check`` traces it), then the last EOS's hidden
    state is classified."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(8, 4)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(input_ids)
        eos_mask = input_ids.eq(EOS)
        torch._check(torch.unique_consecutive(eos_mask.sum(1)).numel() == 1)
        selected = hidden[eos_mask, :].view(hidden.size(0), -1, hidden.size(-1))[:, -1, :]
        return self.head(selected)


class DistinctCounter(torch.nn.Module):
    """Uses ``unique_consecutive``'s values: the fix must leave it (and the edge verifier's error) alone."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.unique_consecutive(x).sum()


def _ids() -> torch.Tensor:
    return torch.tensor([[5, 3, EOS, 4, EOS], [1, EOS, 6, 7, EOS]])


def test_unique_consecutive_check_removal_drops_only_the_assertion():
    model, ids = EosClassifier().eval(), _ids()
    program = torch.export.export(model, (ids,))
    assert "unique_consecutive" in program.graph_module.code and "_assert_scalar" in program.graph_module.code
    removed = sum(drop_assertion_only_chain(program.graph_module, node) for node in list(program.graph.nodes)
                  if node.target is torch.ops.aten.unique_consecutive.default)
    program.graph_module.graph.eliminate_dead_code()
    program.graph_module.recompile()
    assert removed == 1 and "unique_consecutive" not in program.graph_module.code
    assert torch.equal(program.module()(ids), model(ids))

    used = torch.export.export(DistinctCounter(), (torch.tensor([1, 1, 2, 2, 3]),))
    unique = next(n for n in used.graph.nodes if n.target is torch.ops.aten.unique_consecutive.default)
    assert not drop_assertion_only_chain(used.graph_module, unique)


def test_executorch_needs_the_unique_consecutive_check_dropped(executorch_needs):
    model, inputs = EosClassifier().eval(), {"input_ids": _ids()}
    fixed = executorch_needs(
        model,
        inputs,
        "_fix_unique_consecutive_check_not_core_aten",
        r"aten\.unique_consecutive\.default is not in Core ATen opset",
    )
    assert fixed.metadata.workarounds_fired["_fix_unique_consecutive_check_not_core_aten"] == 1


def test_a_used_unique_consecutive_still_fails_on_executorch():
    inputs = {"x": torch.tensor([1, 1, 2, 2, 3])}
    program = DynamoExporter(DynamoConfig()).export(DistinctCounter(), inputs).program
    assert "unique_consecutive" in program.graph_module.code
    with pytest.raises(Exception, match=r"aten\.unique_consecutive\.default is not in Core ATen opset"):
        ExecutorchExporter(ExecutorchConfig()).export(DistinctCounter(), inputs)


@pytest.mark.slow
def test_bigbird_pegasus_classification_lowers_with_the_check_dropped():
    from exporters.tiny import build_tiny

    tiny = build_tiny("BigBirdPegasusForSequenceClassification")
    result = ExecutorchExporter(ExecutorchConfig()).export(tiny.model, tiny.inputs, validate=True)
    assert result.metadata.workarounds_fired["_fix_unique_consecutive_check_not_core_aten"] == 1
    assert result.validation.status == "pass"


class MaxPools(torch.nn.Module):
    """4-D ``max.dim`` as Hiera writes it (``view(b, stride, -1, c).max(dim=1).values``), over the last dim
    spelled -1, and one whose values and indices are both used (which XNNPACK does not claim)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values, indices = torch.max(x, 2)
        return x.max(dim=-1).values, torch.max(x, 1).values, values, indices


def test_xnnpack_needs_max_dim_in_its_pooling_form(tmp_path):
    model, x = MaxPools().eval(), torch.randn(2, 3, 4, 5)
    result = ExecutorchExporter(ExecutorchConfig()).export(model, {"x": x})
    assert result.metadata.workarounds_fired["_fix_max_dim_for_xnnpack"] == 3
    written = result.save(tmp_path / "max-pools")["artifact"]
    ran, eager = run_pte(written, [x]), model(x)
    assert len(ran) == len(eager) and all(torch.equal(a, b) for a, b in zip(ran, eager, strict=True))
    without = ExecutorchConfig(without=frozenset({"_fix_max_dim_for_xnnpack"}))
    with pytest.raises(Exception, match=r"amax\.default only supports (keep_dim == True|dim == 2 or dim == 3)"):
        ExecutorchExporter(without).export(model, {"x": x})


@pytest.mark.slow
def test_hiera_classification_lowers_with_max_dim_as_pooling():
    from exporters.tiny import build_tiny

    tiny = build_tiny("HieraForImageClassification")
    result = ExecutorchExporter(ExecutorchConfig()).export(tiny.model, tiny.inputs, validate=True)
    assert result.metadata.workarounds_fired["_fix_max_dim_for_xnnpack"] >= 1
    assert result.validation.status == "pass"
