"""Patches on torch.export itself, installed by stage 2 of ``DynamoExporter.export_program`` and so by every
backend (ONNX and ExecuTorch export through it): ``installed_patches("dynamo", without)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exporters.utils import record_hit, register_patch

__all__: list[str] = []


@register_patch(
    "dynamo", "torch.fx.experimental.symbolic_shapes.DimConstraints.solve", dependency="torch", counts_itself=True,
)  # fmt: skip
def _patch_dim_constraint_solver_gives_up(original: Callable) -> Callable:
    """Let an export whose shape guards sympy cannot solve end as torch.export would without the solver.

    After tracing, non-strict torch.export produces the program's guards and then always runs
    ``DimConstraints.solve`` (torch/_export/non_strict_utils.py, ``produce_guards_and_solve_constraints``),
    which only simplifies the guards into *suggested fixes* for its error message. With floor divisions in a
    guard, sympy's ``solve_univariate_inequality`` raises ``NotImplementedError`` and the export dies with
    sympy's error although nothing was violated: XcodecModel (an audio length a whole number of 320-sample
    hops: ``x - 320*(((x/40)//8)) <= 0``) and Sam2HieraDetModel (the image grid filling its windows). Here the
    solver's ``NotImplementedError`` ends the suggestions instead: the guards were already produced, so a
    violated named ``Dim`` still raises its constraint violation (only its suggested fix is lost), and a
    ``Dim.AUTO`` dim keeps them as the program's input guards (``_guards_fn``), which the second-shape
    inputs must pass. pytorch/pytorch#131897 (closed) reported this error for ``TruncToInt`` guards and was
    answered with "ignore solving guards with these complicated functions"; floor divisions still reach the
    solver in torch 2.13. Draft with reproducer: docs/upstream-drafts/_patch_dim_constraint_solver_gives_up.md.
    """

    def solve(self: Any) -> None:
        try:
            original(self)
        except NotImplementedError as error:
            if "solve_univariate_inequality" not in str(error):
                raise
            record_hit("_patch_dim_constraint_solver_gives_up")

    return solve
