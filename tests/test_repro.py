"""``[entry.repro]``: the schema's checks (each at its line), byte-preserving edits, and building reproducers."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import torch

from exporters.ledger import Repro, add_entry, check_ledger, load_ledger, remove_entry, set_fixed_in
from exporters.ledger.repro import ReproError, build_reproducer, exporter_options, run_eager

SKIPS = "export_skips.toml"
ODO = "onnx_disable_optimize.toml"

ENTRY = """\
# A comment the edits must keep.
[[entry]]
id = "{id}"
models = ["{model}"]
backend = "{backend}"
scope = "{scope}"
dependency = "transformers"
reason = "r"
model_change = "m"
failure = 'boom'
added = 2026-11-30
"""


def registry(tmp_path: Path, skips: str, odo: str = "") -> Path:
    (tmp_path / SKIPS).write_text(skips)
    (tmp_path / ODO).write_text(odo)
    return tmp_path


def entry(repro: str, *, id: str = "e", model: str = "ViTModel", backend: str = "onnx", scope: str = "all") -> str:
    return ENTRY.format(id=id, model=model, backend=backend, scope=scope) + "\n" + repro


def problems(tmp_path: Path, text: str) -> list[tuple[int, str]]:
    return [(p.line, p.message) for p in check_ledger(registry(tmp_path, text))[1]]


def test_valid_repro_loads(tmp_path: Path) -> None:
    text = entry(
        "[entry.repro]\nseed = 3\n\n[entry.repro.config]\nnum_hidden_layers = 1\n\n"
        "[entry.repro.config.sub]\nflag = true\n\n[entry.repro.inputs]\nbatch = 1\nimage_size = [40, 48]\n\n"
        "[entry.repro.inputs.shapes]\nattention_mask = [1, 5]\n\n[entry.repro.export]\nopset_version = 20\n"
        "dynamic = true\n"
    )
    loaded = load_ledger(registry(tmp_path, text)).by_id("e")
    assert loaded.repro == Repro(
        config={"num_hidden_layers": 1, "sub": {"flag": True}},
        inputs={"batch": 1, "image_size": [40, 48], "shapes": {"attention_mask": [1, 5]}},
        export={"opset_version": 20, "dynamic": True},
        seed=3,
    )
    assert loaded.modes() == [True]  # export.dynamic narrows scope "all"


def test_entry_without_repro_keeps_scope_modes(tmp_path: Path) -> None:
    loaded = load_ledger(registry(tmp_path, entry(""))).by_id("e")
    assert (loaded.repro, loaded.modes()) == (None, [False, True])


# (repro text, backend, scope, expected (line offset from the repro start, message part)); line 13 is the
# first line after the entry's keys and the blank line.
BAD = [
    ("[entry.repro]\nbogus = 1\n", "onnx", "all", [(14, "unknown key 'bogus'")]),
    ("[entry.repro]\n", "onnx", "all", [(13, "empty [entry.repro] table")]),
    ("[entry.repro]\nseed = -1\n", "onnx", "all", [(14, "'seed' must be a non-negative integer")]),
    ("[entry.repro.inputs]\nbatch = 0\n", "onnx", "all", [(14, "'inputs.batch' must be a positive integer")]),
    ("[entry.repro.inputs]\nimage_size = [1]\n", "onnx", "all", [(14, "'inputs.image_size' must be")]),
    ("[entry.repro.inputs]\ncolour = 1\n", "onnx", "all", [(14, "'inputs.colour': unknown key")]),
    ("[entry.repro.inputs.shapes]\nx = [0]\n", "onnx", "all", [(14, "'inputs.shapes.x' must be")]),
    ("[entry.repro.export]\nopset_version = '18'\n", "onnx", "all", [(14, "must be an integer")]),
    ("[entry.repro.export]\nmax_batch = 2\n", "onnx", "all", [(14, "not an option of the onnx exporter")]),
    ("[entry.repro.export]\nopset_version = 18\n", "dynamo", "all", [(14, "not an option of the dynamo exporter")]),
    ("[entry.repro.export]\ndynamic = true\n", "onnx", "static", [(14, "outside the entry's scope 'static'")]),
    ("[entry.repro.config]\n'a b' = 1\n", "onnx", "all", [(14, "'a b' is not a config field name")]),
    ("[entry.repro]\nscript = 'elsewhere/x.py'\n", "onnx", "all", [(14, "must be a path 'registry/repro/NAME.py'")]),
    ("[entry.repro]\nscript = 'registry/repro/none.py'\n", "onnx", "all", [(14, "no such file")]),
    ("repro = 3\n", "onnx", "all", [(13, "'repro' must be a table")]),
    ("[entry.repro]\nbudget_s = 0\n", "onnx", "all", [(14, "'budget_s' must be a positive number of seconds")]),
    ("[entry.repro.inputs.values.attention_mask]\npadding = 'middle'\n", "onnx", "all",
     [(14, "'inputs.values.attention_mask.padding' must be 'left' or 'right'")]),
    ("[entry.repro.inputs.values.input_ids]\nrange = [9, 3]\n", "onnx", "all",
     [(14, "'inputs.values.input_ids.range' must be [low, high] with low < high")]),
    ("[entry.repro.inputs.values.x]\ndtype = 'float64'\n", "onnx", "all", [(14, "'inputs.values.x.dtype' must be one of")]),
    ("[[entry.repro.init]]\nmodules = ['Conv2d']\nrule = 'xavier'\n", "onnx", "all", [(13, "'rule' must be one of")]),
    ("[[entry.repro.init]]\nmodules = ['PReLU']\nrule = 'uniform'\n", "onnx", "all", [(13, "rule 'uniform' needs 'range'")]),
    ("[[entry.repro.init]]\nmodules = []\nrule = 'kaiming_normal'\n", "onnx", "all", [(13, "'modules' must be")]),
]  # fmt: skip


@pytest.mark.parametrize(("repro", "backend", "scope", "expected"), BAD)
def test_bad_repro_is_reported_at_its_line(
    tmp_path: Path, repro: str, backend: str, scope: str, expected: list[tuple[int, str]]
) -> None:
    found = problems(tmp_path, entry(repro, backend=backend, scope=scope))
    assert len(found) == len(expected), found
    for (line, message), (want_line, want) in zip(found, expected, strict=True):
        assert (line, want in message) == (want_line, True), (line, message)


def test_odo_repro_cannot_turn_the_optimizer_off(tmp_path: Path) -> None:
    odo = (
        '[[entry]]\nid = "o"\nmodels = ["BertModel"]\nbackend = "onnx"\nscope = "all"\n'
        'upstream = "https://github.com/microsoft/onnxscript/issues/1"\ndependency = "onnxscript"\n'
        "reason = 'r'\nfailure = 'x'\nadded = 2026-11-30\n\n[entry.repro.export]\noptimize = false\n"
    )
    found = [(p.line, p.message) for p in check_ledger(registry(tmp_path, "", odo))[1]]
    assert len(found) == 1 and found[0][0] == 13 and "turns the optimizer on" in found[0][1]


def test_script_with_config_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "repro").mkdir()
    (tmp_path / "repro" / "e.py").write_text("def build(model_class, seed):\n    pass\n")
    found = problems(tmp_path, entry("[entry.repro]\nscript = 'registry/repro/e.py'\n\n[entry.repro.config]\na = 1\n"))
    assert [m for _, m in found] == ["entry 'e': [entry.repro] 'script' builds the model and inputs itself: drop 'config'"]


# ── Edits keep every byte ──
def test_edits_around_a_repro_table_keep_every_other_byte(tmp_path: Path) -> None:
    first = entry("[entry.repro.inputs]\nimage_size = 48  # bigger than configured\n", id="a")
    second = entry("", id="b", model="BertModel")
    path = registry(tmp_path, first + "\n" + second) / SKIPS
    original = path.read_text()
    set_fixed_in(path, "a", "transformers>=5.24")
    text = path.read_text()
    assert text == original.replace("added = 2026-11-30\n\n[entry.repro", 'added = 2026-11-30\nfixed_in = "transformers>=5.24"\n\n[entry.repro', 1)
    assert load_ledger(tmp_path).by_id("a").fixed_in == "transformers>=5.24"
    assert load_ledger(tmp_path).by_id("a").repro.inputs == {"image_size": 48}
    remove_entry(path, "b")
    assert path.read_text() == text.removesuffix("\n" + second)
    fields = {
        "id": "c", "models": ["ViTModel"], "backend": "dynamo", "scope": "static", "dependency": "torch",
        "reason": "r", "model_change": "m", "failure": "x", "added": datetime.date(2026, 11, 30),
        "repro": {"config": {"num_channels": 1}, "export": {"strict": True}},
    }  # fmt: skip
    before = path.read_text()
    add_entry(path, fields)
    assert path.read_text().startswith(before)
    added = load_ledger(tmp_path).by_id("c")
    assert (added.repro.config, added.repro.export) == ({"num_channels": 1}, {"strict": True})
    remove_entry(path, "c")
    assert path.read_text() == before


# ── Building ──
def test_default_reproducer_is_the_tiny_model(tmp_path: Path) -> None:
    loaded = load_ledger(registry(tmp_path, entry(""))).by_id("e")
    built = build_reproducer(loaded, "ViTModel")
    assert built.source == "default tiny model"
    assert tuple(built.inputs["pixel_values"].shape[-2:]) == (32, 32)


def test_overrides_reach_config_inputs_and_export_options(tmp_path: Path) -> None:
    text = entry(
        "[entry.repro]\nseed = 5\n\n[entry.repro.config]\nnum_hidden_layers = 1\nqkv_bias = false\n\n"
        "[entry.repro.inputs]\nbatch = 1\nimage_size = [48, 64]\n\n[entry.repro.export]\nopset_version = 20\n"
    )
    loaded = load_ledger(registry(tmp_path, text)).by_id("e")
    built = build_reproducer(loaded, "ViTModel", seed=0)
    assert built.seed == 5
    assert built.model.config.num_hidden_layers == 1
    default = build_reproducer(None, "ViTModel").model
    assert len(list(built.model.modules())) < len(list(default.modules()))  # one layer fewer was built
    assert built.model.config.qkv_bias is False
    assert built.model.config.hidden_size == 32  # still shrunk
    assert tuple(built.inputs["pixel_values"].shape) == (1, 3, 48, 64)
    assert exporter_options(built) == {"opset_version": 20}
    with pytest.raises(Exception, match=r"interpolate_pos_encoding|size"):
        run_eager(built)  # ViT needs interpolate_pos_encoding for another size: the reproducer fails eagerly


def test_unknown_config_field_is_an_error(tmp_path: Path) -> None:
    loaded = load_ledger(registry(tmp_path, entry("[entry.repro.config]\nnum_hiden_layers = 1\n"))).by_id("e")
    with pytest.raises(ReproError, match="ViTConfig has no field 'num_hiden_layers'"):
        build_reproducer(loaded, "ViTModel")


def test_script_builds_model_and_inputs(tmp_path: Path) -> None:
    (tmp_path / "repro").mkdir()
    (tmp_path / "repro" / "e.py").write_text(
        "import torch\n\ndef build(model_class, seed):\n"
        "    torch.manual_seed(seed)\n    return torch.nn.Linear(4, 2), {'input': torch.ones(3, 4)}\n"
    )
    loaded = load_ledger(registry(tmp_path, entry("[entry.repro]\nscript = 'registry/repro/e.py'\nseed = 2\n"))).by_id("e")
    built = build_reproducer(loaded, "ViTModel")
    assert built.source == "script e.py" and built.seed == 2
    assert run_eager(built).shape == torch.Size([3, 2])


# ── Input values, weight re-initialisation, inputs the tiny builder does not make ──
def test_values_pad_a_mask_and_draw_integers_in_a_range(tmp_path: Path) -> None:
    """A left-padded attention_mask (the tiny sample's and a reshaped one were all ones or right-padded) and
    input_ids in a range: the cases a script was needed for."""
    text = entry(
        "[entry.repro.inputs]\nbatch = 3\nsequence = 6\n\n[entry.repro.inputs.values.attention_mask]\n"
        "padding = 'left'\npadded = 2\n\n[entry.repro.inputs.values.input_ids]\nrange = [5, 9]\n", model="BertModel"
    )
    built = build_reproducer(load_ledger(registry(tmp_path, text)).by_id("e"), "BertModel")
    assert built.inputs["attention_mask"].tolist() == [[1] * 6, [0, 0, 1, 1, 1, 1], [1] * 6]
    ids = built.inputs["input_ids"]
    assert tuple(ids.shape) == (3, 6) and int(ids.min()) >= 5 and int(ids.max()) < 9 and ids.dtype == torch.long
    assert built.source == "tiny model with inputs"
    run_eager(built)


def test_shapes_make_a_forward_input_the_tiny_builder_does_not(tmp_path: Path) -> None:
    text = entry("[entry.repro.inputs.shapes]\nposition_ids = [2, 8]\n\n[entry.repro.inputs.values.position_ids]\n"
                 "dtype = 'int64'\nrange = [0, 8]\n", model="BertModel")  # fmt: skip
    default = build_reproducer(None, "BertModel")
    assert "position_ids" not in default.inputs
    built = build_reproducer(load_ledger(registry(tmp_path, text)).by_id("e"), "BertModel")
    positions = built.inputs["position_ids"]
    assert tuple(positions.shape) == (2, 8) and positions.dtype == torch.long and int(positions.max()) < 8
    run_eager(built)
    no_range = entry("[entry.repro.inputs.shapes]\nposition_ids = [2, 8]\n\n[entry.repro.inputs.values.position_ids]\n"
                     "dtype = 'int64'\n", id="r", model="BertModel")  # fmt: skip
    with pytest.raises(ReproError, match="an integer input the sample lacks needs a 'range'"):
        build_reproducer(load_ledger(registry(tmp_path, no_range)).by_id("r"), "BertModel")
    unknown = entry("[entry.repro.inputs.shapes]\nprompt_pixel_values = [1, 3, 8, 8]\n", id="u", model="BertModel")
    with pytest.raises(ReproError, match=r"BertModel\.forward takes no 'prompt_pixel_values'"):
        build_reproducer(load_ledger(registry(tmp_path, unknown)).by_id("u"), "BertModel")


def test_init_rules_reinitialise_the_named_modules_only(tmp_path: Path) -> None:
    text = entry(
        "[[entry.repro.init]]\nmodules = ['Linear']\nparameter = 'bias'\nrule = 'constant'\nvalue = 0.25\n\n"
        "[[entry.repro.init]]\nmodules = ['Embedding']\nrule = 'uniform'\nrange = [0.1, 0.3]\n", model="BertModel"
    )
    loaded = load_ledger(registry(tmp_path, text)).by_id("e")
    assert loaded.repro.init == ({"modules": ["Linear"], "parameter": "bias", "rule": "constant", "value": 0.25},
                                 {"modules": ["Embedding"], "rule": "uniform", "range": [0.1, 0.3]})  # fmt: skip
    built = build_reproducer(loaded, "BertModel")
    linears = [m for m in built.model.modules() if type(m).__name__ == "Linear"]
    assert linears and all(bool((m.bias == 0.25).all()) for m in linears)
    embeddings = [m.weight for m in built.model.modules() if type(m).__name__ == "Embedding"]
    assert all(float(w.detach().min()) >= 0.1 and float(w.detach().max()) <= 0.3 for w in embeddings)
    norms = [m for m in built.model.modules() if type(m).__name__ == "LayerNorm"]
    assert norms and not any(bool((m.bias == 0.25).all()) and m.bias.numel() > 1 for m in norms)  # untouched
    again = build_reproducer(loaded, "BertModel")  # seeded: the same weights every time
    assert all(torch.equal(a, b) for a, b in zip(embeddings, [m.weight for m in again.model.modules()
                                                             if type(m).__name__ == "Embedding"]))  # fmt: skip
    missing = entry("[[entry.repro.init]]\nmodules = ['PReLU']\nrule = 'constant'\nvalue = 0.2\n", id="p",
                    model="BertModel")  # fmt: skip
    with pytest.raises(ReproError, match="no PReLU module with a 'weight' tensor in BertModel"):
        build_reproducer(load_ledger(registry(tmp_path, missing)).by_id("p"), "BertModel")


def test_budget_is_read_as_seconds(tmp_path: Path) -> None:
    loaded = load_ledger(registry(tmp_path, entry("[entry.repro]\nbudget_s = 60\n"))).by_id("e")
    assert loaded.repro.budget_s == 60.0 and isinstance(loaded.repro.budget_s, float)
    # a budget alone changes nothing the model is built from: it is the default tiny model (said so in a draft's header)
    assert build_reproducer(loaded, "ViTModel").source == "default tiny model"
