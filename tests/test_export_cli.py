"""`exportbot export` and friends as a user drives them (issue #18): options, one-line errors, 80 columns,
Ctrl-C, progress, --help examples, hub ids. Through the real CLI: click's runner, or a subprocess where
the terminal, signals or environment matter."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from bot.cli.main import main
from exporters.ledger import load_ledger

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env, terminal_width=80)


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    environment = os.environ | {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "COLUMNS": "80"} | (env or {})
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, timeout=timeout,
                          env=environment)


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def tiny_checkpoint(directory: Path, weights: bool = False) -> Path:
    """A Bert checkpoint directory whose config.json names no architecture (``architectures`` removed)."""
    import transformers

    from exporters.tiny import build_tiny

    model = build_tiny("BertModel").model
    directory.mkdir(parents=True, exist_ok=True)
    data = model.config.to_dict()
    data.pop("architectures", None)
    (directory / "config.json").write_text(json.dumps(data))
    if weights:
        model.save_pretrained(directory / "_saved")
        (directory / "_saved" / "model.safetensors").rename(directory / "model.safetensors")
    assert transformers.AutoConfig.from_pretrained(directory).architectures is None
    return directory


# ── 1. Options ──
def test_checkpoint_without_architectures_exports_with_task(tmp_path: Path):
    checkpoint = tiny_checkpoint(tmp_path / "ckpt")
    refused = cli("export", str(checkpoint), "--out", str(tmp_path / "no"))
    assert refused.exit_code == 2
    assert "names no architecture; choose a head with --task" in refused.stderr
    result = cli("export", str(checkpoint), "--task", "text-classification", "--batch-size", "1",
                 "--sequence-length", "5", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    metadata = summary(tmp_path / "out")["metadata"]
    assert metadata["model_class"] == "BertForSequenceClassification"
    assert metadata["options"]["task"] == "text-classification"
    assert metadata["input_shapes"]["input_ids"] == [1, 5]
    assert "random weights" in " ".join(metadata["notes"])


def test_checkpoint_without_architectures_exports_a_generation_bundle_with_task(tmp_path: Path):
    """--task text-generation on a config-only checkpoint that names no architecture: the prefill + decode
    bundle (not a single graph), whose eager twin `generate` rebuilds from the same config, task and seed."""
    import transformers

    checkpoint = tmp_path / "ckpt"
    transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=128).save_pretrained(checkpoint)  # fmt: skip
    assert not json.loads((checkpoint / "config.json").read_text()).get("architectures")
    result = cli("export", str(checkpoint), "--task", "text-generation", "--backend", "onnx",
                 "--out", str(tmp_path / "gen"))  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "gen" / "export.json").read_text())
    assert manifest["model_class"] == "LlamaForCausalLM" and manifest["generation"]["kind"] == "decoder-only"
    assert manifest["generation"]["source"] == {"checkpoint": str(checkpoint.resolve()), "weights": False,
                                                "seed": 0, "task": "text-generation"}  # fmt: skip
    generated = cli("generate", str(tmp_path / "gen"), "--max-new-tokens", "4", "--json")
    assert generated.exit_code == 0, generated.output
    comparison = json.loads(generated.stdout)["eager_comparison"]
    assert comparison["status"] == "pass", comparison


def test_task_chooses_the_head_of_a_class_name(tmp_path: Path):
    result = cli("export", "BertModel", "--task", "fill-mask", "--json", "--out", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    outcome = json.loads(result.stdout)  # the result on stdout, machine-readable
    assert outcome["model"] == "BertForMaskedLM" and outcome["options"]["task"] == "fill-mask"
    assert summary(tmp_path)["metadata"]["output_names"] == ["logits"]


def test_dynamic_bounds_and_tolerances_are_used_and_recorded(tmp_path: Path):
    result = cli("export", "LlamaModel", "--dynamic", "--max-batch", "4", "--max-sequence", "16",
                 "--atol", "2e-4", "--rtol", "3e-4", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    data = summary(tmp_path)
    dims = data["metadata"]["dynamic_dims"]["input_ids"]
    assert dims["0"]["max"] == 4 and dims["1"]["max"] == 16
    assert (data["validation"]["atol"], data["validation"]["rtol"]) == (2e-4, 3e-4)
    assert data["metadata"]["options"]["max_sequence"] == 16
    assert len(data["validation"]["shapes"]) == 2  # validated at a second shape inside the bounds


def test_custom_dynamic_dims_from_the_help_example(tmp_path: Path):
    result = cli("export", "LlamaModel", "--dynamic-dim", "input_ids:1:2:32", "--dynamic-dim",
                 "attention_mask:1:2:32", "--json", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["dynamic_dims"] == {"input_ids": [1], "attention_mask": [1]}  # as sweeps record
    assert json.loads(result.stdout)["unmoved_dims"] == {}  # the second shape moved both
    data = summary(tmp_path)
    dims = data["metadata"]["dynamic_dims"]["input_ids"]
    assert list(dims) == ["1"] and (dims["1"]["min"], dims["1"]["max"]) == (2, 32)  # the batch stays static
    assert data["metadata"]["options"]["dynamic_dims"] == ["input_ids:1:2:32", "attention_mask:1:2:32"]
    assert len(data["validation"]["shapes"]) == 2


def test_image_size_sets_the_tiny_config_and_the_samples(tmp_path: Path):
    result = cli("export", "ViTModel", "--image-size", "48", "--batch-size", "1", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert summary(tmp_path)["metadata"]["input_shapes"]["pixel_values"] == [1, 3, 48, 48]


def test_onnx_opset_and_float16(tmp_path: Path):
    import onnx

    result = cli("export", "BertModel", "--backend", "onnx", "--opset", "18", "--dtype", "float16",
                 "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    model = onnx.load(tmp_path / "model.onnx")
    assert {o.domain: o.version for o in model.opset_import}[""] == 18
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    data = summary(tmp_path)
    assert data["validation"]["status"] == "pass"
    assert (data["validation"]["atol"], data["validation"]["rtol"]) == (1e-2, 1e-2)  # the float16 tolerances
    assert data["metadata"]["options"]["dtype"] == "float16" and data["metadata"]["options"]["opset"] == 18


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "onnx", "--et-backend", "cuda"], "--et-backend cuda is an ExecuTorch option; --backend is onnx"),
        (["--backend", "onnx", "--without", "_fix_strided_reshape_input"],
         "--without _fix_strided_reshape_input: a workaround of executorch, not of --backend onnx"),
        (["--backend", "executorch", "--without", "_fix_rsub_scalar"], "a workaround of onnx, not of --backend executorch"),
        (["--backend", "executorch", "--et-backend", "cuda"], "--et-backend cuda needs a CUDA GPU"),
        (["--opset", "20"], "--opset is an ONNX option; --backend is dynamo"),
        (["--backend", "onnx", "--opset", "13"], "--opset 13: the ONNX exporter writes opsets 18 to 23"),
        (["--max-batch", "4"], "--max-batch/--max-sequence bound dynamic dims: add --dynamic"),
        (["--dynamic", "--max-sequence", "4", "--sequence-length", "8"], "--max-sequence 4 is below the sample"),
        (["--backend", "executorch", "--dynamic", "--sequence-length", "200"], "--max-sequence 128 is below the sample"),
        (["--backend", "executorch", "--dtype", "float16"], "ExecuTorch xnnpack lowers in float32"),
        (["--dynamic-dim", "input_ids"], "expected NAME:AXIS or NAME:AXIS:MIN:MAX"),
        (["--dynamic-dim", "input_ids:1:9:3"], "MIN 9 is above MAX 3"),
        (["--backend", "executorch", "--dynamic-dim", "input_ids:1"], "ExecuTorch needs an upper bound"),
        (["--dynamic-dim", "input_idz:1"], "no input 'input_idz' (did you mean 'input_ids'?)"),
        (["--no-optimize"], "--no-optimize is an ONNX option"),
        (["--atol", "0"], "--atol must be positive"),
        (["--task", "fill-mask"], "LlamaConfig has no fill-mask model; its tasks: feature-extraction"),
    ],
)
def test_invalid_combinations_exit_2_before_any_work(tmp_path: Path, args, message):
    result = cli("export", "LlamaModel", *args, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    problems = [line for line in result.stderr.splitlines() if not line.startswith("[")]  # not progress
    assert len(problems) == 1 and "Traceback" not in result.output
    if "input_idz" not in message:  # input names are known once the (tiny) model is built, before export
        assert "building model" not in result.stderr
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []  # nothing written


# ── 2. Errors ──
def test_failure_is_one_line_with_stage_cause_and_hint(tmp_path: Path):
    # Only input_ids' sequence axis dynamic: the mask shares it, so torch.export finds it fixed.
    out = tmp_path / "out"
    result = cli("export", "LlamaModel", "--dynamic-dim", "input_ids:1:2:32", "--out", str(out))
    assert result.exit_code == 1
    line, = [line for line in result.stderr.splitlines() if "failed" in line]
    assert line.startswith("LlamaModel: failed at torch.export: UserError ← ConstraintViolationError: ")
    assert "specialized it to be a constant" in line
    assert "hint: the model fixes a dim you made dynamic" in line
    assert f"(full text: {tmp_path / 'out.failed.json'})" in line
    assert "Traceback" not in result.output and "max abs diff" not in result.output  # nothing was compared
    assert "time:" not in result.output
    assert not out.exists()  # the failure is recorded beside --out, never in it
    full = json.loads((tmp_path / "out.failed.json").read_text())
    assert full["failed_stage"] == "torch.export" and "Traceback (most recent call last)" in full["traceback"]
    assert len(full["error"]) > len(line)  # the full text is kept, only there


def test_debug_is_accepted_after_the_subcommand_and_shows_the_traceback(tmp_path: Path):
    result = cli("export", "LlamaModel", "--dynamic-dim", "input_ids:1:2:32", "--out", str(tmp_path), "--debug")
    assert result.exit_code == 1, result.output
    assert "Traceback (most recent call last)" in result.stderr


def test_debug_is_accepted_anywhere_for_every_command():
    for args in (["list-workarounds", "--json", "--debug"], ["--debug", "list-workarounds", "--json"],
                 ["lint", "--debug", "--no-classes"]):
        result = cli(*args)
        assert result.exit_code in (0, 1) and "No such option" not in result.output, (args, result.output)


def test_unwritable_out_is_checked_first(tmp_path: Path):
    (tmp_path / "file").write_text("")
    for out in (tmp_path / "file" / "sub", Path("/proc/exportbot-out")):
        result = cli("export", "NoSuchModel", "--out", str(out))  # the model is wrong too: --out comes first
        assert result.exit_code == 2
        assert f"--out {out}:" in result.stderr and "NoSuchModel" not in result.stderr


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (["export", "LlamaForCausalLm"], "did you mean 'LlamaForCausalLM'?"),
        (["export", "BertModel", "--backend", "onx"], "did you mean 'onnx'?"),
        (["export", "BertModel", "--task", "fill-mak"], "did you mean 'fill-mask'?"),
        (["export", "BertModel", "--backend", "onnx", "--without", "_fix_rsub_scalr"], "did you mean '_fix_rsub_scalar'?"),
    ],
)
def test_typos_get_a_suggestion(tmp_path: Path, args, suggestion):
    result = cli(*args, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and suggestion in result.stderr, result.output


def interruptible() -> None:
    """In the child before exec: SIGINT back to its default. A pytest started in the background by a
    non-interactive shell inherits SIGINT ignored, and Python then never raises KeyboardInterrupt, so the
    Ctrl-C tests would measure how pytest was started instead of what exportbot does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(process: subprocess.Popen, text: str, log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)


def test_ctrl_c_exits_130_and_leaves_nothing_half_written(tmp_path: Path):
    out = tmp_path / "out"
    log = tmp_path / "stderr.txt"
    environment = os.environ | {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot", "export", "BertModel", "--backend", "onnx", "--out", str(out),
             "--outcome-json", str(tmp_path / "outcome.json")],
            stdout=subprocess.PIPE, stderr=stderr, env=environment, text=True, preexec_fn=interruptible,
        )
        wait_for(process, "BertModel: torch.export", log)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
    assert process.returncode == 130, log.read_text()
    assert "interrupted" in log.read_text() and "Traceback" not in log.read_text()
    assert not out.exists() and not (tmp_path / "outcome.json").exists()
    # no staging directory left; the interruption is recorded beside --out, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.failed.json", "stderr.txt"]
    record = json.loads((tmp_path / "out.failed.json").read_text())
    assert record["status"] == "interrupted" and record["failed_stage"] == "torch.export"


def test_a_ctrl_c_that_torch_wraps_in_another_exception_is_still_an_interruption(tmp_path: Path, monkeypatch):
    """torch.export re-raises a KeyboardInterrupt that lands in its tracer as a RuntimeError: still a Ctrl-C
    (exit 130, recorded as interrupted), not a failed export; seen when the test above ran under load."""
    import bot.run.runner as runner
    from bot.outcome import ExportRequest

    def interrupted_inside_torch(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise RuntimeError("While executing %getattr_1 : [num_users=1] = ...") from interrupt

    monkeypatch.setattr(runner, "_build", interrupted_inside_torch)
    with pytest.raises(KeyboardInterrupt):
        runner.export_one(ExportRequest("BertModel", "onnx", out_dir=tmp_path / "out"))
    record = json.loads((tmp_path / "out.failed.json").read_text())
    assert (record["status"], record["failed_stage"]) == ("interrupted", "building model")


def test_ctrl_c_in_audit_exits_130_with_a_progress_line_naming_the_entry(tmp_path: Path):
    log = tmp_path / "stderr.txt"
    environment = os.environ | {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot", "audit", "--tracker", str(ROOT / "registry/upstream-snapshot.json"),
             "--entry", "vilt-pixel-mask-interpolate-data-dependent", "--json", str(tmp_path / "audit.json")],
            stdout=subprocess.PIPE, stderr=stderr, env=environment, text=True, preexec_fn=interruptible, cwd=ROOT,
        )
        wait_for(process, "re-run 1/", log)
        time.sleep(1)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
    # 1 of (models x modes x runs): the count follows the entry's model list
    assert re.search(r"re-run 1/\d+: vilt-pixel-mask-interpolate-data-dependent: ViltModel", log.read_text())
    assert process.returncode == 130, log.read_text()
    assert not (tmp_path / "audit.json").exists()


def test_ctrl_c_in_sweep_exits_130_and_keeps_whole_records(tmp_path: Path):
    results = tmp_path / "results.jsonl"
    classes = tmp_path / "classes.txt"
    classes.write_text("BertModel\nRobertaModel\nLlamaModel\nGPT2Model\n")
    environment = os.environ | {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "sweep", "run", "--backend", "onnx", "--static", "--classes", str(classes),
         "--results", str(results)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, text=True, preexec_fn=interruptible,
    )
    deadline = time.monotonic() + 300
    while not (results.is_file() and results.read_text().count("\n") >= 1):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    lines = results.read_text().splitlines()
    assert 1 <= len(lines) < 4 and all(json.loads(line)["model"] for line in lines)  # whole records only


# ── 3. Output that fits a terminal ──
def test_list_workarounds_fits_80_columns_with_whole_names_and_short_links():
    completed = run("list-workarounds")
    assert completed.returncode == 0
    lines = completed.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    text = completed.stdout
    for name in ("_patch_xnnpack_reshape_one_dynamic_dim", "_fix_tanh_gelu_for_xnnpack", "_aten_grouped_mm_fallback"):
        assert name in text  # never cut into pieces
    assert "pytorch/pytorch#141107" in text and "https://" not in text


def test_audit_table_fits_80_columns_without_repeating_the_why(tmp_path: Path):
    completed = run("audit", "--tracker", str(ROOT / "registry/upstream-snapshot.json"))
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "due / why" not in completed.stdout and "not due:" not in completed.stdout  # said once, as the verdict
    assert "huggingface/transformers#38518" in completed.stdout
    entries = len(load_ledger(ROOT / "registry").entries)
    assert len(lines) <= 5 + 4 * entries  # about three lines an entry, more only where the models fill them
    as_json = run("audit", "--tracker", str(ROOT / "registry/upstream-snapshot.json"), "--json", "-")
    report = json.loads(as_json.stdout)  # only JSON on stdout; the table went to stderr
    assert len(report["entries"]) == entries and f"audit of {entries} ledger entries" in as_json.stderr


def test_export_result_on_stdout_progress_on_stderr(tmp_path: Path):
    result = cli("export", "BertModel", "--out", str(tmp_path))
    assert result.exit_code == 0
    assert "BertModel → dynamo (static): pass" in result.stdout and "max abs diff" in result.stdout
    assert "building model" in result.stderr and "building model" not in result.stdout
    lines = [line for line in result.stdout.splitlines() if str(tmp_path) not in line]  # file paths stay whole
    assert max(len(line) for line in lines) <= 80


# ── 4. Progress on long work (one ExecuTorch lowering) ──
def test_executorch_progress_names_each_lowering_stage_and_hides_cpuinfo_noise(tmp_path: Path):
    completed = run("export", "BertModel", "--backend", "executorch", "--batch-size", "1", "--out", str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    stages = [line.split(": ", 1)[1] for line in completed.stderr.splitlines() if line.startswith("[")
              and "BertModel: " in line]
    for earlier, later in [("torch.export", "run_decompositions"), ("run_decompositions", "partition/preprocess"),
                           ("partition/preprocess", "to_executorch"), ("to_executorch", "validating")]:
        assert stages.index(earlier) < stages.index(later), stages
    assert "cpuinfo" not in completed.stderr and "midr" not in completed.stderr
    assert summary(tmp_path)["metadata"]["input_shapes"]["input_ids"] == [1, 8]  # a batch-1 static .pte


# ── 5. --help ──
def commands(group: click.Group, path: tuple[str, ...] = ()):
    yield path, group
    for name, command in getattr(group, "commands", {}).items():
        yield from commands(command, (*path, name))


@pytest.mark.parametrize(("path", "command"), list(commands(main)), ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_help_says_what_it_does_and_ends_with_real_examples(path, command):
    result = CliRunner().invoke(main, [*path, "--help"], terminal_width=80)
    assert result.exit_code == 0
    description = result.output.split("\n\n")[1].strip()
    assert len(description.split()) >= 4, description
    tail = result.output.rstrip().split("Examples:")[-1].strip().splitlines()
    assert "Examples:" in result.output and 2 <= len(tail) <= 4, result.output
    for example in tail:
        words = shlex.split(example.split("  #")[0], comments=True)
        words = words[: next((i for i, w in enumerate(words) if w in ("|", ">")), len(words))]  # shell plumbing
        assert words[: len(path) + 1] == ["exportbot", *path] or not path, example
        parse_example(words[1:])


def parse_example(args: list[str]) -> None:
    """Parse ``args`` down to the command they name, as click would: unknown commands and options fail.

    Input files an example names need not exist here; every other parse error counts."""
    command: click.Command = main
    try:
        context = main.make_context("exportbot", list(args))
        while isinstance(command, click.Group) and context.protected_args + context.args:
            name, found, rest = command.resolve_command(context, [*context.protected_args, *context.args])
            assert found is not None, f"no command {name!r}"
            command, context = found, found.make_context(name, rest, parent=context)
    except click.BadParameter as error:
        if "does not exist" not in error.format_message():
            raise


# ── 6. Hub ids ──
def hub_cache(root: Path, repo: str, weights: bool = False) -> Path:
    """``root`` laid out like huggingface_hub's cache, holding ``repo`` (config.json, optionally weights)."""
    folder = root / f"models--{repo.replace('/', '--')}"
    snapshot = tiny_checkpoint(folder / "snapshots" / "0123abcd", weights=weights)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0123abcd")
    return snapshot


def test_hub_id_loads_config_and_weights_from_the_cache(tmp_path: Path):
    hub_cache(tmp_path / "hub", "org/tiny-bert", weights=True)
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    completed = run("export", "org/tiny-bert", "--task", "fill-mask", "--pretrained", "--out", str(tmp_path / "o"),
                    env=env)
    assert completed.returncode == 0, completed.stderr
    metadata = summary(tmp_path / "o")["metadata"]
    assert metadata["model_class"] == "BertForMaskedLM"
    assert "weights loaded from org/tiny-bert" in " ".join(metadata["notes"])


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HF_HUB_OFFLINE": "1"}, "org/missing: the hub is offline (HF_HUB_OFFLINE=1) and org/missing is not in the local cache"),
        ({"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"},
         "org/missing: the hub is unreachable (network down?)"),
    ],
)
def test_hub_id_offline_or_unreachable_is_one_line(tmp_path: Path, env, message):
    (tmp_path / "hub").mkdir()
    started = time.monotonic()
    completed = run("export", "org/missing", "--out", str(tmp_path / "o"), env={"HF_HUB_CACHE": str(tmp_path / "hub"), **env})
    assert completed.returncode == 2
    assert message in completed.stderr and len(completed.stderr.strip().splitlines()) == 1, completed.stderr
    assert time.monotonic() - started < 60  # no retry loop against a network that is down


def test_a_narrower_backends_workaround_can_be_left_out_of_its_exports():
    """--without of a workaround registered for executorch.xnnpack.dynamic or dynamo.pt2-load (the probes of
    their drafts and of the audit) was refused as "not of --backend executorch --et-backend xnnpack"."""
    from bot.cli.export_checks import applies_to

    assert applies_to("executorch.xnnpack.dynamic", "executorch", "xnnpack")
    assert applies_to("executorch.xnnpack", "executorch", "xnnpack") and applies_to("executorch", "executorch", "xnnpack")
    assert applies_to("dynamo.pt2-load", "onnx", "xnnpack") and applies_to("dynamo", "executorch", "portable")
    assert not applies_to("executorch.xnnpack.dynamic", "executorch", "portable")
    assert not applies_to("onnx", "executorch", "xnnpack") and not applies_to("executorch", "onnx", "xnnpack")
