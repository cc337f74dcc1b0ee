"""The token loop of a quantized generation bundle is held to the rule of every fidelity comparison.

Each step's logits may differ from the components' PyTorch references by max(one step of their 8-bit grid,
``FLIP_MARGIN`` x their flip envelope), the envelope measured on that loop (exporters.generation.check). The
"backend" here is the references' own loop run with other one-ulp draws than the envelope's (a kernel whose
float rounding differs, as XNNPACK's does), or with every quantized activation one step off (a zero-point
bug): each test knows the answer it must get. The references are torchao's quantized modules, as an
ExecuTorch ``8da4w`` export has them; no lowering is needed to hold the loop to the rule.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from test_quantize import _RequantizedStack

from bot.run.generation import build_generation_model
from exporters.bundle.decoding import EagerGeneration, module_components
from exporters.executorch.quantize import quantize_with_torchao
from exporters.generation.check import check_quantized_generation, reference_generate
from exporters.generation.components import (
    GenerationExportConfig,
    cache_layout,
    plan_components,
    sample_prompts,
)
from exporters.quantize import QuantizeConfig
from exporters.quantize.fidelity import (
    FLIP_MARGIN,
    FLIP_SEEDS,
    flip_envelope,
    nudged,
    nudged_run,
    output_step,
)
from exporters.utils import installed_patches
from exporters.validation import named_tensors

OTHER_ROUNDING = 1000  # a draw the envelope never makes: the backend's own rounding


@pytest.fixture(scope="module")
def deep_llama():
    """A random Llama deep and wide enough for flips to compound past two logits steps (12 layers, hidden
    128), its generation components quantized ``8da4w`` by torchao under the export's own patches."""
    model, _ = build_generation_model("LlamaForCausalLM", 0, overrides={"num_hidden_layers": 12, "hidden_size": 128,
                                                                      "intermediate_size": 256})
    prompts = sample_prompts(model, batch=2, prompt_length=8, seed=0)
    config = GenerationExportConfig()
    plans = plan_components(model, prompts, config, "executorch")
    layout = cache_layout(model, plans, config, "executorch")
    with installed_patches("executorch"):
        quantized = {plan.name: quantize_with_torchao(plan.module, QuantizeConfig("8da4w")) for plan in plans}
    references = {name: (q.reference, q.requantized) for name, q in quantized.items()}
    return prompts, plans, layout, references


class Backend(EagerGeneration):
    """The references' own decoding loop, each component call under ``around()`` (another rounding, or a bug)."""

    def __init__(self, plans, layout, references, around):
        super().__init__(plans, layout)
        plain = module_components({name: module for name, (module, _layers) in references.items()})

        def under(component):
            def run(**inputs):
                with around():
                    return component(**inputs)
            return run

        self.components = {name: under(component) for name, component in plain.items()}


def _one_step_off(references):
    """Every quantized layer's input moved by one step of its per-token 8-bit grid: its codes all one off, as
    a zero point off by one makes them."""
    def shift(_module, args):
        x = args[0]
        return (x + (x.amax(-1, keepdim=True) - x.amin(-1, keepdim=True)) / 255, *args[1:])

    class Shifted:
        def __enter__(self):
            self.handles = [module.get_submodule(layer).register_forward_pre_hook(shift)
                            for module, layers in references.values() for layer in layers]

        def __exit__(self, *_exc):
            for handle in self.handles:
                handle.remove()

    return Shifted()


def test_logits_rounded_otherwise_past_two_steps_pass_within_the_loops_own_flip_envelope(deep_llama):
    prompts, plans, layout, references = deep_llama
    modules = {name: module for name, (module, _layers) in references.items()}
    tokens, logits, _ = reference_generate(modules, layout, prompts, 16)
    backend = Backend(plans, layout, references, lambda: nudged(list(references.values()), OTHER_ROUNDING))
    out = backend.generate(**prompts, max_new_tokens=16, min_new_tokens=16, output_logits=True)
    off = [float((a - b).abs().max()) / output_step(b) for a, b in zip(out.logits, logits)]
    assert torch.equal(out.tokens, tokens) and max(off) > 2.5  # past the fixed 2 steps the loop used to allow
    check = check_quantized_generation(backend, prompts, 16, references)
    assert check.status == "pass", check.detail
    allowed = [max(1.0, 2 * envelope) for envelope in check.envelope_steps]
    assert all(steps <= limit for steps, limit in zip(off, allowed))
    assert len(check.envelope_steps) == 16 and min(check.envelope_steps) > 0.5  # measured at every step


def test_a_zero_point_bug_in_the_loop_is_caught_at_the_first_step_far_past_the_envelope(deep_llama):
    prompts, plans, layout, references = deep_llama
    check = check_quantized_generation(Backend(plans, layout, references, lambda: _one_step_off(references)),
                                       prompts, 16, references)
    assert check.status == "mismatch", check.detail
    assert check.first_mismatch["step"] == 0
    # Its logits are past what the loop allows at any step, so the rule would catch it were the tokens equal.
    assert check.max_logits_diff > FLIP_MARGIN * max(check.envelope_steps) * check.logits_steps[0]


def test_a_flip_too_rare_for_three_draws_is_drawn_until_seen():
    """16 activations of 64 through 16 run-time quantized layers (a decode step's few tokens): the first three
    one-ulp draws flip no code, later ones do, and the envelope says so instead of 0."""
    reference = _RequantizedStack().eval()
    layers = [f"layers.{i}" for i in range(16)]
    inputs = {"x": torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(6))}
    with torch.no_grad():
        expected = reference(**inputs)
    step = output_step(expected)
    assert all(float((nudged_run(reference, layers, inputs, seed) - expected).abs().max()) < 0.01 * step
               for seed in FLIP_SEEDS)
    envelope = flip_envelope(lambda: named_tensors(reference(**inputs)), [(reference, layers)])
    assert envelope["output"] > 0.1 * step


def test_greedy_tokens_that_leave_the_references_at_a_near_tie_pass_compared_teacher_forced(deep_llama):
    """The bundle's decode logits moved by less than one step where the references' top two are closest: its own
    greedy path then leaves theirs, and every logit is still within the rule on the references' tokens."""
    prompts, plans, layout, references = deep_llama
    modules = {name: module for name, (module, _layers) in references.items()}
    _tokens, logits, _ = reference_generate(modules, layout, prompts, 16)
    closest = min((float(top[0] - top[1]), step, row) for step in range(1, 15)
                  for row, top in enumerate(logits[step].topk(2, -1).values))
    gap, step, row = closest
    second = int(logits[step][row].topk(2).indices[1])
    assert 1.01 * gap < output_step(logits[step])
    backend = Backend(plans, layout, references, contextlib.nullcontext)
    decode, calls = backend.components["decode"], []

    def tie_broken(**inputs):
        out = dict(decode(**inputs))
        calls.append(1)
        if len(calls) % 15 == step:  # the step-th decode call of a 16-token generation (15 decode calls)
            out["logits"] = out["logits"].clone()
            out["logits"][row, second] += 1.01 * gap
        return out

    backend.components["decode"] = tie_broken
    check = check_quantized_generation(backend, prompts, 16, references)
    assert check.exported_tokens[row][step] == second != check.eager_tokens[row][step]
    assert check.status == "pass", check.detail
    assert f"at step {step}, row {row}" in check.detail and "near-tie" in check.detail


def test_pt2e_static_int8_reference_names_every_activation_quantize_for_the_envelope():
    """PT2E's converted program rounds at each activation it quantizes; its reference makes each such op a module
    (the same computation, bit for bit) so that the flip envelope can nudge its input."""
    from transformers import BertConfig, BertModel

    from exporters.executorch.quantize import quantize_with_pt2e

    torch.manual_seed(0)
    model = BertModel(BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                 vocab_size=100)).eval()
    inputs = {"input_ids": torch.randint(0, 100, (1, 16), generator=torch.Generator().manual_seed(1))}
    program = torch.export.export(model, args=(), kwargs=inputs, strict=False)
    converted, record = quantize_with_pt2e(program, inputs, QuantizeConfig("int8"), lambda module: module)
    assert len(record.requantized) >= 20 and all(name.startswith("activation_quantize_") for name in record.requantized)
    with torch.no_grad():
        assert all(torch.equal(a, b) for (_, a), (_, b) in
                   zip(named_tensors(record.reference(**inputs)), named_tensors(converted(**inputs)), strict=True))
    envelope = flip_envelope(lambda: named_tensors(record.reference(**inputs)), [(record.reference, record.requantized)])
    assert envelope  # measured: static int8 is no longer held to one step without looking
