"""Shared fixtures: each tiny model is built and exported at most once per test session."""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def onnx_export():
    """``onnx_export(name, dynamic)`` → ExportResult, cached per session (each export costs 3-10 s)."""
    from exporters.onnx.exporter import OnnxConfig, OnnxExporter
    from exporters.tiny import build_tiny

    cache: dict[tuple[str, bool], object] = {}

    def export(name: str, dynamic: bool):
        if (name, dynamic) not in cache:
            tiny = build_tiny(name)
            cache[name, dynamic] = OnnxExporter(OnnxConfig(dynamic=dynamic)).export(tiny.model, tiny.inputs)
        return cache[name, dynamic]

    return export


@pytest.fixture(scope="session")
def et_export():
    """``et_export(name, dynamic)`` → ExportResult (XNNPACK), cached for the whole session.

    A failed lowering is cached too and raised again, so a broken model costs one lowering, not one per test.
    """
    from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter
    from exporters.tiny import build_tiny

    cache: dict[tuple[str, bool], object] = {}

    def export(name: str, dynamic: bool):
        if (name, dynamic) not in cache:
            tiny = build_tiny(name)
            try:
                cache[name, dynamic] = ExecutorchExporter(ExecutorchConfig(dynamic=dynamic)).export(
                    tiny.model, tiny.inputs
                )
            except Exception as error:
                cache[name, dynamic] = error
        cached = cache[name, dynamic]
        if isinstance(cached, Exception):
            raise cached
        return cached

    return export


@pytest.fixture(scope="session")
def matches_eager():
    """``matches_eager(result, run, inputs=None)``: ``run`` (an artifact loaded back from disk) gives the eager
    model's values for every output, within the export's tolerances; the report's problems otherwise."""
    from exporters.validation import PASS, check_shape

    def check(result, run, inputs=None):
        inputs = result.inputs if inputs is None else inputs
        shape = check_shape("saved file", inputs, lambda kw: result.model(**kw), run, result.atol, result.rtol)
        assert shape.status == PASS, [(c.name, c.status, c.detail) for c in shape.outputs]
        return shape

    return check


IN_PLACE_MAX_CACHE_LEN = 64


@pytest.fixture(scope="session")
def in_place_bundle_of(tmp_path_factory):
    """``in_place_bundle_of(backend)``: the tiny Llama's ``--cache in-place`` bundle on ``backend``
    (max_cache_len ``IN_PLACE_MAX_CACHE_LEN``), written and validated once a session: (directory, export)."""
    from bot.run.generation import export_generation

    built = {}

    def bundle(backend):
        if backend not in built:
            out = tmp_path_factory.mktemp(f"inplace-{backend}") / "llama-inplace"
            built[backend] = out, export_generation("LlamaForCausalLM", backend, out, task="text-generation",
                                                    batch_size=1, max_cache_len=IN_PLACE_MAX_CACHE_LEN,
                                                    cache="in-place")
        return built[backend]

    return bundle


@pytest.fixture(scope="session")
def generates_eagers_tokens():
    """``generates_eagers_tokens(out, export)``: the bundle at ``out``, loaded back fresh, generates eager
    ``generate()``'s tokens for a long generation and then a short one (same loaded bundle), on prompts whose
    eager path is not one token forever."""
    import exporters
    from exporters.generation.check import eager_generate
    from exporters.generation.components import sample_prompts

    def check(out, export):
        bundle = exporters.load(out)
        layout = bundle.metadata.generation
        for length, new in ((20, 40), (5, 12)):
            ids = sample_prompts(export.model, batch=1, prompt_length=length, seed=length)["input_ids"]
            got = bundle.generate(ids, max_new_tokens=new, min_new_tokens=new)
            eager, _, _ = eager_generate(export.model, layout, {"input_ids": ids}, new)
            assert got.tokens.tolist() == eager.tolist()
            assert len(set(eager[0].tolist())) > 1  # a degenerate path would prove nothing

    return check


@pytest.fixture(scope="session")
def executorch_needs():
    """``executorch_needs(model, inputs, workaround, error, **config)`` → the validated ExportResult with the
    workaround on (``config``: more ``ExecutorchConfig`` fields, e.g. ``dynamic=True``).

    The shape every ExecuTorch workaround test shares: with ``workaround`` the export fires it and matches eager;
    ``--without`` it, lowering fails with ``error`` (a regex on ``Type: message``), so the test fails the day
    the workaround stops being needed or stops working.
    """
    from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter

    def check(model, inputs, workaround: str, error: str, **config):
        fixed = ExecutorchExporter(ExecutorchConfig(**config)).export(model, inputs, validate=True)
        assert fixed.metadata.workarounds_fired.get(workaround, 0) >= 1, fixed.metadata.workarounds_fired
        assert fixed.validation.status == "pass", fixed.validation.problems()
        without = ExecutorchConfig(without=frozenset({workaround}), **config)
        with pytest.raises(Exception) as failure:
            ExecutorchExporter(without).export(model, inputs)
        # Matched against "Type: message": the edge verifier's bare ``AssertionError`` has no message at all.
        assert re.search(error, f"{type(failure.value).__name__}: {failure.value}"), failure.value
        return fixed

    return check


@pytest.fixture(scope="session")
def trained_llama():
    """The checkpoint directory of a small Llama trained on a synthetic corpus (exporters.tiny.trained): a model
    with structure for quality checks. Trained once (about a minute and a half on two busy cores) and cached
    under the checkout's ``.exportbot-cache/`` by its recipe."""
    from pathlib import Path

    from exporters.tiny.trained import trained_llama

    return trained_llama(Path(__file__).resolve().parents[1] / ".exportbot-cache")
