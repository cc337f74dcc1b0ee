"""The workaround registry: install/restore, several paths, real originals, nesting, errors, hits."""

from __future__ import annotations

import threading
import types

import pytest
import torch

from exporters import utils
from exporters.utils import (
    HitLog,
    WorkaroundError,
    apply_fx_node_fixes,
    apply_fx_program_fixes,
    installed_patches,
    register_fx_node_fix,
    register_fx_program_fix,
    register_patch,
    tracking_hits,
    unresolved_targets,
)

# A module that stands in for model code the patches target.
target = types.ModuleType("exportbot_test_target")
target.double = lambda x: x * 2
target.triple = lambda x: x * 3


class Widget:
    def size(self) -> int:
        return 1


import sys  # noqa: E402

sys.modules["exportbot_test_target"] = target
target.Widget = Widget


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch):
    """Registrations made inside a test vanish after it, leaving the real registry untouched."""
    for table in ("_PATCHES", "_FX_NODE_FIXES", "_FX_PROGRAM_FIXES"):
        monkeypatch.setattr(utils, table, {})
    monkeypatch.setattr(utils, "_OTHER_WORKAROUNDS", [])


def test_patch_installed_during_block_and_restored_after(scratch_registry):
    @register_patch("t", "exportbot_test_target.double")
    def _patch_double(original):
        return lambda x: original(x) + 100

    assert target.double(1) == 2
    with installed_patches("t"):
        assert target.double(1) == 102  # the replacement called the real original
    assert target.double(1) == 2


def test_patch_restored_when_export_raises(scratch_registry):
    @register_patch("t", "exportbot_test_target.double")
    def _patch_double(original):
        return lambda x: -1

    with pytest.raises(RuntimeError, match="boom"), installed_patches("t"):
        assert target.double(5) == -1
        raise RuntimeError("boom")
    assert target.double(5) == 10


def test_one_factory_for_several_paths(scratch_registry):
    @register_patch("t", "exportbot_test_target.double", "exportbot_test_target.triple")
    def _patch_both(original):
        return lambda x: original(x) * 10

    with installed_patches("t"):
        assert (target.double(1), target.triple(1)) == (20, 30)
    assert (target.double(1), target.triple(1)) == (2, 3)


def test_torch_op_patch_calls_the_real_op(scratch_registry):
    @register_patch("t", "torch.Tensor.split")
    def _patch_split(original):
        def split(self, size, dim=0):
            return tuple(original(self, size, dim))[::-1]

        return split

    x = torch.arange(4)
    with installed_patches("t"):
        first, _second = x.split(2)
        assert first.tolist() == [2, 3]
    assert x.split(2)[0].tolist() == [0, 1]
    assert "split" in vars(torch.Tensor)  # the class attribute came back, not a shadow copy


def test_inherited_method_patch_is_removed_not_left_behind(scratch_registry):
    class Sub(Widget):
        pass

    sys.modules["exportbot_test_target"].Sub = Sub

    @register_patch("t", "exportbot_test_target.Sub.size")
    def _patch_size(original):
        return lambda self: original(self) + 1

    with installed_patches("t"):
        assert Sub().size() == 2
    assert "size" not in vars(Sub)
    assert Sub().size() == 1


def test_nesting_is_outer_then_inner_and_restores_in_reverse(scratch_registry):
    calls = []

    @register_patch("outer", "exportbot_test_target.double")
    def _patch_outer(original):
        return lambda x: (calls.append("outer"), original(x))[1]

    @register_patch("inner", "exportbot_test_target.double")
    def _patch_inner(original):
        return lambda x: (calls.append("inner"), original(x))[1]

    with installed_patches("outer"), installed_patches("inner"):
        assert target.double(2) == 4
    assert calls == ["inner", "outer"]  # the inner replacement wraps the outer one
    assert target.double(2) == 4 and calls == ["inner", "outer"]


def test_unresolved_path_is_an_error_naming_workaround_and_path(scratch_registry):
    @register_patch("t", "exportbot_test_target.RenamedClass.forward")
    def _patch_renamed(original):
        return original

    pattern = r"_patch_renamed.*exportbot_test_target\.RenamedClass\.forward"
    with pytest.raises(WorkaroundError, match=pattern), installed_patches("t"):
        pass
    assert [(w.name, path) for w, path, _ in unresolved_targets()] == [
        ("_patch_renamed", "exportbot_test_target.RenamedClass.forward")
    ]


def test_unresolved_path_error_leaves_nothing_installed(scratch_registry):
    @register_patch("t", "exportbot_test_target.double")
    def _patch_good(original):
        return lambda x: 0

    @register_patch("t", "exportbot_test_target.missing")
    def _patch_bad(original):
        return original

    with pytest.raises(WorkaroundError), installed_patches("t"):
        pass
    assert target.double(1) == 2


def test_optional_target_is_skipped_silently(scratch_registry):
    @register_patch("t", "exportbot_test_target.OnlyInNewerTransformers.forward", optional=True)
    def _patch_optional(original):
        return original

    with installed_patches("t") as names:
        assert names == []
    assert unresolved_targets() == []


def test_hits_count_calls_and_rewrites(scratch_registry):
    @register_patch("t", "exportbot_test_target.double")
    def _patch_counted(original):
        return original

    @register_patch("t", "exportbot_test_target.triple")
    def _patch_never_called(original):
        return original

    @register_fx_node_fix("t")
    def _fix_relu_to_sigmoid(graph_module, node):
        if node.op == "call_function" and node.target is torch.relu:
            node.target = torch.sigmoid
            return True
        return False

    @register_fx_program_fix("t")
    def _fix_program_noop(program):
        return False

    graph_module = torch.fx.symbolic_trace(lambda x: torch.relu(x) + 1)
    log = HitLog()
    with tracking_hits(log), installed_patches("t"):
        target.double(1)
        target.double(1)
        assert apply_fx_node_fixes(graph_module, "t") == 1
        apply_fx_program_fixes(object(), "t")
    assert log.counts == {"_patch_counted": 2, "_fix_relu_to_sigmoid": 1}
    assert torch.allclose(graph_module(torch.zeros(1)), torch.tensor([1.5]))


def test_disabled_workaround_is_left_out_and_unknown_name_rejected(scratch_registry):
    @register_patch("t", "exportbot_test_target.double")
    def _patch_probe(original):
        return lambda x: 0

    with installed_patches("t", frozenset({"_patch_probe"})):
        assert target.double(1) == 2
    with pytest.raises(WorkaroundError, match="no workaround named '_patch_typo'"):
        utils.check_disabled_names({"_patch_typo"})


def test_duplicate_names_are_rejected(scratch_registry):
    @register_patch("t", "exportbot_test_target.double")
    def _patch_same(original):
        return original

    with pytest.raises(WorkaroundError, match="registered twice"):
        register_patch("u", "exportbot_test_target.triple")(_patch_same)


def test_second_thread_waits_for_the_first_export(scratch_registry):
    @register_patch("t", "exportbot_test_target.double")
    def _patch_slow(original):
        return lambda x: -x

    seen = []
    inside = threading.Event()
    release = threading.Event()

    def first():
        with installed_patches("t"):
            inside.set()
            release.wait(5)

    def second():
        inside.wait(5)
        with installed_patches("t"):
            seen.append(target.double(1))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    inside.wait(5)
    assert seen == []  # blocked by the lock while the first export holds its patches
    release.set()
    for t in threads:
        t.join(5)
    assert seen == [-1]
    assert target.double(1) == 2


def test_every_real_workaround_has_a_resolving_target():
    from exporters import load_all_workarounds

    load_all_workarounds()
    assert unresolved_targets() == []
    names = [w.name for w in utils.all_workarounds()]
    assert "_fix_reshape_of_strided" in names and len(names) == len(set(names))
