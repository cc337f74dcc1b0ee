"""compare_output / check_shape / the reports: every way an artifact can be wrong is a mismatch, and a
comparison that could not have failed is never a pass. Pure tensors, no export: each test runs in
milliseconds, so mutation testing (scripts/mutation_test.sh) can run them hundreds of times."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
import torch

from exporters.validation import (
    INCONCLUSIVE,
    MISMATCH,
    NONDETERMINISTIC,
    PASS,
    OutputCheck,
    ShapeCheck,
    ValidationError,
    ValidationReport,
    check_shape,
    compare_output,
    leaf_name,
    named_tensors,
)

ATOL, RTOL = 1e-4, 1e-3
EAGER = torch.tensor([[0.5, -1.25, 2.0], [3.5, -0.75, 1.0]])


def compare(actual, expected=EAGER, atol=ATOL, rtol=RTOL) -> OutputCheck:
    return compare_output("logits", expected, actual, atol, rtol)


# ── compare_output: one tensor ──
def test_identical_output_passes_with_its_numbers():
    check = compare(EAGER.clone())
    assert (check.name, check.status, check.max_abs_diff, check.eager_max_abs, check.detail) == (
        "logits", PASS, 0.0, 3.5, "")


def test_numpy_output_of_a_runtime_is_compared_too():
    assert compare(EAGER.numpy().copy()).status == PASS
    assert compare((EAGER + 1).numpy()).status == MISMATCH


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_one_non_finite_artifact_element_is_a_mismatch(value):
    actual = EAGER.clone()
    actual[1, 2] = value
    check = compare(actual)
    assert check.status == MISMATCH
    assert check.detail.startswith("1 of 6 elements off")


def test_all_nan_artifact_is_a_mismatch():
    assert compare(torch.full_like(EAGER, math.nan)).status == MISMATCH


@pytest.mark.parametrize("actual", [EAGER[:1], EAGER.T, EAGER.flatten(), EAGER[None]])
def test_other_shape_is_a_mismatch_even_with_the_same_values(actual):
    check = compare(actual.contiguous())
    assert check.status == MISMATCH
    assert (check.max_abs_diff, check.eager_max_abs) == (None, None)
    assert check.detail == f"shape {list(actual.shape)} != eager [2, 3]" and check.name == "logits"


def test_tolerance_is_per_element_relative_to_that_element():
    """A small element must be within rtol of itself, not of the output's largest element."""
    expected = torch.tensor([1000.0, 0.01])
    inside = torch.tensor([1000.0 + 0.9, 0.01 + 0.9e-5])  # both within atol + rtol * |e|
    assert compare(inside, expected).status == PASS
    outside_small = torch.tensor([1000.0, 0.01 + 2e-4])  # 2e-4 > 1e-4 + 1e-3 * 0.01, far below 1e-3 * 1000
    check = compare(outside_small, expected)
    assert check.status == MISMATCH and check.detail.startswith("1 of 2 elements off")
    outside_large = torch.tensor([1000.0 + 1.2, 0.01])  # 1.2 > 1e-4 + 1e-3 * 1000
    assert compare(outside_large, expected).status == MISMATCH


def test_tolerance_bounds_are_inclusive_and_both_used():
    expected = torch.tensor([2.0, -4.0])
    # atol 0.25 and rtol 0.5 are exact in binary: the allowed differences are 1.25 and 2.25 exactly
    assert compare(torch.tensor([3.25, -6.25]), expected, atol=0.25, rtol=0.5).status == PASS
    assert compare(torch.tensor([3.25 + 2**-10, -4.0]), expected, atol=0.25, rtol=0.5).status == MISMATCH
    assert compare(torch.tensor([2.0, -6.25 - 2**-10]), expected, atol=0.25, rtol=0.5).status == MISMATCH
    assert compare(expected + 0.375, expected, atol=0.25, rtol=0.0).status == MISMATCH  # atol alone
    assert compare(expected + 0.125, expected, atol=0.25, rtol=0.0).status == PASS
    assert compare(expected + 1.5, expected, atol=0.0, rtol=0.5).status == MISMATCH  # 1.5 > 0.5 * |2|
    assert compare(expected + 0.75, expected, atol=0.0, rtol=0.5).status == PASS


def test_mismatch_reports_count_largest_difference_and_tolerances():
    actual = EAGER.clone()
    actual[0, 0] += 0.5
    actual[1, 1] -= 0.25
    check = compare(actual)
    assert (check.name, check.status) == ("logits", MISMATCH)
    assert check.max_abs_diff == pytest.approx(0.5) and check.eager_max_abs == 3.5
    assert check.detail == "2 of 6 elements off (max abs diff 0.5, atol 0.0001, rtol 0.001)"


def test_non_finite_eager_must_be_reproduced_and_nan_is_inconclusive_at_best():
    expected = torch.tensor([1.0, math.inf, math.nan, -math.inf, -2.0])
    same = compare(expected.clone(), expected)
    assert (same.name, same.status, same.detail) == ("logits", INCONCLUSIVE, "eager output holds NaN")
    assert (same.max_abs_diff, same.eager_max_abs) == (0.0, 2.0)  # over the finite elements
    for position, value in [(1, 5.0), (1, -math.inf), (1, math.nan), (2, 0.0), (3, math.inf), (2, math.inf)]:
        actual = expected.clone()
        actual[position] = value
        assert compare(actual, expected).status == MISMATCH, (position, value)
    off_finite = expected.clone()
    off_finite[4] = -1.0
    assert compare(off_finite, expected).status == MISMATCH



def test_masked_logits_with_reproduced_infinities_are_judged_by_their_finite_elements():
    """``-inf`` masked logits: the same infinities plus matching finite logits pass, a finite logit off or an
    infinity moved is a mismatch, and finite elements that could not fail leave it inconclusive."""
    expected = torch.tensor([[0.5, -math.inf, -1.25], [2.0, -math.inf, -math.inf]])
    assert compare(expected.clone(), expected).status == PASS
    moved = expected.clone()
    moved[0, 1], moved[0, 2] = -1.25, -math.inf
    assert compare(moved, expected).status == MISMATCH
    off = expected.clone()
    off[1, 0] = 2.5
    assert compare(off, expected).status == MISMATCH
    for finite, detail in [(0.0, "near zero"), (1.0, "finite elements are constant")]:
        degenerate = torch.tensor([finite, -math.inf, finite, math.inf])
        check = compare(degenerate.clone(), degenerate)
        assert check.status == INCONCLUSIVE and detail in check.detail, check.detail
    only_infinite = torch.tensor([math.inf, -math.inf])
    assert compare(only_infinite.clone(), only_infinite).detail == "eager output holds no finite element"

def test_all_nan_eager_is_inconclusive():
    expected = torch.full((3,), math.nan)
    check = compare(expected.clone(), expected)
    assert (check.status, check.max_abs_diff, check.eager_max_abs) == (INCONCLUSIVE, 0.0, 0.0)


@pytest.mark.parametrize("fill", [0.0, 1.0, -3.0])
def test_constant_eager_output_is_inconclusive_not_a_pass(fill):
    expected = torch.full((2, 4), fill)
    check = compare(expected.clone(), expected)
    assert check.status == INCONCLUSIVE
    assert check.detail == ("eager output is constant" if fill else
                            "eager output is near zero (max |x| = 0 <= atol 0.0001)")
    assert compare(expected + 1, expected).status == MISMATCH  # a wrong answer is still a mismatch


def test_near_zero_eager_output_is_inconclusive_and_names_the_magnitude():
    expected = torch.tensor([5e-5, -8e-5, 1e-5])
    check = compare(torch.zeros(3), expected)  # anything within atol matches it
    assert check.status == INCONCLUSIVE
    assert check.detail == "eager output is near zero (max |x| = 8e-05 <= atol 0.0001)"
    assert compare(expected.clone(), expected, atol=5e-5).status == PASS  # the bound is atol itself


def test_exactly_atol_is_degenerate_but_just_above_is_not():
    # 0.25 is exact in binary: |x| == atol is near zero (any answer within atol of it passes)
    assert compare(torch.tensor([0.25, 0.0]), torch.tensor([0.25, 0.0]), atol=0.25).status == INCONCLUSIVE
    assert compare(torch.tensor([0.5, 0.0]), torch.tensor([0.5, 0.0]), atol=0.25).status == PASS


def test_single_element_outputs_are_compared_and_can_be_degenerate():
    assert compare(torch.tensor([2.0]), torch.tensor([1.0])).status == MISMATCH
    assert compare(torch.tensor([5e-5]), torch.tensor([5e-5])).status == INCONCLUSIVE  # near zero
    assert compare(torch.tensor([math.nan]), torch.tensor([math.nan])).status == INCONCLUSIVE
    assert compare(torch.tensor(3.0), torch.tensor(3.0)).status == PASS  # one element is not "constant"


def test_two_equal_elements_are_constant():
    pair = torch.tensor([3.0, 3.0])
    assert compare(pair.clone(), pair).detail == "eager output is constant"


def test_single_element_and_non_constant_outputs_are_not_degenerate():
    assert compare(torch.tensor([0.7]), torch.tensor([0.7])).status == PASS
    almost_constant = torch.tensor([1.0, 1.0, 1.0, 1.5])
    assert compare(almost_constant.clone(), almost_constant).status == PASS
    last_differs = torch.tensor([2.0, 2.0, 2.0, 2.0, -2.0])
    assert compare(last_differs.clone(), last_differs).status == PASS


def test_integer_and_bool_outputs_compare_exactly_and_are_never_degenerate():
    ids = torch.tensor([[3, 3, 3]])  # constant, but an exact integer answer can be wrong
    assert compare(ids.clone(), ids).status == PASS
    assert compare(torch.tensor([[3, 4, 3]]), ids).status == MISMATCH
    flags = torch.tensor([True, False])
    assert compare(flags.clone(), flags).status == PASS
    assert compare(torch.tensor([True, True]), flags).status == MISMATCH


def test_empty_output_of_the_right_shape_passes_and_wrong_shape_does_not():
    empty = torch.zeros(2, 0)
    assert compare(torch.zeros(2, 0), empty) == OutputCheck("logits", PASS, 0.0, 0.0, "empty")
    assert compare(torch.zeros(0, 2), empty).status == MISMATCH


# ── check_shape: all outputs of one forward ──
def eager_model(outputs):
    return lambda inputs: outputs


def run(outputs):
    return lambda inputs: [o.clone() for o in outputs]


INPUTS = {"input_ids": torch.ones(2, 5, dtype=torch.long), "use_cache": True}
EAGER_OUT = OrderedDict(logits=EAGER, hidden=EAGER * 2)


def test_check_shape_compares_every_output_by_position_and_records_input_shapes():
    shape = check_shape("sample shape", INPUTS, eager_model(EAGER_OUT), run([EAGER, EAGER * 2]), ATOL, RTOL)
    assert shape.label == "sample shape" and shape.input_shapes == {"input_ids": [2, 5]}
    assert [c.name for c in shape.outputs] == ["logits", "hidden"]
    assert shape.status == PASS


def test_swapped_outputs_are_a_mismatch():
    shape = check_shape("s", INPUTS, eager_model(EAGER_OUT), run([EAGER * 2, EAGER]), ATOL, RTOL)
    assert [c.status for c in shape.outputs] == [MISMATCH, MISMATCH]


@pytest.mark.parametrize("count", [0, 1, 3])
def test_other_output_count_is_a_mismatch(count):
    artifact = [EAGER, EAGER * 2, EAGER * 3][:count]
    shape = check_shape("s", INPUTS, eager_model(EAGER_OUT), run(artifact), ATOL, RTOL)
    assert shape.status == MISMATCH
    assert [(c.name, c.detail) for c in shape.outputs] == [
        ("outputs", f"{count} outputs from the artifact, 2 from eager")]


def test_one_bad_output_among_good_ones_fails_the_shape():
    bad = EAGER * 2
    bad[0, 0] = math.nan
    shape = check_shape("s", INPUTS, eager_model(EAGER_OUT), run([EAGER, bad]), ATOL, RTOL)
    assert [c.status for c in shape.outputs] == [PASS, MISMATCH] and shape.status == MISMATCH


def test_nondeterministic_eager_is_reported_and_the_artifact_not_run():
    calls = []
    draws = iter([EAGER, EAGER + 1e-7])

    def noisy(inputs):
        return {"logits": next(draws)}

    def artifact(inputs):
        calls.append(inputs)
        return [EAGER]

    shape = check_shape("s", INPUTS, noisy, artifact, ATOL, RTOL)
    assert shape.status == NONDETERMINISTIC and calls == []
    assert [(c.name, c.detail) for c in shape.outputs] == [
        ("logits", "eager gives different outputs for the same input")]


def test_eager_giving_another_number_of_outputs_the_second_time_is_nondeterministic():
    draws = iter([{"a": EAGER}, {"a": EAGER, "b": EAGER}])
    shape = check_shape("s", INPUTS, lambda inputs: next(draws), run([EAGER]), ATOL, RTOL)
    assert shape.status == NONDETERMINISTIC


def test_eager_nan_in_the_same_place_twice_is_deterministic():
    expected = torch.tensor([1.0, math.nan, 2.0])
    shape = check_shape("s", INPUTS, eager_model({"x": expected}), run([expected]), ATOL, RTOL)
    assert shape.status == INCONCLUSIVE


def test_eager_and_artifact_both_run_on_the_given_inputs():
    def eager(inputs):
        return {"doubled": inputs["input_ids"] * 2.0}

    def artifact(inputs):
        return [inputs["input_ids"] * 2.0]

    shape = check_shape("s", {"input_ids": torch.arange(6.0).reshape(2, 3)}, eager, artifact, ATOL, RTOL)
    assert [(c.name, c.status) for c in shape.outputs] == [("doubled", PASS)]


def test_eager_runs_without_grad():
    seen = []

    def eager(inputs):
        seen.append(torch.is_grad_enabled())
        return {"x": EAGER}

    check_shape("s", INPUTS, eager, run([EAGER]), ATOL, RTOL)
    assert seen == [False, False]


def test_no_output_at_all_is_inconclusive():
    shape = check_shape("s", INPUTS, eager_model({}), run([]), ATOL, RTOL)
    assert shape.outputs == [] and shape.status == INCONCLUSIVE


# ── Reports: the worst status wins, in a fixed order ──
def shape_of(*statuses: str) -> ShapeCheck:
    return ShapeCheck("s", {}, [OutputCheck(f"o{i}", s, 0.1 * i, 1.0, s) for i, s in enumerate(statuses)])


@pytest.mark.parametrize(
    ("statuses", "worst"),
    [
        ((PASS, PASS), PASS),
        ((PASS, INCONCLUSIVE), INCONCLUSIVE),
        ((INCONCLUSIVE, NONDETERMINISTIC), NONDETERMINISTIC),
        ((NONDETERMINISTIC, MISMATCH, INCONCLUSIVE), MISMATCH),
        ((MISMATCH, PASS), MISMATCH),
    ],
)
def test_worst_status_wins_in_a_shape_and_in_a_report(statuses, worst):
    assert shape_of(*statuses).status == worst
    report = ValidationReport(ATOL, RTOL, [shape_of(PASS), shape_of(*statuses)])
    assert report.status == worst and report.passed == (worst == PASS)


def test_report_of_no_shape_is_inconclusive_and_raises():
    report = ValidationReport(ATOL, RTOL)
    assert report.status == INCONCLUSIVE and not report.passed
    with pytest.raises(ValidationError, match=r"^validation inconclusive: no output tensor to compare$"):
        report.raise_for_status()


def test_report_lists_problems_keeps_worst_diff_and_raises_with_them():
    first = ShapeCheck("sample shape", {}, [OutputCheck("logits", PASS, 0.2, 1.0), OutputCheck("k", PASS, None, None)])
    second = ShapeCheck("second shape", {}, [OutputCheck("logits", MISMATCH, 0.5, 1.0, "3 of 4 elements off")])
    report = ValidationReport(ATOL, RTOL, [first, second])
    assert report.max_abs_diff == {"logits": 0.5}
    assert report.problems() == ["second shape: logits: mismatch: 3 of 4 elements off"]
    with pytest.raises(ValidationError, match=r"^validation mismatch: second shape: logits: mismatch: 3 of 4"):
        report.raise_for_status()
    assert ValidationReport(ATOL, RTOL, [first]).max_abs_diff == {"logits": 0.2}
    ValidationReport(ATOL, RTOL, [first]).raise_for_status()  # a pass raises nothing


def test_worst_diff_is_the_maximum_over_shapes_in_either_order():
    small = ShapeCheck("a", {}, [OutputCheck("x", PASS, 0.1, 1.0)])
    large = ShapeCheck("b", {}, [OutputCheck("x", PASS, 0.3, 1.0)])
    assert ValidationReport(ATOL, RTOL, [large, small]).max_abs_diff == {"x": 0.3}
    assert ValidationReport(ATOL, RTOL, [small, large]).max_abs_diff == {"x": 0.3}


def test_raise_names_at_most_five_problems():
    shape = ShapeCheck("s", {}, [OutputCheck(f"o{i}", MISMATCH, 1.0, 1.0, "off") for i in range(7)])
    with pytest.raises(ValidationError) as raised:
        ValidationReport(ATOL, RTOL, [shape]).raise_for_status()
    assert str(raised.value).count("off") == 5 and "o4" in str(raised.value) and "o5" not in str(raised.value)
    assert str(raised.value).startswith("validation mismatch: s: o0: mismatch: off; s: o1: mismatch: off; s: o2")


def test_report_as_dict_is_json_ready():
    report = ValidationReport(ATOL, RTOL, [shape_of(PASS)])
    assert report.as_dict() == {
        "status": PASS, "atol": ATOL, "rtol": RTOL,
        "shapes": [{"label": "s", "input_shapes": {}, "outputs": [
            {"name": "o0", "status": PASS, "max_abs_diff": 0.0, "eager_max_abs": 1.0, "detail": PASS, "atol": None}]}],
    }


# ── Output names ──
def test_named_tensors_flattens_nested_outputs_with_readable_names():
    from transformers.modeling_outputs import CausalLMOutputWithPast

    output = CausalLMOutputWithPast(logits=EAGER, past_key_values=((EAGER, EAGER * 2),))
    names = [name for name, _ in named_tensors(output)]
    assert names == ["logits", "past_key_values.0.0", "past_key_values.0.1"]
    assert [name for name, _ in named_tensors({"a": [EAGER, 3, None]})] == ["a.0"]
    assert named_tensors(EAGER)[0][0] == "output"
    assert leaf_name(()) == "output"
    from torch.utils._pytree import GetAttrKey, MappingKey, SequenceKey

    assert leaf_name((GetAttrKey("layers"), SequenceKey(1), MappingKey("keys"), "raw")) == "layers.1.keys.raw"


def test_numpy_float64_runtime_outputs_against_float32_eager():
    actual = np.asarray(EAGER.numpy(), dtype=np.float64)
    assert compare(actual).status == PASS


# ── eager float32 not accurate enough: a float64 run of eager as the second opinion ──
ILL_EAGER = torch.tensor([212.75, 1000.0, 5.0])  # float32 eager, off float64 at element 0 by 0.65
ILL_FLOAT64 = torch.tensor([213.40, 1000.0, 5.0], dtype=torch.float64)


def _shape_check(actual, reference=ILL_FLOAT64, eager=ILL_EAGER):
    return check_shape("second shape", {"x": torch.zeros(1)}, lambda _: {"y": eager}, lambda _: [actual], 1e-4, 1e-3,
                       run_reference=None if reference is None else (lambda _: {"y": reference}))  # fmt: skip


def test_a_miss_only_where_eager_is_off_float64_and_the_artifact_is_not_is_inconclusive():
    check = _shape_check(torch.tensor([213.45, 1000.0, 5.0]))
    assert check.status == INCONCLUSIVE
    assert "1 of 3 elements off" in check.outputs[0].detail and "not accurate enough" in check.outputs[0].detail


@pytest.mark.parametrize(("actual", "why"), [
    (torch.tensor([213.45, 1000.0, 5.1]), "a miss where eager agrees with float64: the artifact is wrong there"),
    (torch.tensor([150.0, 1000.0, 5.0]), "the artifact misses float64 too"),
])  # fmt: skip
def test_a_miss_eager_float64_does_not_explain_stays_a_mismatch(actual, why):
    assert _shape_check(actual).status == MISMATCH, why


def test_a_standing_mismatch_says_how_far_eager_and_the_artifact_each_are_from_float64():
    check = _shape_check(torch.tensor([150.0, 1000.0, 5.0]))
    assert check.status == MISMATCH
    assert check.outputs[0].detail.endswith("; from eager in float64: float32 eager 0.65, the artifact 63.4 at most")


def test_without_a_float64_run_or_when_it_fails_a_mismatch_stays_one():
    assert _shape_check(torch.tensor([213.45, 1000.0, 5.0]), reference=None).status == MISMATCH

    def fails(_):
        raise RuntimeError("expected scalar type Float but found Double")

    artifact = torch.tensor([213.45, 1000.0, 5.0])
    check = check_shape("s", {"x": torch.zeros(1)}, lambda _: {"y": ILL_EAGER}, lambda _: [artifact], 1e-4, 1e-3,
                        run_reference=fails)  # fmt: skip
    assert check.status == MISMATCH


def test_the_float64_run_is_made_only_for_a_mismatch():
    calls = []
    check = check_shape("s", {"x": torch.zeros(1)}, lambda _: {"y": ILL_EAGER}, lambda _: [ILL_EAGER], 1e-4, 1e-3,
                        run_reference=lambda _: calls.append(1) or {"y": ILL_FLOAT64})  # fmt: skip
    assert check.status == PASS and calls == []
