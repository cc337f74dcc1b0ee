"""The ledger's edits at their edges (files without a final newline, an entry at line 0, indented comments,
refused edits and what they report). Written to kill the mutants mutmut found in exporters/ledger/edit.py's
editing functions (scripts/mutation_test.py ledger); tests/test_ledger.py covers the ordinary edits."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import tomlkit
from test_ledger import SKIPS, registry, skip_entry  # the ordinary edits' file helpers

from exporters.ledger import (
    LedgerError,
    LedgerProblem,
    add_entry,
    remove_entry,
    remove_model,
    set_fixed_in,
)
from exporters.ledger.edit import _commit, _split, _toml_value  # private helpers: where they live

TWO = skip_entry("two", models='"BertModel"')  # another model: two entries must not gate one twice


def skips_file(tmp_path: Path, text: str) -> Path:
    return registry(tmp_path, skips=text) / SKIPS


def problems(error: pytest.ExceptionInfo) -> list[tuple[Path, int, str]]:
    return [(p.path, p.line, p.message) for p in error.value.problems]


def test_split_keeps_the_final_newline_apart():
    assert _split("a\nb\n") == (["a", "b"], "\n")
    assert _split("a\nb") == (["a", "b"], "")
    assert _split("") == ([""], "")


def test_refused_edits_name_the_file_line_and_problem(tmp_path: Path):
    path = skips_file(tmp_path, skip_entry("one", models='"T5Model", "BertModel"'))
    with pytest.raises(LedgerError) as missing:
        remove_entry(path, "nope")
    assert problems(missing) == [(path, 1, "no entry with id 'nope'")]
    with pytest.raises(LedgerError) as unlisted:
        remove_model(path, "one", "GPT2Model")
    assert problems(unlisted) == [(path, 1, "entry 'one' does not list 'GPT2Model'")]


def test_entries_not_written_as_entry_tables_are_not_edited(tmp_path: Path):
    inline = ('entry = [{id = "one", models = ["T5Model"], backend = "dynamo", scope = "all", '
              'dependency = "transformers", reason = "loop", model_change = "torch.cond", failure = "Guard", '
              "added = 2025-04-05}]\n")
    path = skips_file(tmp_path, inline)
    with pytest.raises(LedgerError) as caught:
        remove_entry(path, "one")
    assert problems(caught) == [(path, 1, "entries must be written as [[entry]] tables to be edited")]


def test_commit_refuses_text_whose_entries_are_not_the_expected_ones(tmp_path: Path):
    path = skips_file(tmp_path, skip_entry("one"))
    with pytest.raises(LedgerError) as caught:
        _commit(path, TWO, [])
    assert problems(caught) == [(path, 1, "edit would change more than the intended entry; file left as it was")]
    assert path.read_text() == skip_entry("one")


def test_edits_of_an_invalid_file_report_its_own_path(tmp_path: Path):
    path = skips_file(tmp_path, skip_entry("one").replace('scope = "all"', 'scope = "sometimes"'))
    with pytest.raises(LedgerError) as caught:
        remove_entry(path, "one")
    assert {p.path for p in caught.value.problems} == {path}


def test_removing_the_only_entry_empties_the_file(tmp_path: Path):
    for text in (skip_entry("one"), "\n" + skip_entry("one"), skip_entry("one") + "\n"):
        path = skips_file(tmp_path, text)
        assert remove_entry(path, "one") == ""
        assert path.read_text() == ""


def test_an_entry_at_line_0_takes_its_comment_and_leaves_a_trailing_one(tmp_path: Path):
    text = "# about one\n" + skip_entry("one") + "\n" + TWO + "# trailing\n"
    path = skips_file(tmp_path, text)
    assert remove_entry(path, "one") == TWO + "# trailing\n"


def test_an_indented_comment_above_a_header_belongs_to_the_entry(tmp_path: Path):
    text = skip_entry("one") + "\n  # about two, indented\n" + TWO
    path = skips_file(tmp_path, text)
    assert remove_entry(path, "two") == skip_entry("one")


def test_removal_keeps_a_file_without_a_final_newline_so(tmp_path: Path):
    text = skip_entry("one") + "\n" + TWO.rstrip("\n")
    path = skips_file(tmp_path, text)
    assert remove_entry(path, "one") == TWO.rstrip("\n")


def test_failure_regexes_are_literal_strings_unless_they_cannot_be():
    assert isinstance(_toml_value("failure", r"Guard \d+"), tomlkit.items.String)
    assert _toml_value("failure", "it's") == "it's" and not isinstance(_toml_value("failure", "it's"),
                                                                       tomlkit.items.String)
    assert not isinstance(_toml_value("failure", "two\nlines"), tomlkit.items.String)
    assert not isinstance(_toml_value("reason", "plain"), tomlkit.items.String)


FIELDS = {
    "id": "new", "models": ("T5Model", "BertModel"), "backend": "dynamo", "scope": "all",
    "dependency": "transformers", "reason": "data-dependent control flow", "model_change": "use torch.cond",
    "failure": "Guard", "added": datetime.date(2025, 5, 6),
}


@pytest.mark.parametrize(
    ("before", "prefix"),
    [("", ""), ("# header", "# header\n\n"), ("# header\n", "# header\n\n"), ("# header\n\n", "# header\n\n")],
    ids=["empty", "no-final-newline", "newline", "blank-line"],
)
def test_add_entry_separates_the_block_by_exactly_one_blank_line(tmp_path: Path, before: str, prefix: str):
    path = skips_file(tmp_path, before)
    text = add_entry(path, FIELDS)
    assert text.startswith(prefix + '[[entry]]\nid = "new"\nmodels = ["T5Model", "BertModel"]\n')
    assert path.read_text() == text


def test_add_entry_refuses_an_unknown_key_as_a_ledger_problem(tmp_path: Path):
    path = skips_file(tmp_path, "")
    with pytest.raises(LedgerError, match="unknown key 'colour'"):
        add_entry(path, {**FIELDS, "colour": "red"})
    assert path.read_text() == ""


def test_set_fixed_in_goes_into_its_own_entry(tmp_path: Path):
    path = skips_file(tmp_path, skip_entry("one") + "\n" + TWO)
    text = set_fixed_in(path, "two", "transformers>=5.30")
    assert text == skip_entry("one") + "\n" + TWO + 'fixed_in = "transformers>=5.30"\n'


def test_ledger_problem_is_what_the_error_carries(tmp_path: Path):
    assert LedgerError([LedgerProblem(tmp_path, 3, "x")]).problems == (LedgerProblem(tmp_path, 3, "x"),)


def test_set_fixed_in_goes_above_an_indented_repro_table(tmp_path: Path):
    """A key written below ``[entry.repro...]`` would belong to the sub-table; an indented header is one too."""
    text = skip_entry("one") + "\n  [entry.repro.inputs]\n  batch = 1\n"
    path = skips_file(tmp_path, text)
    after = set_fixed_in(path, "one", "transformers>=5.30")
    assert after == skip_entry("one") + 'fixed_in = "transformers>=5.30"\n' + "\n  [entry.repro.inputs]\n  batch = 1\n"
