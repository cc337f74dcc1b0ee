"""Stage 3 of the ExecuTorch exporter, continued: speed (and memory) patches for ExecuTorch's lowering (``to_backend``).

Registered with ``register_patch("executorch", ...)`` like the patches in ``exporters.executorch.exporter``, which
imports this module, so every ExecuTorch export installs them. They change how fast (or in how much memory) the
lowering runs, never what it produces: the serialized ``.pte`` is byte-identical with and without them
(tests/test_executorch_lowering.py compares the bytes; ``--without NAME`` turns one off). So they record no hits
(``counts_itself`` and never ``record_hit``): ``workarounds_fired`` lists what an export's result depends on, and
no result depends on these. A hit would also mislead the audit: a re-run without a speed patch always passes,
which is the evidence it reads as "no longer needed"; with no export to re-run it answers "nothing to re-run"
instead, and the supersession probes do not spend re-runs disabling them. They are registered ``speed=True``
as well, so that even a re-run passing without one is answered "a human decides", never "removable".

Where the lowering's time goes (cProfile of ``ExecutorchExporter.export``, static XNNPACK, tiny models, this
machine, 2026-12-01; cumulative seconds under cProfile, share of the export):

* LlamaModel (13 XNNPACK partitions), 27 s: XNNPACK ``preprocess`` 13.3 s (48 %: its ~20 passes re-trace each
  partition; 6.6 s of it builds the SDPA and bilinear pattern graphs once per process),
  ``_gen_edge_manager_for_partitioners`` 10.2 s (37 %, ``run_decompositions`` 9.2 s), ``legalize_graph`` 0.5 s (2 %).
* FunnelModel (63 partitions), 212 s: ``preprocess`` 82 s (38 %), ``_gen_edge_manager_for_partitioners`` 75 s
  (34 %, ``run_decompositions`` 38 s), ``legalize_graph`` 21.5 s (10 %: 8.7 s copying 119,584 nodes, the rest
  recompiling the whole module and its fused submodules 63 times), the group partitioner's
  ``_can_merge_partitions`` 7.8 s (4 %), ``to_executorch`` 17 s (8 %).

Across both, ``copy.deepcopy`` of node provenance (``NodeSource.__init__``, every re-traced node) takes 3.8 s
(Llama, 14 %) and 30 s (Funnel, 14 %). ``legalize_graph`` grows with partitions x graph size, so it dominates the
graphs XNNPACK cuts into hundreds of partitions (Qwen3-Next: 447 partitions of a 5,091-node graph, 0.42 s per call,
up to 187 s; sweeps/causes.toml, ``executorch-xnnpack-many-partitions-slow-lowering``). Five patches below:
``legalize_graph`` in place, the group partitioner's merge check and its dependency closures (as bitsets: memory,
not time, quadratic in the graph's nodes), the provenance copy, and the shape guards printed once per shape
environment rather than once per program built over it (dynamic exports). Not patched: the XNNPACK
passes re-tracing every partition and ``run_decompositions`` (ExecuTorch's pipeline itself, no cheaper equivalent
that is visibly the same). ``benchmarks/bench_executorch_lowering.py`` measures the patches' effect.
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
import copy
import operator
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from exporters.utils import register_patch

__all__ = ["DependencyBits", "ReachableNodes", "legalized_order"]

# The ops torch.fx's ``legalize_graph`` schedules first once they are ready (runtime assertions and the symbolic
# arithmetic they read), in torch 2.13's torch/fx/passes/tools_common.py:278-296. The order computed here must be
# the one ``legalize_graph`` computes; tests/test_executorch_lowering.py compares the two.
_PRIORITIZED_OPS = (
    operator.add, operator.mul, operator.sub, operator.floordiv, operator.truediv, operator.mod,
    operator.le, operator.lt, operator.ge, operator.gt, operator.eq, operator.ne,
    torch.ops.aten.sym_constrain_range.default, torch.ops.aten.sym_constrain_range_for_size.default,
    torch.ops.aten._assert_async.msg, torch.ops.aten.scalar_tensor.default, torch.ops.aten._assert_scalar.default,
)  # fmt: skip


def legalized_order(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The nodes of ``graph`` in the order ``legalize_graph`` gives them: Kahn's algorithm over ``node.users``, a FIFO
    queue seeded in graph order, ready assertion/symbolic ops to the front. Raises on a cycle, as it does."""
    nodes = list(graph.nodes)
    waiting = dict.fromkeys(nodes, 0)
    for node in nodes:
        for user in node.users:
            waiting[user] += 1
    queue = collections.deque(node for node in nodes if waiting[node] == 0)
    order = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for user in node.users:
            waiting[user] -= 1
            if waiting[user] == 0:
                if user.op == "call_function" and user.target in _PRIORITIZED_OPS:
                    queue.appendleft(user)
                else:
                    queue.append(user)
    if len(order) < len(nodes):
        raise RuntimeError(f"Input graph has cycles, unable to add {[node for node in waiting if waiting[node] != 0]}")
    return order


def _legalize_in_place(graph_module: torch.fx.GraphModule) -> bool:
    """Give ``graph_module`` the state ``legalize_graph`` leaves it in, moving its nodes instead of copying them.

    ``legalize_graph`` builds a new graph from ``node_copy`` of every node in :func:`legalized_order`. What that
    changes besides the order is done here too: each node's ``users`` are in the new order (the order a copy
    registers them, which decides the next sort), each node gets a shallow copy of its ``meta`` (as ``node_copy``
    does), the name table and find-nodes table are rebuilt from the sorted nodes alone, and the graph's tracer
    fields are reset as on a fresh ``Graph``. Returns False, having changed nothing, if a name would not survive
    a fresh name table (then the caller runs the original).
    """
    from torch.fx.graph import _FindNodesLookupTable, _Namespace

    graph = graph_module.graph
    order = legalized_order(graph)
    names = _Namespace()
    for node in order:
        if names.create_name(node.name, None) != node.name:
            return False
        names.associate_name_with_obj(node.name, node)
    position = {node: index for index, node in enumerate(order)}
    lookup = _FindNodesLookupTable()
    for node in order:
        graph._root.prepend(node)  # to the end: after the loop the list is ``order``
        lookup.insert(node)
        node.meta = copy.copy(node.meta)
        if len(node.users) > 1:
            users = sorted(node.users, key=position.__getitem__)
            node.users.clear()
            node.users.update(dict.fromkeys(users))
    graph._graph_namespace = names
    graph._find_nodes_lookup_table = lookup
    graph._tracer_cls, graph._tracer_extras, graph._co_fields, graph._used_names = None, None, {}, {}
    return True


# Graph modules that ``_create_partitions_in_graph_module`` is partitioning: id -> [module, code is stale].
_DEFERRED_RECOMPILES: dict[int, list[Any]] = {}


@contextlib.contextmanager
def _recompiling_once(graph_module: torch.fx.GraphModule) -> Iterator[None]:
    if id(graph_module) in _DEFERRED_RECOMPILES:  # already deferred by an outer call: it recompiles
        yield
        return
    entry = _DEFERRED_RECOMPILES[id(graph_module)] = [graph_module, False]
    try:
        yield
    finally:
        del _DEFERRED_RECOMPILES[id(graph_module)]
        if entry[1]:
            graph_module.recompile()


@register_patch(
    "executorch",
    "executorch.exir.lowered_backend_module.legalize_graph",
    "executorch.exir.backend.backend_api._create_partitions_in_graph_module",
    upstream="https://github.com/pytorch/executorch/issues/6191",
    dependency="executorch",
    counts_itself=True,
    speed=True,
)
def _patch_partition_fusing_sorts_in_place(original: Callable) -> Callable:
    """Sort the graph in place, and recompile it once, when ``to_backend`` fuses each partition into a submodule.

    ``create_submodule_from_nodes`` (executorch/exir/lowered_backend_module.py:905-906, its TODO T153794167)
    calls torch.fx's ``legalize_graph`` on the whole graph for every partition: a ``node_copy`` of every node
    into a new graph, then ``GraphModule.recompile`` of the module and every fused submodule so far. Lowering
    thus costs partitions x graph size: FunnelModel's 63 XNNPACK partitions spend 21.5 s of 212 s in it
    (cProfile), and a 447-partition Qwen3-Next graph of 5,091 nodes ~0.42 s per partition. Here the same
    order (``legalized_order``) is applied by moving the existing nodes (``_legalize_in_place``), and inside
    ``_create_partitions_in_graph_module`` (backend_api.py:448, which fuses every partition of one graph
    module and runs none of its code in between) the recompile is done once, when it returns. Everything the
    lowering serializes is unchanged: the ``.pte`` bytes are identical with and without this patch. Related
    upstream: pytorch/executorch#6191 (XNNPACK partitioning hangs on a large graph); the ready-to-file issue
    for this cost is docs/upstream-drafts/_patch_partition_fusing_sorts_in_place.md.
    """
    if original.__name__ == "_create_partitions_in_graph_module":

        def create_partitions(tagged_graph_module: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
            with _recompiling_once(tagged_graph_module):
                return original(tagged_graph_module, *args, **kwargs)

        return create_partitions

    def legalize_graph(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
        if not _legalize_in_place(graph_module):
            return original(graph_module)
        deferred = _DEFERRED_RECOMPILES.get(id(graph_module))
        if deferred is not None and deferred[0] is graph_module:
            deferred[1] = True
        else:
            graph_module.recompile()
        return graph_module

    return legalize_graph


@register_patch(
    "executorch",
    "executorch.exir.backend.canonical_partitioners.group_partitioner.GroupBasedPartitioner._can_merge_partitions",
    upstream="https://github.com/pytorch/executorch/issues/6191",
    dependency="executorch",
    counts_itself=True,
    speed=True,
)
def _patch_merge_check_intersects_sets(original: Callable) -> Callable:
    """Ask the XNNPACK group partitioner's cycle check one set question per external user, not one per node.

    ``GroupBasedPartitioner._can_merge_partitions`` (executorch/exir/backend/canonical_partitioners/
    group_partitioner.py:98-135) refuses a merge of two partitions when a node outside both that uses one of
    them reaches back into them: for every external use (one entry per using edge, so a node used by ten
    partition nodes is checked ten times) it walks that node's whole downstream set in a Python generator,
    ``any(n in combined_nodes for n in downstream_nodes)``. It runs for every pair of partitions the merge loop tries
    (52,940 times for FunnelModel: 7.8 s of its 212 s under cProfile, 3.9 s of it that generator). Here each
    external node is checked once, in the same order, with ``set.isdisjoint`` on the same two sets (a C loop
    over the smaller one), then the same final ``validate_partition``: the same answer for every pair, so the
    same partitions. Related upstream:
    pytorch/executorch#6191 (XNNPACK partitioning hangs on a large graph); the ready-to-file issue is
    docs/upstream-drafts/_patch_partition_fusing_sorts_in_place.md.
    """
    from torch.fx.passes.utils.fuser_utils import validate_partition

    def can_merge_partitions(self: Any, p1: int, p2: int, partitions_by_id: dict[int, Any]) -> bool:
        # Built as the original builds it, so that the set iterates in the same order.
        combined = set(partitions_by_id[p1].nodes.keys()).union(set(partitions_by_id[p2].nodes.keys()))
        # Each external user once, in the original's order, so that the first refusal comes at the same node.
        external = dict.fromkeys(user for node in combined for user in node.users if user not in combined)
        if any(_reaches_into(self.dependency_viewer, combined, external)):
            return False
        return validate_partition(list(combined))

    return can_merge_partitions


def _reaches_into(viewer: Any, nodes: set[torch.fx.Node], users: Iterable[torch.fx.Node]) -> Iterator[bool]:
    """Whether each of ``users`` reaches one of ``nodes``: one AND of bitsets when ``viewer`` keeps them
    (``_patch_dependency_closures_as_bitsets``), else a set intersection (ExecuTorch's own viewer)."""
    if isinstance(viewer, DependencyBits):
        bits = viewer.bits_of(nodes)
        return (bool(viewer.downstream_bits(user) & bits) for user in users)
    return (not nodes.isdisjoint(viewer.downstreams_of(user)) for user in users)


class DependencyBits:
    """Each node's transitive users and inputs as bitsets over the graph's node order, read like the sets of
    ExecuTorch's ``_DependencyViewer`` (group_partitioner.py:18-38), which it stands in for.

    The original keeps, for every node, a Python set of every node downstream and another of every node upstream:
    about N**2 set entries for an N-node graph, which is what ran BailingHybridModel's and KimiLinearForCausalLM's
    lowerings out of a 4 GiB cap (``MemoryError`` at group_partitioner.py:32, sweeps/causes.toml). An int with one
    bit per node holds the same closure in N/8 bytes. The closures are built in the original's order, reading a
    neighbour's closure as it stands at that point (so an unsorted graph gets the same, partial, answers); the
    upstream ones, which the partitioner never reads, only when first asked for.
    """

    def __init__(self, graph_module: torch.fx.GraphModule) -> None:
        self._nodes = list(graph_module.graph.nodes)
        self._index = {node: index for index, node in enumerate(self._nodes)}
        self._downstream = self._closures(reversed(self._nodes), lambda node: node.users)
        self._upstream: dict[torch.fx.Node, int] | None = None

    def _closures(self, nodes: Iterable[torch.fx.Node], neighbours: Callable) -> dict[torch.fx.Node, int]:
        closures: dict[torch.fx.Node, int] = {}
        for node in nodes:
            bits = 0
            for neighbour in neighbours(node):
                bits |= (1 << self._index[neighbour]) | closures.get(neighbour, 0)
            closures[node] = bits
        return closures

    def bits_of(self, nodes: Iterable[torch.fx.Node]) -> int:
        """The bitset of ``nodes``; nodes the graph did not have when this was built are in no closure, so left out."""
        bits = 0
        for node in nodes:
            if node in self._index:
                bits |= 1 << self._index[node]
        return bits

    def downstream_bits(self, node: torch.fx.Node) -> int:
        return self._downstream.get(node, 0)

    def downstreams_of(self, node: torch.fx.Node) -> ReachableNodes:
        return ReachableNodes(self.downstream_bits(node), self._nodes, self._index)

    def upstreams_of(self, node: torch.fx.Node) -> ReachableNodes:
        if self._upstream is None:
            self._upstream = self._closures(self._nodes, lambda node: node.all_input_nodes)
        return ReachableNodes(self._upstream.get(node, 0), self._nodes, self._index)


class ReachableNodes(collections.abc.Set):
    """A read-only set of nodes backed by a :class:`DependencyBits` bitset (iterated in graph order)."""

    __slots__ = ("_bits", "_index", "_nodes")

    def __init__(self, bits: int, nodes: list[torch.fx.Node], index: dict[torch.fx.Node, int]) -> None:
        self._bits, self._nodes, self._index = bits, nodes, index

    def __contains__(self, node: object) -> bool:
        position = self._index.get(node)  # type: ignore[call-overload]
        return position is not None and bool(self._bits >> position & 1)

    def __iter__(self) -> Iterator[torch.fx.Node]:
        lowest_first = bin(self._bits)[:1:-1]
        return (self._nodes[position] for position, bit in enumerate(lowest_first) if bit == "1")

    def __len__(self) -> int:
        return self._bits.bit_count()


@register_patch(
    "executorch",
    "executorch.exir.backend.canonical_partitioners.group_partitioner._DependencyViewer",
    upstream="https://github.com/pytorch/executorch/issues/6191",
    dependency="executorch",
    counts_itself=True,
    speed=True,
)
def _patch_dependency_closures_as_bitsets(original: type) -> type:
    """Let the XNNPACK group partitioner keep its dependency closures as bitsets (:class:`DependencyBits`).

    ``GroupBasedPartitioner.__init__`` builds a ``_DependencyViewer`` of the whole edge graph, whose two dicts of
    sets hold about N**2 node references: BailingHybridModel's graph filled the sweep's 4 GiB cap with them, and
    KimiLinearForCausalLM's dynamic one too. The bitsets answer every ``downstreams_of`` / ``upstreams_of`` with
    the same nodes, and ``_patch_merge_check_intersects_sets`` asks them with one AND per external user, so the
    partitions, and the ``.pte`` bytes, are the same. Upstream: the related pytorch/executorch#6191 (XNNPACK
    partitioning of a large graph); torch's own partitioner dropped its upstream closures for the same quadratic
    cost in pytorch/pytorch#136608 (closed there, merged in another form); the ready-to-file issue is
    docs/upstream-drafts/_patch_partition_fusing_sorts_in_place.md.
    """
    return DependencyBits


@register_patch(
    "executorch",
    "torch.export.exported_program._convert_guards_to_code",
    dependency="torch",
    counts_itself=True,
    speed=True,
)
def _patch_guards_code_printed_once_per_shape_env(original: Callable) -> Callable:
    """Print a shape environment's guards once, not once for every program built over it.

    ``ExportedProgram.__init__`` (torch/export/exported_program.py:1141) ends with ``_convert_guards_to_code``
    (:1783), which prints every guard of the graph's ``ShapeEnv`` as Python with sympy. The lowering builds an
    ``ExportedProgram`` for every XNNPACK partition (``create_exported_program_from_submodule``) and for every
    pass that transforms one, and all of them share the exported program's ``ShapeEnv``: a dynamic
    Qwen3.5 text model has 1,349 guards (0.11 s CPU to print), so the work grows as partitions x passes x
    guards. It is where 8 of the 21 ExecuTorch dynamic sweep timeouts had their stack dumped at 540 s
    (sweeps/causes.toml, executorch-dynamic-lowering-over-600s). Here the printed lines are kept per
    ``ShapeEnv`` and reused while what they are printed from is unchanged: the guard list (only ever appended
    to) and every symbol's sources (the printer names a symbol by its first source; local symbols are those
    without a constant source). Each caller gets its own copy of the same lines. The ready-to-file issue is
    docs/upstream-drafts/_patch_guards_code_printed_once_per_shape_env.md.
    """
    printed: weakref.WeakKeyDictionary[Any, tuple[tuple, list[str]]] = weakref.WeakKeyDictionary()

    def convert_guards_to_code(graph_module: torch.fx.GraphModule) -> list[str]:
        from torch.export.exported_program import _get_shape_env

        shape_env = _get_shape_env(graph_module)
        if shape_env is None:
            return original(graph_module)
        printed_from = (
            len(shape_env.guards),
            tuple((symbol, tuple(map(id, sources))) for symbol, sources in shape_env.var_to_sources.items()),
        )
        kept = printed.get(shape_env)
        if kept is None or kept[0] != printed_from:
            kept = printed[shape_env] = (printed_from, original(graph_module))
        return list(kept[1])

    return convert_guards_to_code


@register_patch(
    "executorch", "torch.fx.traceback.NodeSource.__init__",
    upstream="https://github.com/pytorch/pytorch/pull/193051", dependency="torch", counts_itself=True, speed=True,
)  # fmt: skip
def _patch_node_source_shares_its_history(original: Callable) -> Callable:
    """Record a node's provenance (``meta["from_node"]``) by sharing its history instead of deep-copying it.

    Every pass that re-traces a graph under ``preserve_node_meta`` (ExecuTorch's ``ExportPass`` and the ~20
    XNNPACK passes run on every partition, ``run_decompositions``, unlifting) gives each new node
    ``NodeSource(old_node)``, and ``NodeSource.__init__`` (torch/fx/traceback.py:109-138) deep-copies the old node's
    whole ``from_node`` tree into it. The tree gains a level per pass, so each copy costs more than the last:
    74,860 of them took 30 s of FunnelModel's 212 s lowering under cProfile (LlamaModel: 3.8 s of 27 s). Nothing
    changes a ``NodeSource`` once made (its only writers are this constructor and ``from_dict``, which builds a
    new one), so the tree can share the old node's entries: here the new source gets a new list holding the same
    entries. The list is still its own, because the graph transform observer appends to a node's ``from_node``
    list in place (torch/fx/passes/graph_transform_observer.py:198). Same values everywhere (``to_dict``, debug
    handles, the ``.pte`` bytes), less copying. Upstream: pytorch/pytorch#193051 proposes the same change (a
    new outer list, shared entries; an ExecuTorch export 15 % faster by its author's account) and is closed as
    stored here; an earlier attempt, #175853, was closed after a review calling a shallow copy unsafe.
    """

    def __init__(self: Any, node: torch.fx.Node | None, pass_name: str = "", action: Any = None) -> None:
        original(self, None, pass_name, action)
        if node:
            self.node_info = self.NodeInfo(name=node.name, target=str(node.target), graph_id=id(node.graph))
            history = node.meta.get("from_node", [])
            self.from_node = list(history) if isinstance(history, list) else copy.deepcopy(history)

    return __init__
