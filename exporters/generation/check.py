"""Token-for-token comparison of ``generate()`` on a bundle with eager ``generate(do_sample=False)``.

Verdicts, in the vocabulary of ``exporters.validation``:

* ``pass``: every new token of every row equals eager's, and every step's logits are within tolerance;
* ``mismatch``: the first step and row where the tokens (or logits) differ are named;
* ``inconclusive``: the comparison could not have failed usefully — eager's greedy path is one token
  repeated for every row (a degenerate random model: a broken cache would give the same tokens), or
  eager stopped before ``max_new_tokens``.

Logits tolerance: every element within ``atol 1e-3 + rtol 1e-3 * |eager|``, or, where it is not, within the
model's own float32 noise at that step: ``2 x`` the largest difference, on that step and row, between eager's
float32 logits and a float64 copy of the model teacher-forced on eager's tokens. Two float32 computations of
the same function that differ only in operation order (fused kernels, another reduction order) are each
about that far from the exact value, so they may be up to twice that far from each other; a well-conditioned
model's float64 difference is ~1e-6 and changes nothing, and an ill-conditioned one (T5 at the init scale
that makes its greedy path non-degenerate: eager float32 is up to 0.3 off float64) is not failed for
rounding eager itself does. The float64 copy is built only when the plain tolerance fails; the tokens must
be equal either way.

Eager runs transformers' generic ``GenerationMixin.generate`` with a plain greedy ``GenerationConfig``
(the same EOS, pad and decoder-start tokens; no logits processors), ``min_new_tokens`` equal to
``max_new_tokens`` on both sides so that a random model's early EOS cannot shorten the comparison. Each
eager call builds its own cache, so eager is compared with a fresh run, never with a cache another run has
updated in place.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from exporters.generation.components import _accepts
from exporters.quantize.fidelity import FLIP_MARGIN, flip_envelope, flip_tolerance, output_step
from exporters.quantize.quality import TokenQuality, compare_tokens, token_meaning
from exporters.validation import INCONCLUSIVE, MISMATCH, PASS

__all__ = ["GenerationCheck", "check_generation", "check_quantized_generation", "degenerate", "eager_generate",
           "float32_noise", "reference_generate", "token_quality"]

LOGITS_ATOL = 1e-3
LOGITS_RTOL = 1e-3
PROMPT_INPUTS = ("input_ids", "attention_mask", "input_features", "pixel_values")  # what eager generate() takes
NOISE_FACTOR = 2.0  # two float32 computations, each about eager's float64 distance from the exact value


@dataclass
class GenerationCheck:
    """The verdict of one token-for-token comparison, with what was compared and how fast each side ran."""

    status: str
    detail: str
    new_tokens: int
    batch: int
    prompt_lengths: list[int]
    first_mismatch: dict[str, int] | None = None
    max_logits_diff: float | None = None
    float32_noise: list[float] | None = None  # per step: max |eager float32 - float64| (when it was needed)
    # A quantized bundle, per step: its logits' 8-bit step, and their flip envelope in those steps
    # (exporters.quantize.fidelity: each step may differ by max(1, FLIP_MARGIN x envelope) steps).
    logits_steps: list[float] | None = None
    envelope_steps: list[float] | None = None
    steps_within_noise: list[int] = field(default_factory=list)
    logits_atol: float = LOGITS_ATOL
    logits_rtol: float = LOGITS_RTOL
    eager_tokens: list[list[int]] = field(default_factory=list)
    exported_tokens: list[list[int]] = field(default_factory=list)
    exported_decode_tokens_per_second: float | None = None
    eager_generate_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _plain_config(model: torch.nn.Module, layout: dict[str, Any], new_tokens: int) -> Any:
    from transformers import GenerationConfig

    config = GenerationConfig(
        do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
        eos_token_id=layout.get("eos_token_id") or None, pad_token_id=layout.get("pad_token_id"),
        output_logits=True, return_dict_in_generate=True,
    )
    if layout["kind"] == "encoder-decoder":
        config.decoder_start_token_id = layout["decoder_start_token_id"]
    return config


def eager_generate(model: torch.nn.Module, layout: dict[str, Any], inputs: dict[str, torch.Tensor],
                   new_tokens: int) -> tuple[torch.Tensor, list[torch.Tensor], float]:
    """Eager greedy tokens ``[batch, new]``, the raw logits of every step, and the seconds it took."""
    from transformers import GenerationMixin

    kwargs = {k: v for k, v in inputs.items() if k in PROMPT_INPUTS}
    plain = _plain_config(model, layout, new_tokens)
    # generate() fills fields a passed config leaves unset from the model's own generation config (BART's
    # forced_eos_token_id, Whisper's suppress_tokens): the model's config is swapped out for the call.
    own, model.generation_config = model.generation_config, plain
    started = time.perf_counter()
    try:
        with torch.no_grad():
            out = GenerationMixin.generate(model, **kwargs, generation_config=plain)
    finally:
        model.generation_config = own
    seconds = time.perf_counter() - started
    sequences = out.sequences
    skip = inputs["input_ids"].shape[1] if layout["kind"] == "decoder-only" else 1  # prompt / decoder start
    return sequences[:, skip:], list(out.logits), seconds


def reference_generate(references: Mapping[str, torch.nn.Module], layout: dict[str, Any],
                       inputs: dict[str, torch.Tensor], new_tokens: int) -> tuple[torch.Tensor, list[torch.Tensor], float]:
    """Greedy tokens ``[batch, new]``, every step's logits and the seconds, from the bundle's own decoding loop
    (exporters.bundle.decoding) over the component modules ``references``."""
    from exporters.bundle.decoding import module_components, run_generation
    from exporters.bundle.stepping import ComponentSession

    prompt = {name: value for name, value in inputs.items() if name in PROMPT_INPUTS}
    started = time.perf_counter()
    out = run_generation(ComponentSession(module_components(references), layout), layout, prompt,
                         max_new_tokens=new_tokens, min_new_tokens=new_tokens, output_logits=True)
    return out.tokens, out.logits, time.perf_counter() - started


def forced_logits(session: Any, layout: dict[str, Any], inputs: dict[str, torch.Tensor],
                  tokens: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """``("step N", logits)`` of the decode ``session`` teacher-forced on ``tokens`` (the loop that chose them,
    fed them: exporters.bundle.decoding.run_forced)."""
    from exporters.bundle.decoding import run_forced

    prompt = {name: value for name, value in inputs.items() if name in PROMPT_INPUTS}
    return [(f"step {step}", logits) for step, logits in enumerate(run_forced(session, layout, prompt, tokens))]


def check_quantized_generation(bundle: Any, inputs: dict[str, torch.Tensor], max_new_tokens: int,
                               references: Mapping[str, tuple[torch.nn.Module, list[str]]]) -> GenerationCheck:
    """A quantized bundle's generation against its components as PyTorch runs them (``references``: each
    component's fidelity reference and the layers that quantize their input at run time,
    exporters.quantize.record), over the bundle's own decoding loop (``reference_generate``) rather than
    ``model.generate``, which computes attention over a cache of another shape.

    Each step's logits are held to the rule of every fidelity comparison (``flip_tolerance``: one step of their
    8-bit grid, or ``FLIP_MARGIN`` x their flip envelope), the envelope measured on this loop itself: the
    references teacher-forced on their own greedy tokens with the run-time quantized layers' inputs nudged one
    ulp, step by step. The bundle is compared teacher-forced on the same tokens, so that every step is compared
    on the same inputs: its own greedy tokens may leave the references' where two logits are closer than the
    tolerance (a random model's near-uniform ones are), which the elementwise bound then covers, and the
    detail says at which step. A logit past the bound is a mismatch."""
    from exporters.bundle.decoding import module_components, session_of
    from exporters.bundle.stepping import ComponentSession

    layout = bundle.metadata.generation
    modules = {name: module for name, (module, _layers) in references.items()}
    tokens, logits, seconds = reference_generate(modules, layout, inputs, max_new_tokens)
    envelope = flip_envelope(lambda: forced_logits(ComponentSession(module_components(modules), layout), layout,
                                                   inputs, tokens), list(references.values()))
    exported = bundle.generate(**inputs, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens)
    forced = forced_logits(session_of(bundle), layout, inputs, tokens)
    grid = [output_step(step_logits) for step_logits in logits]
    flips = [envelope.get(f"step {step}", 0.0) for step in range(len(grid))]
    allowed = [flip_tolerance(one, flip) for one, flip in zip(grid, flips)]
    mask = inputs.get("attention_mask")
    check = GenerationCheck(
        PASS, "", max_new_tokens, int(tokens.shape[0]), [int(v) for v in mask.sum(-1)] if mask is not None else [],
        logits_steps=[round(one, 6) for one in grid],
        envelope_steps=[round(flip / one, 4) if one else 0.0 for one, flip in zip(grid, flips)],
        eager_tokens=tokens.tolist(), exported_tokens=exported.tokens.tolist(), eager_generate_seconds=round(seconds, 4),
        exported_decode_tokens_per_second=round(exported.decode_tokens_per_second, 2), max_logits_diff=0.0)
    for step, ((_name, actual), expected) in enumerate(zip(forced, logits)):
        diff = (expected.double() - actual.double()).abs()
        check.max_logits_diff = max(check.max_logits_diff, float(diff.max()))
        beyond = diff > LOGITS_ATOL + LOGITS_RTOL * expected.double().abs() + allowed[step]
        if beyond.any():
            row = int(beyond.any(-1).nonzero()[0])
            return dataclasses.replace(
                check, status=MISMATCH, first_mismatch={"step": step, "row": row},
                detail=f"logits off at step {step}, row {row} by more than max(one 8-bit step of theirs "
                       f"{grid[step]:.3g}, {FLIP_MARGIN:g}x their flip envelope) = {allowed[step]:.3g}: max abs diff "
                       f"{float(diff.max()):.3g} (the bundle fed the references' tokens)")
    if degenerate(tokens):
        return dataclasses.replace(check, status=INCONCLUSIVE, detail="the references' greedy path repeats one token "
                                   "in every row: a degenerate model, which a broken cache would reproduce too")
    within = (f"every step's logits within max(one 8-bit step, {FLIP_MARGIN:g}x the loop's flip envelope) of "
              f"the references' (max abs diff {check.max_logits_diff:.3g})")
    apart = (exported.tokens != tokens).any(0).nonzero().flatten().tolist()
    if not apart:
        return dataclasses.replace(check, detail=f"{check.batch} rows x {max_new_tokens} new tokens equal; {within}")
    step = apart[0]
    row = int((exported.tokens[:, step] != tokens[:, step]).nonzero()[0])
    reference = logits[step][row].double()
    gap = float(reference[int(tokens[row, step])] - reference[int(exported.tokens[row, step])])
    return dataclasses.replace(check, detail=(
        f"the bundle's own greedy tokens leave the references' at step {step}, row {row}, where the references' "
        f"logits of the two tokens are {gap:.3g} apart and each may move by "
        f"{allowed[step]:.3g}: a near-tie; teacher-forced on the "
        f"references' tokens, {within}"))


def check_generation(model: torch.nn.Module, bundle: Any, inputs: dict[str, torch.Tensor],
                     max_new_tokens: int = 16) -> GenerationCheck:
    """Run ``bundle.generate`` and eager greedy generation on ``inputs`` and compare them step by step (a
    quantized bundle: ``check_quantized_generation``)."""
    layout = bundle.metadata.generation
    eager_tokens, eager_logits, eager_seconds = eager_generate(model, layout, inputs, max_new_tokens)
    mask = inputs.get("attention_mask")
    lengths = [int(v) for v in mask.sum(-1)] if mask is not None else []
    exported = bundle.generate(**inputs, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                               output_logits=True)
    batch = int(eager_tokens.shape[0])

    def verdict(status: str, detail: str, **extra: Any) -> GenerationCheck:
        return GenerationCheck(
            status, detail, max_new_tokens, batch, lengths, eager_tokens=eager_tokens.tolist(),
            exported_tokens=exported.tokens.tolist(), eager_generate_seconds=round(eager_seconds, 4),
            exported_decode_tokens_per_second=round(exported.decode_tokens_per_second, 2),
            float32_noise=None if noise is None else [round(float(v), 6) for v in noise.max(-1).values],
            steps_within_noise=within_noise, **extra)

    worst = 0.0
    noise: torch.Tensor | None = None  # [steps, batch], built on first need
    within_noise: list[int] = []
    steps = min(len(eager_logits), len(exported.logits))
    for step in range(steps):
        expected, actual = eager_logits[step].double(), exported.logits[step].double()
        diff = (expected - actual).abs()
        worst = max(worst, float(diff.max()))
        token_rows = (eager_tokens[:, step] != exported.tokens[:, step]).nonzero().flatten().tolist() \
            if step < exported.tokens.shape[1] else list(range(batch))
        if token_rows:
            return verdict(MISMATCH, f"first differing token at step {step}, row {token_rows[0]}: eager "
                           f"{int(eager_tokens[token_rows[0], step])}, exported "
                           f"{_token(exported.tokens, token_rows[0], step)} (max logits diff so far {worst:.3g})",
                           first_mismatch={"step": step, "row": token_rows[0]}, max_logits_diff=worst)
        allowed = LOGITS_ATOL + LOGITS_RTOL * expected.abs()
        if not bool((diff <= allowed).all()):
            if noise is None:
                noise = float32_noise(model, layout, inputs, eager_tokens, eager_logits)
            bad = ~(diff <= allowed + NOISE_FACTOR * noise[step][:, None])
            if bad.any():
                row = int(bad.any(-1).nonzero()[0])
                return verdict(MISMATCH, f"logits off at step {step}, row {row} (max abs diff "
                               f"{float(diff.max()):.3g}, atol {LOGITS_ATOL:g}, rtol {LOGITS_RTOL:g}, eager's own "
                               f"float32 noise {float(noise[step, row]):.3g}) although the tokens agree",
                               first_mismatch={"step": step, "row": row}, max_logits_diff=worst)
            within_noise.append(step)
    if exported.tokens.shape[1] != eager_tokens.shape[1]:
        return verdict(MISMATCH, f"exported generated {exported.tokens.shape[1]} tokens, eager "
                       f"{eager_tokens.shape[1]}", first_mismatch={"step": steps, "row": 0}, max_logits_diff=worst)
    if eager_tokens.shape[1] < max_new_tokens:
        return verdict(INCONCLUSIVE, f"eager stopped after {eager_tokens.shape[1]} of {max_new_tokens} tokens",
                       max_logits_diff=worst)
    if degenerate(eager_tokens):
        return verdict(INCONCLUSIVE, "eager's greedy path repeats one token in every row: a degenerate model, "
                       "which a broken cache would reproduce too (change the seed or init scale)",
                       max_logits_diff=worst)
    beyond = (f" (steps {within_noise} beyond atol/rtol but within {NOISE_FACTOR:g}x eager's own float32 noise, "
              f"max {float(noise.max()):.3g})" if within_noise and noise is not None else "")
    return verdict(PASS, f"{batch} rows x {max_new_tokens} new tokens equal; max logits diff {worst:.3g}{beyond}",
                   max_logits_diff=worst)


def token_quality(float_model: torch.nn.Module, layout: dict[str, Any], inputs: dict[str, torch.Tensor],
                  quantized_tokens: torch.Tensor, min_equal: int, random_weights: bool = False) -> TokenQuality:
    """A quantized bundle's greedy tokens ``[batch, new]`` (its validation's, or ``exportbot generate``'s)
    against float eager greedy generation on the same prompts: steps equal before the first divergence;
    ``inconclusive`` when float greedy repeats one token in every row, float eager predicts nothing, or the
    caller knows the weights are random."""
    from exporters.quantize.record import RANDOM_WEIGHTS

    float_tokens, logits, _seconds = eager_generate(float_model, layout, inputs, int(quantized_tokens.shape[1]))
    meaning = RANDOM_WEIGHTS if random_weights else token_meaning(float_tokens, logits, degenerate(float_tokens))
    return compare_tokens(float_tokens, quantized_tokens, min_equal, meaning)


def degenerate(tokens: torch.Tensor) -> bool:
    """Whether a greedy path ``[batch, new]`` repeats one token in every row: ``inconclusive``, since a broken
    cache would reproduce it (exporters.tiny.generation tries other builds before an export)."""
    rows = tokens.tolist()
    return bool(rows) and all(len(set(row)) <= 1 for row in rows)


def float32_noise(model: torch.nn.Module, layout: dict[str, Any], inputs: dict[str, torch.Tensor],
                  eager_tokens: torch.Tensor, eager_logits: list[torch.Tensor]) -> torch.Tensor:
    """``[steps, batch]``: the largest |eager float32 logit - float64 logit| per step and row.

    The float64 logits come from one forward of a float64 copy of the model, teacher-forced on eager's own
    tokens (no cache), so both sides score the same context at every step: the difference is the rounding
    of eager's float32 computation (and of its cache), the yardstick for another float32 computation.
    """
    exact = copy.deepcopy(model).double().eval()
    wide = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()
            if k in PROMPT_INPUTS}
    steps = len(eager_logits)
    fed = eager_tokens[:, : steps - 1]
    with torch.no_grad():
        if layout["kind"] == "decoder-only":
            prompt = wide["input_ids"].shape[1]
            mask = torch.cat([wide["attention_mask"], torch.ones_like(fed)], dim=1)
            positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
            extra = {"position_ids": positions} if _accepts(exact, "position_ids") else {}
            if "pixel_values" in wide:  # a vision-language prompt: the image fills its placeholder tokens
                extra["pixel_values"] = wide["pixel_values"]
            logits = exact(input_ids=torch.cat([wide["input_ids"], fed], dim=1), attention_mask=mask,
                           use_cache=False, **extra).logits[:, prompt - 1:]
        else:
            start = torch.full((fed.shape[0], 1), layout["decoder_start_token_id"], dtype=torch.long)
            logits = exact(**wide, decoder_input_ids=torch.cat([start, fed], dim=1), use_cache=False).logits
    return torch.stack([(eager_logits[s].double() - logits[:, s]).abs().amax(-1) for s in range(steps)])


def _token(tokens: torch.Tensor, row: int, step: int) -> str:
    return str(int(tokens[row, step])) if step < tokens.shape[1] else "none (stopped)"
