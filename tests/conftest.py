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
