"""The version window (bot.audit.window, docs/version-window.md): versions exportbot cannot run with are said
so in one line by ``bisect`` and ``audit --candidate``, never read as the dependency's failure; and the
exporter's version-tolerant output flattening (exporters.flatten)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from bot.audit.plan import ENTRY, Export, Subject
from bot.audit.regression_sample import SampledExport
from bot.audit.window import measured_edges, own_incompatibility, unsupported_reason
from bot.outcome import FAILED as EXPORT_FAILED
from bot.outcome import ExportOutcome, ExportRequest
from bot.run.bisect import FAILED, PASSED, UNINSTALLABLE, UNSUPPORTED, ExportProbe, Probe, first_passing
from bot.run.candidate import UNSUPPORTED as ROW_UNSUPPORTED
from bot.run.candidate import check_regressions, prepare_environment
from bot.run.runner import _failed
from exporters.flatten import leaves_with_path
from exporters.validation import named_tensors


def outcome_raised_in(filename: str, source: str) -> dict[str, Any]:
    """The outcome record bot.run.runner writes for an exception raised by ``source`` compiled as ``filename``."""
    try:
        exec(compile(source, filename, "exec"), {})
    except Exception as error:
        outcome = ExportOutcome("BertModel", "onnx", False, EXPORT_FAILED, 0.0)
        return _failed(outcome, EXPORT_FAILED, error, 0.0, ExportRequest("BertModel", "onnx"), "exporting").as_dict()
    raise AssertionError("source did not raise")


def test_versions_below_the_measured_window_are_refused_in_one_line():
    line = unsupported_reason("onnxscript", "0.5.7")
    assert line is not None and "\n" not in line
    assert "onnxscript>=0.6.0" in line and "torch_2_11" in line and "docs/version-window.md" in line
    assert unsupported_reason("onnxscript", "0.6.0") is None and unsupported_reason("ONNXScript", "0.7.2") is None
    assert unsupported_reason("executorch", "1.3.1") is not None and unsupported_reason("executorch", "1.4.0") is None
    assert "oldest release measured" in (unsupported_reason("onnx", "1.0.0") or "")  # below anything measured
    assert unsupported_reason("torch", "2.0.0") is None  # never measured: no edge


def probe(version: str, model: str, status: str = "pass", error: str = "") -> dict[str, Any]:
    return {"package": "transformers", "version": version, "model": model, "backend": "onnx", "mode": "static",
            "status": status, "error": error}  # fmt: skip


def test_the_window_lists_only_releases_whose_probes_pass():
    """transformers 5.12.1 was listed as supported while CanineModel and MixtralModel failed there in the
    project's own output naming: the edge comes from the probes, so one failing probe moves it above that
    release, and an older release that passed is outside too (nothing between is known to work)."""
    failing = "Did not find a flatten_with_keys_fn for type: CanineModelOutputWithPooling"
    records = [probe(v, m) for v in ("5.0.0", "5.6.2", "5.18.0", "5.23.0") for m in ("BertModel", "CanineModel")]
    records += [probe("5.12.1", "BertModel"), probe("5.12.1", "CanineModel", "failed", failing)]
    edges = measured_edges(records)
    assert edges["transformers"].first == "5.18.0"
    for version in ("5.6.2", "5.12.1", "5.12.2"):
        line = unsupported_reason("transformers", version, edges)
        assert line is not None and "transformers>=5.18.0" in line
        assert "at 5.12.1, CanineModel onnx/static failed: Did not find a flatten_with_keys_fn" in line
    assert unsupported_reason("transformers", "5.20.0", edges) is None
    assert unsupported_reason("transformers", "5.24.0", edges) is None  # a newer release: the watch's candidates
    fixed = [r for r in records if r["version"] != "5.12.1"] + [probe("5.12.1", "BertModel"), probe("5.12.1", "CanineModel")]
    assert measured_edges(fixed)["transformers"].first == "5.0.0"  # measured again after the fix
    uninstallable = measured_edges([{"package": "torchao", "version": "0.19.0", "model": None, "status": "uninstallable",
                                     "error": "conflict"}])  # fmt: skip
    assert uninstallable["torchao"].first is None
    assert "no measured release passes" in (unsupported_reason("torchao", "0.19.0", uninstallable) or "")


def test_an_import_error_in_exportbots_own_code_is_exportbots_not_the_dependencys():
    ours = outcome_raised_in("/repo/exporters/exporter_onnx.py", "import torch\ntorch.ops.transformers.nope_op")
    line = own_incompatibility(ours, "transformers", "5.0.0")
    assert line is not None and "\n" not in line
    assert line.startswith("exportbot does not support transformers 5.0.0: AttributeError") and "nope_op" in line
    theirs = outcome_raised_in("/site-packages/torch/onnx/_internal/x.py", "import torch\ntorch.ops.aten.nope_op")
    assert own_incompatibility(theirs, "onnxscript", "0.6.0") is None  # raised in torch: the stack's failure
    mismatch = {"status": "mismatch", "error_type": None, "error": "last_hidden_state: mismatch"}
    assert own_incompatibility(mismatch, "onnxscript", "0.6.0") is None


def test_bisect_skips_unsupported_versions_like_uninstallable_ones():
    answers = {"0.5.7": UNSUPPORTED, "0.6.0": FAILED, "0.6.1": UNINSTALLABLE, "0.6.2": UNSUPPORTED, "0.7.0": PASSED}
    result = first_passing(list(answers), lambda v: Probe(v, answers[v]))
    assert result.first_passing == "0.7.0" and result.last_failing == "0.6.0"
    assert set(result.untested) == {"0.6.1", "0.6.2"}  # the fix may be in either: said, never guessed


def test_bisect_probe_refuses_a_version_below_the_window_without_installing_it(tmp_path):
    subject = Subject("e", ENTRY, "onnx", (Export("BertModel", "onnx", False),), ("onnxscript",))
    probe = ExportProbe(subject, "onnxscript", "onnxscript==0.7.2\n", tmp_path, requirements=[])
    result = probe("0.5.7")
    assert result.outcome == UNSUPPORTED and "onnxscript>=0.6.0" in result.detail
    assert not any(tmp_path.iterdir())  # nothing was built


def test_candidate_below_the_window_is_a_one_line_problem(tmp_path):
    environment = prepare_environment("onnxscript==0.5.7", "onnxscript==0.7.2\n", {"onnxscript": "0.7.2"}, tmp_path)
    assert environment.python is None and environment.problem.startswith("is not supported: onnxscript 0.5.7")


def test_a_regression_row_failing_in_exportbots_own_code_is_unsupported_not_a_regression():
    ours = outcome_raised_in("/repo/exporters/exporter_onnx.py", "import torch\ntorch.ops.transformers.nope_op")
    ours["versions"] = {"transformers": "5.0.0"}
    pinned_calls = []
    [row] = check_regressions([SampledExport(Export("BertModel", "onnx", False))], ["transformers"],
                              lambda item: ours, lambda item: pinned_calls.append(item) or {"status": "pass"})  # fmt: skip
    assert row.result == ROW_UNSUPPORTED and row.unsupported.startswith("exportbot does not support transformers 5.0.0")
    assert pinned_calls == []  # no second export: it is not a regression candidate


class OldStyleOutput(OrderedDict):
    """A ModelOutput as transformers <= 5.12 registered it: flatten_fn only, context = field names."""


pytree.register_pytree_node(
    OldStyleOutput,
    lambda output: (list(output.values()), list(output.keys())),
    lambda values, keys: OldStyleOutput(zip(keys, values)),
    serialized_type_name=f"{__name__}.OldStyleOutput",
)


def test_outputs_registered_without_keys_are_named_by_their_fields():
    hidden, pooled = torch.ones(2, 3), torch.zeros(2)
    output = OldStyleOutput(last_hidden_state=hidden, pooler_output=pooled)
    try:
        pytree.tree_flatten_with_path(output)
        raised = False
    except ValueError:
        raised = True
    assert raised, "torch's pytree refuses nodes without flatten_with_keys_fn (what broke transformers 5.12)"
    assert [name for name, _ in named_tensors(output)] == ["last_hidden_state", "pooler_output"]
    nested = {"outputs": (output, [hidden])}
    names = [name for name, _ in named_tensors(nested)]
    assert names == ["outputs.0.last_hidden_state", "outputs.0.pooler_output", "outputs.1.0"]
    assert [leaf for _, leaf in leaves_with_path({"x": hidden})] == [hidden]


class _ReturnsOldStyleOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> OldStyleOutput:
        return OldStyleOutput(last_hidden_state=x * 2, pooler_output=x.sum(-1))


def test_a_bundle_describes_outputs_registered_without_keys(tmp_path):
    """At transformers 5.12.1 CanineModel and every MoE model (CanineModelOutputWithPooling,
    MoeModelOutputWithPast) failed in the bundle's own output description, which called pytree's
    tree_flatten_with_path: exportbot's failure, not the release's, reported as three regressions."""
    import exporters
    from exporters import DynamoExporter

    inputs = {"x": torch.randn(2, 3)}
    DynamoExporter().export(_ReturnsOldStyleOutput(), inputs).save(tmp_path / "bundle")
    loaded = exporters.load(tmp_path / "bundle")
    assert [spec.name for spec in loaded.metadata.components["model"].outputs] == ["last_hidden_state", "pooler_output"]
    again = loaded(**inputs)
    assert type(again) is OldStyleOutput and torch.allclose(again["pooler_output"], inputs["x"].sum(-1))


# The window's edges and a middle release (docs/version-window.md has every measured one).
EDGES = [("transformers", "5.0.0", "BertModel", "onnx"), ("transformers", "5.12.1", "BertModel", "onnx"),
         ("transformers", "5.12.1", "CanineModel", "onnx"), ("transformers", "5.12.1", "MixtralModel", "onnx"),
         ("transformers", "5.0.0", "LlamaForCausalLM", "executorch"), ("onnxscript", "0.6.0", "BertModel", "onnx"),
         ("onnx", "1.21.0", "BertModel", "onnx"), ("onnxruntime", "1.27.0", "BertModel", "onnx"),
         ("executorch", "1.4.0", "LlamaForCausalLM", "executorch")]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("package", "version", "model", "backend"), EDGES, ids=lambda v: str(v))
def test_the_exporter_works_at_the_edges_of_the_window(package, version, model, backend):
    """A tiny static export in the candidate environment of each edge release (scripts/version_window.py's
    environments, reused; layered on the pinned one: 7-20 s to build when missing, plus the export)."""
    from pathlib import Path

    from bot.audit.pins import constraints_with, normalize_name
    from bot.run.reruns import subprocess_runner
    from bot.run.venvs import (
        DEFAULT_CACHE,
        REPO_ROOT,
            ensure_venv,
        project_dependencies,
        site_packages,
    )

    pins = (REPO_ROOT / "constraints.txt").read_text(encoding="utf-8")
    python = ensure_venv(DEFAULT_CACHE / f"window-{normalize_name(package)}-{version}",
                         constraints_with(pins, package, version), project_dependencies(), base=site_packages())  # fmt: skip
    outcome = subprocess_runner(1800, plain=True, python=Path(python), pythonpath=REPO_ROOT)(model, backend, False)
    assert outcome["versions"][package] == version
    assert outcome["status"] == "pass", outcome.get("error")
