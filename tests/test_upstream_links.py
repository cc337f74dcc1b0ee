"""Linking an item to its upstream issue: a ticked dashboard checkbox (or ``exportbot upstream link``) becomes
``upstream = URL`` in the next shrink PR's "links" section, after the URL is checked to be an issue or pull request
of the item's repository; the edits keep every other byte (tomlkit for a ledger list, a syntax-tree edit of the
``register_*`` decorator for a workaround). Against the fake GitHub, through PyGithub.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_github import FakeGitHub, fake_github_fixture  # noqa: F401 (the fake_github fixture)
from test_shrink import OPTIMIZE, OPTIMIZE_TEXT, REPO, SKIPS, SKIPS_TEXT, SOURCE, SOURCE_TEXT, client, report

from bot.audit.candidates import Candidate
from bot.audit.workaround_removal import set_workaround_upstream
from bot.cli.upstream import upstream_group
from bot.config import BotConfig
from bot.github import shrink_session
from bot.github.dashboard import DASHBOARD_MARKER, TrackingRow
from bot.github.links import LinkTarget, UpstreamInputs, link_edit
from bot.github.shrink import open_or_update_pr
from bot.run.tracking import Drafts, link_targets

MORE = "exporters/onnx/more.py"
MORE_TEXT = '''"""More ONNX workarounds."""

from exporters.utils import register_fx_node_fix


@register_fx_node_fix(
    "onnx",
    dependency="torch",  # the tracker: pytorch/pytorch
)
def _fix_untracked(graph):
    """A workaround nobody reported upstream yet."""
    return graph


@register_fx_node_fix("onnx", dependency="torch")
def _fix_other(graph):
    return graph
'''
ISSUE = "https://github.com/pytorch/pytorch/issues/1"
ELSEWHERE = "https://github.com/microsoft/onnxscript/issues/1"
MISSING = "https://github.com/pytorch/pytorch/issues/99"
DASH = BotConfig(repository=REPO, dashboard=True)
ITEM = "informer-distil-mask-not-downsampled"  # a ledger entry without upstream, fixed in huggingface/transformers


def changed_lines(old: str, new: str) -> list[str]:
    return [line for line in list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0))[2:]
            if line[:1] in "+-" and not line.startswith("@@")]  # fmt: skip


# ── The edits (pure) ──
def test_a_workaround_link_is_one_keyword_in_its_decorator_and_nothing_else_moves():
    new = set_workaround_upstream(MORE_TEXT, "_fix_untracked", ISSUE)
    assert changed_lines(MORE_TEXT, new) == ["+    upstream=\"https://github.com/pytorch/pytorch/issues/1\","]
    assert set_workaround_upstream(new, "_fix_other", ELSEWHERE).count("upstream=") == 2
    with pytest.raises(ValueError, match="already links"):
        set_workaround_upstream(new, "_fix_untracked", ELSEWHERE)
    one_line = set_workaround_upstream(MORE_TEXT, "_fix_other", ISSUE)
    assert changed_lines(MORE_TEXT, one_line) == [
        '-@register_fx_node_fix("onnx", dependency="torch")',
        f'+@register_fx_node_fix("onnx", upstream="{ISSUE}", dependency="torch")',
    ]


def test_a_ledger_link_is_one_line_in_schema_order_and_comments_stay():
    text = (Path(__file__).resolve().parents[1] / SKIPS).read_text(encoding="utf-8")
    url = "https://github.com/huggingface/transformers/issues/7"
    new = link_edit(text, SKIPS, ITEM, url)
    assert changed_lines(text, new) == [f'+upstream = "{url}"']
    entry = new[new.index(f'id = "{ITEM}"'):]
    assert entry.index('scope = "all"') < entry.index(f'upstream = "{url}"') < entry.index("dependency =")
    with pytest.raises(ValueError, match="no-such-entry"):
        link_edit(new, SKIPS, "no-such-entry", ISSUE)


# ── The shrink run ──
@pytest.fixture(name="server")
def server_fixture(fake_github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> FakeGitHub:
    monkeypatch.setattr(shrink_session, "READ_BACKOFF", 0)
    fake_github.add_repo(REPO, files={OPTIMIZE: OPTIMIZE_TEXT, SKIPS: SKIPS_TEXT, SOURCE: SOURCE_TEXT, MORE: MORE_TEXT})
    fake_github.add_repo("pytorch/pytorch")
    fake_github.add_issue("pytorch/pytorch", "FX pass leaves a dead node", body="graph.eliminate_dead_code ...")
    fake_github.add_repo("microsoft/onnxscript")
    fake_github.add_issue("microsoft/onnxscript", "unrelated")
    return fake_github


def inputs(*urls: str) -> UpstreamInputs:
    targets = {"_fix_untracked": LinkTarget("_fix_untracked", MORE, "pytorch/pytorch"),
               "_fix_gone": LinkTarget("_fix_gone", SOURCE, "pytorch/pytorch", "https://github.com/pytorch/pytorch/issues/11")}  # fmt: skip
    candidates = tuple(Candidate(url, url.split("github.com/")[1].rsplit("/", 2)[0], int(url.rsplit("/", 1)[1]),
                                 "a candidate", "open", "issue", 0.5) for url in urls)  # fmt: skip
    row = TrackingRow("_fix_untracked", "workaround", "fx_node_fix (onnx)", "verified", "fails as recorded",
                      "pytorch/pytorch", "docs/upstream-drafts/_fix_untracked.md", "FX pass leaves a dead node",
                      "## Reproducer\n\n...", candidates)  # fmt: skip
    return UpstreamInputs(targets, (row,))


def shrink(server: FakeGitHub, upstream: UpstreamInputs) -> Any:
    return open_or_update_pr(report({}), DASH, client(server), True, upstream=upstream, sleep=lambda s: None)


def dashboard(server: FakeGitHub) -> Any:
    issues = client(server).get_repo(REPO).get_issues(state="all")
    return next(i for i in issues if DASHBOARD_MARKER in (i.body or ""))


def tick(server: FakeGitHub, url: str) -> None:
    """What a maintainer does on GitHub: tick the candidate's checkbox."""
    issue = dashboard(server)
    line = f"- [ ] <!-- exportbot:link _fix_untracked {url} -->"
    assert line in issue.body
    issue.edit(body=issue.body.replace(line, line.replace("[ ]", "[x]")))


def test_a_ticked_candidate_becomes_the_link_of_the_next_shrink_pr(server: FakeGitHub):
    upstream = inputs(ISSUE, ELSEWHERE, MISSING)
    first = shrink(server, upstream)
    assert not first.plan.open_pull and "opened" not in " ".join(first.done)  # nothing ticked: no PR
    body = dashboard(server).body
    assert "## Not tracked upstream" in body and "**verified** draft" in body
    assert "[file it in pytorch/pytorch](https://github.com/pytorch/pytorch/issues/new?title=FX+pass" in body
    assert body.count("- [ ] <!-- exportbot:link _fix_untracked ") == 3

    for url in (ISSUE, ELSEWHERE, MISSING):
        tick(server, url)
    second = shrink(server, upstream)
    [pull] = list(client(server).get_repo(REPO).get_pulls(state="open"))
    assert pull.title == "exportbot: link 1 item to its upstream issue"
    assert "## Links" in pull.body and f"[pytorch/pytorch/issues/1]({ISSUE}): FX pass leaves a dead node" in pull.body
    branch_text = server.read_file(REPO, DASH.branch, MORE)
    assert changed_lines(MORE_TEXT, branch_text) == [f'+    upstream="{ISSUE}",']
    assert server.read_file(REPO, DASH.branch, SOURCE) == SOURCE_TEXT  # no other file touched
    assert [c.id for c in second.plan.links if c.accepted] == ["_fix_untracked"]

    body = dashboard(server).body
    assert f"- [x] <!-- exportbot:link _fix_untracked {ISSUE} -->" in body and "proposed in the shrink PR" in body
    assert f"{ELSEWHERE} is in microsoft/onnxscript, not in pytorch/pytorch" in body  # refused, said beside it
    assert f"{MISSING} does not resolve" in body
    assert "ticked link" in body  # and listed for a human above the tables

    writes = sum(r.method != "GET" for r in server.requests)
    shrink(server, upstream)  # the same state: the run settles, nothing written again
    assert sum(r.method != "GET" for r in server.requests) == writes


def test_a_ticked_link_for_an_item_that_already_links_is_refused(server: FakeGitHub):
    upstream = inputs()
    shrink(server, upstream)
    issue = dashboard(server)
    issue.edit(body=issue.body.replace("<!-- exportbot:upstream-end -->",
                                       f"- [x] <!-- exportbot:link _fix_gone {ISSUE} --> asked\n"
                                       "<!-- exportbot:upstream-end -->"))  # fmt: skip
    outcome = shrink(server, upstream)
    assert [(c.id, c.accepted) for c in outcome.plan.links] == [("_fix_gone", False)]
    assert "already links https://github.com/pytorch/pytorch/issues/11" in outcome.plan.links[0].note
    assert not list(client(server).get_repo(REPO).get_pulls(state="all"))


# ── exportbot upstream link ──


def test_link_command_checks_the_url_and_ticks_it_on_the_dashboard(fake_github: FakeGitHub, tmp_path: Path):
    target = link_targets(Drafts(None), "registry")[ITEM]
    assert (target.path, target.repository, target.upstream) == ("registry/export_skips.toml",
                                                                 "huggingface/transformers", None)  # fmt: skip
    fake_github.add_repo(REPO)
    fake_github.add_issue(REPO, "exportbot ledger dashboard", labels=("exportbot",),
                          body=f"{DASHBOARD_MARKER}\nUpdated in place by exportbot.\n\n<!-- exportbot:dashboard-rows [] -->\n")  # fmt: skip
    fake_github.add_issue("huggingface/transformers", "Informer distil mask not downsampled")
    config = tmp_path / "pyproject.toml"
    config.write_text(f'[tool.exportbot]\nrepository = "{REPO}"\ndashboard = true\n')
    env = {**os.environ, "GITHUB_TOKEN": "ghp_FAKEtoken", "HF_HUB_OFFLINE": "1", "CI": ""}

    def link(url: str, *extra: str) -> Any:
        return CliRunner().invoke(upstream_group, ["link", ITEM, url, "--github-url", fake_github.url, "--config",
                                                   str(config), *extra], env=env)  # fmt: skip

    good = "https://github.com/huggingface/transformers/issues/1"
    dry = link(good)
    assert dry.exit_code == 0 and "would update dashboard #1" in dry.output
    assert "exportbot:link" not in client(fake_github).get_repo(REPO).get_issue(1).body  # a dry run writes nothing
    done = link(good, "--apply")
    assert done.exit_code == 0, done.output
    assert f"- [x] <!-- exportbot:link {ITEM} {good} -->" in client(fake_github).get_repo(REPO).get_issue(1).body

    for url, said in (("https://github.com/pytorch/pytorch/issues/1", "not in huggingface/transformers"),
                      ("https://github.com/huggingface/transformers/issues/99", "does not resolve"),
                      ("https://example.com/issue/1", "is not a GitHub issue")):  # fmt: skip
        refused = link(url, "--apply")
        assert refused.exit_code == 2 and said in refused.output and "Traceback" not in refused.output
        assert len(refused.output.strip().splitlines()) == 1


# ── The dashboard's section (pure) ──
def test_the_section_files_a_verified_draft_in_one_click_links_a_long_one_and_flags_a_stale_one():
    from bot.github.dashboard import upstream_section

    short = TrackingRow("_fix_a", "workaround", "fx_node_fix (onnx)", "verified", "fails as recorded",
                        "pytorch/pytorch", "docs/upstream-drafts/_fix_a.md", "A fails", "short body")  # fmt: skip
    long = TrackingRow("_fix_b", "workaround", "fx_node_fix (onnx)", "verified", "fails as recorded",
                       "pytorch/pytorch", "docs/upstream-drafts/_fix_b.md", "B fails", "x" * 9000)  # fmt: skip
    stale = TrackingRow("_fix_c", "workaround", "patch (onnx)", "stale", "its script no longer fails",
                        "pytorch/pytorch", "docs/upstream-drafts/_fix_c.md", "C", "body")  # fmt: skip
    internal = TrackingRow("_rule_d", "workaround", "pytree_rule (dynamo)", "internal",
                           "exportbot-internal, not an upstream bug: it corrects exportbot's own walk", None, None,
                           None, None)  # fmt: skip
    lines = upstream_section([short, long, stale, internal], None, REPO, "main")
    text = "\n".join(lines)
    assert "[file it in pytorch/pytorch](https://github.com/pytorch/pytorch/issues/new?title=A+fails&body=short+body)" in text
    assert ("file it in pytorch/pytorch: too long for a prefilled link, copy "
            f"[_fix_b.md](https://github.com/{REPO}/blob/main/docs/upstream-drafts/_fix_b.md)") in text
    assert "**stale** draft" in text and "its script no longer fails" in text
    assert "**internal** · exportbot-internal, not an upstream bug: it corrects exportbot's own walk" in text
    assert "4 items have no upstream issue: 2 verified, 1 internal, 0 unverified, 1 stale, 0 nothing" in text
