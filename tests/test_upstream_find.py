"""``exportbot upstream find``: repository-scoped issue search through PyGithub against the fake GitHub.

The search budget is GitHub's (30 a minute; the fake answers past it with 403 and ``retry-after``): the client
paces itself under it, waits out a 403/429 as ``retry-after`` says, and gives up on an item (uncached) when the
wait is longer than it may sit out. Results are cached per item fingerprint and ranked locally; nothing is
linked by a search.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_github import FakeGitHub, Fault
from github import Auth, Github
from test_json_output import assert_same_shape, documented

from bot.audit.candidates import SearchHit, failure_text, fingerprint, queries, rank
from bot.audit.drafts import repository_of
from bot.cli.upstream import upstream_group
from bot.github.search import IssueSearch, SearchStopped
from bot.run.tracking import Drafts

ITEM = "informer-distil-mask-not-downsampled"  # a ledger entry without upstream, fixed in huggingface/transformers
ROOT = Path(__file__).resolve().parents[1]


def client(server: FakeGitHub) -> Github:
    return Github(base_url=server.url, auth=Auth.Token("ghp_FAKEtoken"), retry=None, seconds_between_requests=0,
                  seconds_between_writes=0)  # fmt: skip


def answered(server: FakeGitHub, status: int) -> int:
    return server.count("/search/issues", status=status)


# ── Pacing and backing off ──
def test_searches_are_paced_under_the_budget_and_never_refused():
    with FakeGitHub(search_limit=3, search_window=1.0) as server:
        server.add_repo("pytorch/pytorch")
        search = IssueSearch(client(server), per_minute=3, window=1.0)
        for n in range(7):
            assert search.search(f"repo:pytorch/pytorch word{n}") == []
        assert (answered(server, 200), answered(server, 403)) == (7, 0)
        assert search.waited > 0.5  # 7 searches at 3 a second cannot go out in under 2 windows' worth of waits


def test_a_403_with_retry_after_is_waited_out_and_the_search_made_again():
    # The client's own pace is out of the way (100 a window): the fake's budget of 2 a window refuses the third.
    with FakeGitHub(search_limit=2, search_window=1.0) as server:
        server.add_repo("pytorch/pytorch")
        server.add_issue("pytorch/pytorch", "cummin export fails", body="aten.cummin is not supported")
        slept: list[float] = []
        search = IssueSearch(client(server), per_minute=100, window=1.0,
                             sleep=lambda s: (slept.append(s), time.sleep(s)))  # fmt: skip
        found = [search.search("repo:pytorch/pytorch cummin") for _ in range(3)]
        assert [len(hits) for hits in found] == [1, 1, 1]
        assert answered(server, 403) == 1 and slept == [1.0]  # the retry-after the fake sent, slept once


def test_a_429_secondary_limit_is_waited_out_too():
    with FakeGitHub() as server:
        server.add_repo("pytorch/pytorch")
        server.inject("/search/issues", Fault.too_many_requests(retry_after=2))
        slept: list[float] = []
        search = IssueSearch(client(server), sleep=slept.append)
        assert search.search("repo:pytorch/pytorch anything") == []
        assert slept == [2.0] and answered(server, 429) == 1 and answered(server, 200) == 1


def test_a_wait_longer_than_allowed_stops_the_search_with_a_reason():
    with FakeGitHub() as server:
        server.add_repo("pytorch/pytorch")
        server.inject("/search/issues", Fault.too_many_requests(retry_after=600, status=403))
        search = IssueSearch(client(server), max_wait=60, sleep=lambda s: pytest.fail("must not sleep 600 s"))
        with pytest.raises(SearchStopped, match="wait 600 s"):
            search.search("repo:pytorch/pytorch anything")


# ── Ranking (pure) ──
def test_ranking_puts_the_hit_that_repeats_the_failure_first_whatever_github_order():
    text = "RuntimeError: aten.cummin.default has no ONNX translation in onnxscript"
    weak = SearchHit("https://github.com/o/r/issues/9", "o/r", 9, "ONNX export question", "open", "issue",
                     "how do I export to onnx")  # fmt: skip
    strong = SearchHit("https://github.com/o/r/issues/3", "o/r", 3, "aten.cummin has no translation", "open", "issue",
                       "aten.cummin.default has no ONNX translation")  # fmt: skip
    ranked = rank([weak, strong, weak], text)
    assert [c.number for c in ranked] == [3, 9] and ranked[0].score > ranked[1].score
    assert "aten.cummin.default" in ranked[0].shared


# ── The command ──
def _subject() -> tuple[str, str, list[str]]:
    drafts = Drafts(None)
    item = drafts.by_id[ITEM]
    repository = repository_of(item, drafts.files.notes.get(ITEM))
    text = failure_text(item, drafts.files.runs.get(ITEM))
    assert repository is not None and not item.upstream
    return repository, text, queries(item, repository, text)


def test_find_searches_the_items_repository_ranks_caches_and_links_nothing(tmp_path: Path):
    repository, text, searches = _subject()
    watched = [ROOT / "registry" / "export_skips.toml", ROOT / "registry" / "onnx_disable_optimize.toml"]
    before = [path.read_bytes() for path in watched]
    cache = tmp_path / "find.json"
    with FakeGitHub() as server:
        server.add_repo(repository)
        server.add_repo("pytorch/pytorch")
        # The issue that quotes the failure; one that only mentions the model; one elsewhere with the same text.
        server.add_issue(repository, "InformerModel export fails: distil mask", body=f"torch.export of InformerModel "
                                                                                    f"export:\n{text}")  # fmt: skip
        server.add_issue(repository, "InformerModel export docs", body="how to export InformerModel")
        server.add_issue("pytorch/pytorch", "the same words", body=f"InformerModel export\n{text}")
        options = [ITEM, "--github-url", server.url, "--cache", str(cache), "--json"]
        env = {**os.environ, "GITHUB_TOKEN": "ghp_FAKEtoken", "HF_HUB_OFFLINE": "1"}
        first = CliRunner().invoke(upstream_group, ["find", *options], env=env)
        assert first.exit_code == 0, first.output
        result = json.loads(first.stdout)
        item = result["items"][0]
        assert (result["searched"], result["cached"]) == (1, 0) and item["queries"] == searches
        assert_same_shape(result, documented("upstream-tracking.md", "`exportbot upstream find --json`"))
        urls = [c["url"] for c in item["candidates"]]
        assert urls[0] == f"https://github.com/{repository}/issues/1"  # the one that repeats the failure
        assert all(f"github.com/{repository}/" in url for url in urls)  # scoped to the item's repository
        assert item["candidates"][0]["score"] > item["candidates"][-1]["score"]
        made = server.count("/search/issues")
        assert made == len(searches)
        assert all(r.query["q"][0].startswith(f"repo:{repository} ") for r in server.requests
                   if r.path == "/search/issues")  # fmt: skip

        again = CliRunner().invoke(upstream_group, ["find", *options], env=env)
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["cached"] == 1 and server.count("/search/issues") == made  # the cache answered
        assert json.loads(cache.read_text())["items"][ITEM]["fingerprint"] == fingerprint(
            Drafts(None).by_id[ITEM], repository, text)
        assert not [r for r in server.requests if r.method != "GET"]  # a search writes nothing to GitHub
    assert [path.read_bytes() for path in watched] == before  # and links nothing in the ledger


def test_find_refuses_an_item_that_is_already_linked():
    linked = next(item.id for item in Drafts(None).items if item.upstream)
    done = CliRunner().invoke(upstream_group, ["find", linked, "--github-url", "http://127.0.0.1:9"])
    assert done.exit_code == 2 and "already link" in done.output and "Traceback" not in done.output


def test_queries_are_few_scoped_and_within_githubs_length():
    from bot.audit.drafts import TrackedItem

    item = TrackedItem("_aten_demo", "workaround", "onnx", "onnxscript", None, "demo", "exporters/onnx/x.py",
                       "onnx_translation (onnx)")  # fmt: skip
    text = ("DispatchError: No ONNX function found for <OpOverload(op='aten.cummin', overload='default')> "
            "while translating node cummin_default in exported_program " + "x" * 400)
    found = queries(item, "microsoft/onnxscript", text)
    assert 1 <= len(found) <= 3 and all(q.startswith("repo:microsoft/onnxscript ") for q in found)
    assert all(len(q) <= 256 for q in found)
    assert found[0] == 'repo:microsoft/onnxscript "No ONNX function found for"'
    assert any("aten.cummin" in q for q in found)
