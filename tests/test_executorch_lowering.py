"""The ExecuTorch lowering speed patches (exporters/executorch/lowering.py): same program, less work.

A chain of 30 linear+relu blocks, each followed by a ``cumsum`` that XNNPACK does not take, is cut into 30
partitions (~4 s to lower); it is lowered once with and once without the patches, and both results are shared.
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.fx
from torch.export import Dim
from torch.fx.passes.tools_common import legalize_graph

from exporters.executorch.lowering import (
    DependencyBits,
    _legalize_in_place,
    _patch_guards_code_printed_once_per_shape_env,
    _patch_merge_check_intersects_sets,
    _patch_node_source_shares_its_history,
    legalized_order,
)

PATCH = "_patch_partition_fusing_sorts_in_place"
MERGE_PATCH = "_patch_merge_check_intersects_sets"
BITS_PATCH = "_patch_dependency_closures_as_bitsets"
HISTORY_PATCH = "_patch_node_source_shares_its_history"
GUARDS_PATCH = "_patch_guards_code_printed_once_per_shape_env"
ALL_PATCHES = frozenset({PATCH, MERGE_PATCH, BITS_PATCH, HISTORY_PATCH, GUARDS_PATCH})
BLOCKS = 30


class _Chain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(BLOCKS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.cumsum(block(x).relu(), -1)
        return x


@pytest.fixture(scope="module")
def chain_lowerings():
    """{"with": Lowering, "without": Lowering}: the chain lowered with every workaround and without the three
    patches of exporters/executorch/lowering.py, counting the work they avoid.

    A full re-sort is one call of torch.fx's ``legalize_graph`` from ``create_submodule_from_nodes``; the patch
    receives the counting wrapper as its ``original`` and calls it only when it cannot sort in place. A merge check
    that reaches the spy on ``_can_merge_partitions`` is answered by the original and by the patch's replacement:
    (original's answer, ours, original's downstream lookups, ours); with the patch installed none reaches it.
    Provenance copies are ``copy.deepcopy`` calls made by torch.fx.traceback (``NodeSource.__init__``).
    """
    import executorch.exir.lowered_backend_module as lowered_backend_module
    import torch.fx.traceback as fx_traceback
    from executorch.exir.backend.canonical_partitioners import group_partitioner

    from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter

    run = Lowering(None, [], [], [], [0], [0])
    original_sort = lowered_backend_module.legalize_graph

    def counting_sort(graph_module):
        run.full_sorts.append(len(graph_module.graph.nodes))
        return original_sort(graph_module)

    lookups = [0]
    original_lookup = group_partitioner._DependencyViewer.downstreams_of

    def counting_lookup(self, node):
        lookups[0] += 1
        return original_lookup(self, node)

    original_check = group_partitioner.GroupBasedPartitioner._can_merge_partitions
    ours = _patch_merge_check_intersects_sets(original_check)

    def both_checks(self, *args):
        answers = []
        for check in (original_check, ours):
            lookups[0] = 0
            answers.append((check(self, *args), lookups[0]))
        run.merge_checks.append((answers[0][0], answers[1][0], answers[0][1], answers[1][1]))
        if self not in bits_viewers:
            bits_viewers[self] = DependencyBits(self.graph_module)
        viewer, self.dependency_viewer = self.dependency_viewer, bits_viewers[self]
        try:
            run.bitset_merge_checks.append((answers[0][0], ours(self, *args)))
        finally:
            self.dependency_viewer = viewer
        return answers[0][0]

    bits_viewers = weakref.WeakKeyDictionary()  # partitioner -> the viewer the bitset patch would have given it

    built_bitsets = DependencyBits.__init__

    def counting_bitset_viewers(self, graph_module):
        run.bitset_viewers[0] += 1
        built_bitsets(self, graph_module)

    class CountingCopy:  # the ``copy`` module as torch.fx.traceback sees it
        def __getattr__(self, name):
            return getattr(copy, name)

        def deepcopy(self, value, *args):
            run.provenance_copies[0] += 1
            return copy.deepcopy(value, *args)

    torch.manual_seed(0)
    model, inputs = _Chain().eval(), {"x": torch.randn(2, 8)}
    results = {}
    with pytest.MonkeyPatch.context() as patch:  # only while lowering: the tests below call the originals
        patch.setattr(lowered_backend_module, "legalize_graph", counting_sort)
        patch.setattr(group_partitioner._DependencyViewer, "downstreams_of", counting_lookup)
        patch.setattr(group_partitioner.GroupBasedPartitioner, "_can_merge_partitions", both_checks)
        patch.setattr(fx_traceback, "copy", CountingCopy())
        patch.setattr(DependencyBits, "__init__", counting_bitset_viewers)
        for key, without in (("with", frozenset()), ("without", ALL_PATCHES)):
            run = Lowering(None, [], [], [], [0], [0])
            run.result = ExecutorchExporter(ExecutorchConfig(without=without)).export(model, inputs)
            results[key] = run
    return results


@dataclass
class Lowering:
    result: Any
    full_sorts: list[int]
    merge_checks: list[tuple[bool, bool, int, int]]
    bitset_merge_checks: list[tuple[bool, bool]]
    provenance_copies: list[int]
    bitset_viewers: list[int]


def test_patch_sorts_in_place_instead_of_copying_the_graph_per_partition(chain_lowerings):
    sorts_without = chain_lowerings["without"].full_sorts
    assert len(sorts_without) == BLOCKS  # one per partition, each copying the whole graph (150 .. 92 nodes)
    assert min(sorts_without) > 3 * BLOCKS
    assert chain_lowerings["with"].full_sorts == []


def test_merge_check_answers_as_the_original_with_at_most_its_lookups(chain_lowerings):
    checks = chain_lowerings["without"].merge_checks
    assert len(checks) > 100
    assert all(original == ours for original, ours, _, _ in checks)
    assert all(ours_lookups <= original_lookups for _, _, original_lookups, ours_lookups in checks)
    assert chain_lowerings["with"].merge_checks == []  # the patch answered every check


def test_merge_check_over_bitset_closures_answers_as_the_original(chain_lowerings):
    assert chain_lowerings["with"].bitset_viewers[0] >= 1  # the partitioner kept its closures as bitsets
    checks = chain_lowerings["without"].bitset_merge_checks
    assert len(checks) > 100
    assert all(original == ours for original, ours in checks)  # all refusals: no cumsum joins two partitions


@pytest.mark.parametrize("shuffled", [False, True])
def test_merge_check_over_bitset_closures_answers_as_the_original_on_random_partitions(shuffled):
    from types import SimpleNamespace

    from executorch.exir.backend.canonical_partitioners.group_partitioner import (
        GroupBasedPartitioner,
        _DependencyViewer,
    )
    from torch.fx.passes.infra.partitioner import Partition

    graph_module = _random_graph(120, seed=11, shuffled=shuffled)
    nodes = [node for node in graph_module.graph.nodes if node.op == "call_function"]
    original = SimpleNamespace(dependency_viewer=_DependencyViewer(graph_module))
    ours = SimpleNamespace(dependency_viewer=DependencyBits(graph_module))
    check = _patch_merge_check_intersects_sets(GroupBasedPartitioner._can_merge_partitions)
    rng = torch.Generator().manual_seed(5)
    answers = []
    for _ in range(300):
        start, length = torch.randint(len(nodes) - 8, (1,), generator=rng).item(), torch.randint(1, 8, (2,), generator=rng)
        gap = torch.randint(0, 12, (1,), generator=rng).item()
        first = nodes[start : start + length[0]]
        second = nodes[start + length[0] + gap : start + length[0] + gap + length[1]]
        if not second:
            continue
        partitions = {1: Partition(1, first), 2: Partition(2, second)}
        answer = GroupBasedPartitioner._can_merge_partitions(original, 1, 2, partitions)
        assert check(ours, 1, 2, partitions) == answer
        answers.append(answer)
    assert len(answers) > 200 and set(answers) == {True, False}  # merges allowed and refused


def _random_graph(nodes: int, seed: int, shuffled: bool) -> torch.fx.GraphModule:
    """A DAG of ``nodes`` adds, each of up to three earlier values; ``shuffled`` puts it out of order, where the
    original viewer reads a neighbour's closure before it is complete."""
    rng = torch.Generator().manual_seed(seed)
    graph = torch.fx.Graph()
    values = [graph.placeholder("x")]
    for _ in range(nodes):
        picks = torch.randint(len(values), (int(torch.randint(1, 4, (1,), generator=rng)),), generator=rng).tolist()
        values.append(graph.call_function(torch.add, tuple(values[i] for i in picks)))
    graph.output(values[-1])
    if shuffled:
        order = torch.randperm(nodes, generator=rng).tolist()
        for index in order[: nodes // 3]:
            values[0].prepend(values[index + 1])
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("shuffled", [False, True])
def test_bitset_closures_hold_the_viewers_sets(shuffled):
    from executorch.exir.backend.canonical_partitioners.group_partitioner import _DependencyViewer

    graph_module = _random_graph(200, seed=7, shuffled=shuffled)
    original, ours = _DependencyViewer(graph_module), DependencyBits(graph_module)
    nodes = list(graph_module.graph.nodes)
    for node in nodes:
        for closure in ("downstreams_of", "upstreams_of"):
            theirs, mine = getattr(original, closure)(node), getattr(ours, closure)(node)
            assert set(mine) == theirs and len(mine) == len(theirs)
            assert [n in mine for n in nodes] == [n in theirs for n in nodes]
    assert sum(len(original.downstreams_of(node)) for node in nodes) > 1000  # closures, not just direct users
    outsider = torch.fx.Graph().placeholder("y")  # a node the graph did not have: in no closure, as in the original
    assert outsider not in ours.downstreams_of(nodes[0]) and len(ours.downstreams_of(outsider)) == 0


def test_bitset_closures_take_a_fraction_of_the_viewers_memory():
    import tracemalloc

    from executorch.exir.backend.canonical_partitioners.group_partitioner import _DependencyViewer

    graph_module = _random_graph(1500, seed=3, shuffled=False)
    peaks = {}
    for viewer in (_DependencyViewer, DependencyBits):
        tracemalloc.start()
        kept = viewer(graph_module)
        peaks[viewer] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del kept
    # The sets hold a reference per (node, reachable node) pair each way, ~40 bytes apiece with the hash tables;
    # the bitsets one bit per pair, downstream only (the upstream ones are built when first asked for).
    # Measured: 8.2 MB against 0.41 MB here; the ratio grows with the graph.
    assert peaks[_DependencyViewer] > 10 * peaks[DependencyBits]


def test_provenance_is_shared_not_deep_copied(chain_lowerings):
    assert chain_lowerings["without"].provenance_copies[0] > 1000
    assert chain_lowerings["with"].provenance_copies[0] == 0


def test_patches_change_nothing_in_the_serialized_program(chain_lowerings, matches_eager):
    with_patches, without_patches = chain_lowerings["with"].result, chain_lowerings["without"].result
    assert with_patches.artifact.buffer == without_patches.artifact.buffer
    # and they record no hits: no export's result depends on them (exporters/executorch/lowering.py)
    assert with_patches.metadata.workarounds_fired == without_patches.metadata.workarounds_fired
    matches_eager(with_patches, with_patches.run_artifact)


def _program_with_assertions() -> torch.fx.GraphModule:
    """A graph with symbolic arithmetic, a runtime assertion, a node with several users and the name of an erased
    node, its nodes reversed."""

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n = x.shape[0]
            positive = (x > 0).sum().item()
            torch._check(positive <= n * 6)
            y = x.relu()
            return (y + y.sum()).reshape(n * 2, -1) * y.reshape(n * 2, -1) * positive

    program = torch.export.export(Model(), (torch.randn(4, 6),), dynamic_shapes={"x": {0: Dim("n", min=2, max=64)}})
    graph_module = program.graph_module
    first = next(iter(graph_module.graph.nodes))
    graph_module.graph.erase_node(graph_module.graph.call_function(torch.ops.aten.relu.default, (first,)))  # a used name
    for node in list(graph_module.graph.nodes)[1:]:
        first.prepend(node)  # any order: legalize_graph sorts from the dependencies alone
    return graph_module


def _state(graph_module: torch.fx.GraphModule) -> list[tuple]:
    return [
        (node.name, node.op, str(node.target), [user.name for user in node.users], sorted(node.meta))
        for node in graph_module.graph.nodes
    ]


def test_in_place_sort_leaves_the_graph_as_legalize_graph_does():
    reference, ours = _program_with_assertions(), _program_with_assertions()
    targets = {str(node.target) for node in reference.graph.nodes}
    assert {"aten._assert_scalar.default", "<built-in function mul>"} <= targets  # prioritised ops are there
    assert [node.name for node in legalized_order(ours.graph)] == [node.name for node in
                                                                   legalize_graph(reference).graph.nodes]
    metas = {node.name: node.meta for node in ours.graph.nodes}
    assert _legalize_in_place(ours)
    ours.recompile()
    assert _state(ours) == _state(reference)
    assert ours.code == reference.code
    assert all(node.meta is not metas[node.name] and node.meta == metas[node.name] for node in ours.graph.nodes)
    # A fresh name table, as a new graph has: the next node gets the same name in both.
    added = [gm.graph.call_function(torch.ops.aten.relu.default, (next(iter(gm.graph.nodes)),)) for gm in (reference, ours)]
    assert added[0].name == added[1].name
    assert ours.graph.find_nodes(op="placeholder") == [n for n in ours.graph.nodes if n.op == "placeholder"]


def test_node_source_shares_the_history_torch_deep_copies():
    from torch.fx.traceback import NodeSource, NodeSourceAction

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_function(torch.relu, (x,))
    y.meta["from_node"] = [NodeSource(x, "first", NodeSourceAction.CREATE)]
    torch_made = NodeSource(y, "second", NodeSourceAction.CREATE)  # outside an export: torch's own __init__
    ours = NodeSource.__new__(NodeSource)
    _patch_node_source_shares_its_history(NodeSource.__init__)(ours, y, "second", NodeSourceAction.CREATE)
    assert ours.to_dict() == torch_made.to_dict()
    assert torch_made.from_node[0] is not y.meta["from_node"][0]  # torch copies the whole history
    assert ours.from_node[0] is y.meta["from_node"][0]  # the patch shares it
    y.meta["from_node"].append(NodeSource(None, "third"))  # what the graph transform observer does in place
    assert len(ours.from_node) == len(torch_made.from_node) == 1


def _program_with_guards() -> torch.export.ExportedProgram:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            if x.shape[0] > 2:  # a guard on the batch, Ne(...) / Eq(...) guards from the view and the add
                x = x * 2
            return x.reshape(-1, 2).sum(-1) + y.reshape(-1, 2).sum(-1)

    batch = Dim("batch", min=3, max=64)
    return torch.export.export(
        Model(), (torch.randn(4, 6), torch.randn(4, 6)), dynamic_shapes={"x": {0: batch}, "y": {0: batch}}
    )


def test_guards_are_printed_once_per_shape_env_while_it_is_unchanged():
    from torch.export.exported_program import _convert_guards_to_code, _get_shape_env

    program = _program_with_guards()
    graph_module = program.graph_module
    shape_env = _get_shape_env(graph_module)
    printed = []

    def counting(gm):
        printed.append(gm)
        return _convert_guards_to_code(gm)

    ours = _patch_guards_code_printed_once_per_shape_env(counting)
    expected = _convert_guards_to_code(graph_module)
    assert expected  # the program has guards to print
    answers = [ours(graph_module) for _ in range(5)]
    assert all(answer == expected for answer in answers) and len(printed) == 1
    answers[0].append("mutated by a caller")
    assert ours(graph_module) == expected  # each caller gets its own copy
    # A new guard, or a symbol whose first source changes, is printed again, as torch prints it.
    shape_env.guards.append(shape_env.guards[0])
    assert ours(graph_module) == _convert_guards_to_code(graph_module) and len(printed) == 2
    sources = next(v for v in shape_env.var_to_sources.values() if v)
    sources.append(sources[0])
    assert ours(graph_module) == _convert_guards_to_code(graph_module) and len(printed) == 3
    assert ours(torch.fx.symbolic_trace(torch.nn.ReLU())) == []  # no shape env: torch's own answer


def test_a_dynamic_lowering_prints_its_guards_fewer_times_and_writes_the_same_program():
    import torch.export.exported_program as exported_program

    from exporters.executorch.exporter import ExecutorchConfig, ExecutorchExporter

    calls = []
    original = exported_program._convert_guards_to_code

    def counting(gm):
        calls.append(1)
        return original(gm)

    torch.manual_seed(0)
    model, inputs = _Chain().eval(), {"x": torch.randn(2, 8)}
    printed, buffers = {}, {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exported_program, "_convert_guards_to_code", counting)
        for key, without in (("with", frozenset()), ("without", frozenset({GUARDS_PATCH}))):
            calls.clear()
            result = ExecutorchExporter(ExecutorchConfig(dynamic=True, without=without)).export(model, inputs)
            printed[key], buffers[key] = len(calls), result.artifact.buffer
    assert printed["without"] > 2 * BLOCKS  # a program per partition, each printing every guard again
    assert printed["with"] < printed["without"] / 5  # measured: 7 against 67
    assert buffers["with"] == buffers["without"]
