"""bot.github.tracker through the real PyGithub client, over real HTTP, against tests/fake_github.py.

Also checks the fake server itself: its payloads against GitHub's OpenAPI schemas, and the write
endpoints the pull-request feature will use, driven by PyGithub.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from fake_github import (
    FakeGitHub,
    Fault,
    fake_github_fixture,  # noqa: F401 (provides the fake_github fixture)
)
from github import Auth, Github, InputGitTreeElement

from bot.audit.upstream import NOT_FOUND, NOT_GITHUB, RateLimited, UpstreamRef, parse_upstream
from bot.github.tracker import OfflineTracker, SnapshotError, Tracker, write_snapshot

TOKEN = "ghp_FAKE0123456789abcdefTOKENdoNOTleak"
REPO = "pytorch/pytorch"
REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_NAME = "github-rest-openapi-subset.json"


def web(number: int, kind: str = "issues", repo: str = REPO) -> str:
    return f"https://github.com/{repo}/{kind}/{number}"


def client(server: FakeGitHub, *, timeout: int = 2, token: str | None = TOKEN) -> Github:
    return Github(
        base_url=server.url,
        auth=Auth.Token(token) if token else None,
        retry=None,
        timeout=timeout,
        seconds_between_requests=0,
        seconds_between_writes=0,
    )


def tracker(server: FakeGitHub, *, timeout: int = 2, **options: Any) -> Tracker:
    """A tracker on the fake server that answers for github.com URLs, with tiny backoffs."""
    settings: dict[str, Any] = {"retries": 2, "backoff": 0.01, "max_wait": 5.0, "web_host": "github.com"}
    return Tracker.from_env(github=client(server, timeout=timeout), **(settings | options))


def issue_gets(server: FakeGitHub, number: int, repo: str = REPO) -> int:
    return server.count(f"/repos/{repo}/issues/{number}", method="GET")


# ---- URL parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/pytorch/pytorch/issues/123", "https://github.com/pytorch/pytorch/issues/123"),
        ("https://github.com/onnx/onnx/pull/7/files", "https://github.com/onnx/onnx/pull/7"),
        ("https://github.com/onnx/onnx/pulls/7", "https://github.com/onnx/onnx/pull/7"),
        ("https://github.com/a/b.c/issues/9#issuecomment-1", "https://github.com/a/b.c/issues/9"),
        ("http://www.github.com/a/b/issues/9?x=1", "https://github.com/a/b/issues/9"),
        ("https://ghe.corp.example/a/b/issues/9", None),
        ("  https://GitHub.com/a/b/issues/9  ", "https://github.com/a/b/issues/9"),
    ],
)
def test_parse_upstream_canonical_urls(url: str, expected: str | None) -> None:
    ref = parse_upstream(url)
    assert (ref.url if ref else None) == expected


@pytest.mark.parametrize(
    "url",
    [
        "https://gitlab.com/a/b/-/issues/1",
        "https://bugs.python.org/issue1234",
        "https://github.com/a/b/discussions/5",
        "https://github.com/a/b",
        "https://github.com/a/b/issues/0",
        "https://github.com.evil.example/a/b/issues/1",
        "pytorch/pytorch#123",
    ],
)
def test_parse_upstream_rejects_other_trackers(url: str) -> None:
    assert parse_upstream(url) is None


def test_parse_upstream_enterprise_hosts_and_identity() -> None:
    ref = parse_upstream("https://ghe.corp.example/ml/exporters/issues/4", "https://ghe.corp.example/api/v3")
    assert ref == UpstreamRef("https://ghe.corp.example/ml/exporters/issues/4", "ml", "exporters", 4)
    assert parse_upstream("https://acme.ghe.com/o/r/pull/2", "https://api.acme.ghe.com") is not None
    assert parse_upstream("https://ghe.corp.example/ml/exporters/issues/4") is None
    pull, issue = (
        parse_upstream(web(7, "pull")),
        parse_upstream("https://github.com/PyTorch/PyTorch/issues/7"),
    )
    assert pull is not None and issue is not None
    assert pull.key == issue.key == "github.com/pytorch/pytorch#7"


# ---- states -----------------------------------------------------------------------------------------


def test_closed_completed_issue(fake_github: FakeGitHub) -> None:
    number = fake_github.add_issue(
        REPO, "export fails on aten::foo", state="closed", state_reason="completed"
    )
    state = tracker(fake_github).state(web(number))
    assert state.ref == parse_upstream(web(number))
    assert (state.kind, state.state, state.state_reason, state.merged) == (
        "issue",
        "closed",
        "completed",
        None,
    )
    assert state.title == "export fails on aten::foo"
    assert state.reachable and state.error is None
    assert state.closed_at is not None
    assert abs(datetime.fromisoformat(state.closed_at).timestamp() - time.time()) < 60
    assert state.closed_as_fixed


@pytest.mark.parametrize("reason", ["not_planned", "duplicate"])
def test_closed_for_other_reasons_is_not_fixed(fake_github: FakeGitHub, reason: str) -> None:
    number = fake_github.add_issue(REPO, state="closed", state_reason=reason)
    state = tracker(fake_github).state(web(number))
    assert (state.state, state.state_reason) == ("closed", reason)
    assert not state.closed_as_fixed


def test_reopened_and_open_issues(fake_github: FakeGitHub) -> None:
    reopened = fake_github.add_issue(REPO, state="closed")
    fake_github.reopen_issue(REPO, reopened)
    still_open = fake_github.add_issue(REPO)
    client_tracker = tracker(fake_github)
    first, second = client_tracker.state(web(reopened)), client_tracker.state(web(still_open))
    assert (first.state, first.state_reason, first.closed_at) == ("open", "reopened", None)
    assert (second.state, second.state_reason) == ("open", None)
    assert not first.closed_as_fixed and not second.closed_as_fixed


def test_pull_requests_merged_closed_and_open(fake_github: FakeGitHub) -> None:
    merged = fake_github.add_pull(REPO, head="fix-a", merged=True)
    unmerged = fake_github.add_pull(REPO, head="fix-b", state="closed")
    still_open = fake_github.add_pull(REPO, head="fix-c")
    client_tracker = tracker(fake_github)
    states = [client_tracker.state(web(n, "pull")) for n in (merged, unmerged, still_open)]
    assert [(s.kind, s.state, s.merged) for s in states] == [
        ("pull", "closed", True),
        ("pull", "closed", False),
        ("pull", "open", False),
    ]
    assert [s.closed_as_fixed for s in states] == [True, False, False]
    assert fake_github.count(f"/repos/{REPO}/pulls/*") == 0  # merged_at came with the issue payload
    assert fake_github.count(f"/repos/{REPO}/issues/*") == 3


def test_pull_merged_from_pulls_endpoint_when_issue_lacks_merged_at() -> None:
    with FakeGitHub(issue_merged_at=False) as server:
        merged = server.add_pull(REPO, merged=True)
        state = tracker(server).state(web(merged, "pull"))
        assert (state.kind, state.merged, state.closed_as_fixed) == ("pull", True, True)
        assert server.count(f"/repos/{REPO}/pulls/{merged}") == 1


def test_issue_url_that_is_really_a_pull_request(fake_github: FakeGitHub) -> None:
    number = fake_github.add_pull(REPO, merged=True)
    state = tracker(fake_github).state(web(number, "issues"))
    assert (state.kind, state.merged) == ("pull", True)


def test_not_found_is_reachable_with_error_and_not_retried(fake_github: FakeGitHub) -> None:
    fake_github.add_repo(REPO)
    state = tracker(fake_github).state(web(404))
    assert state.reachable
    assert (state.error, state.state, state.closed_as_fixed) == (NOT_FOUND, None, False)
    assert issue_gets(fake_github, 404) == 1


def test_non_github_url_is_for_a_human_and_costs_no_request(fake_github: FakeGitHub) -> None:
    state = tracker(fake_github).state("https://gitlab.com/a/b/-/issues/1")
    assert (state.reachable, state.error, state.ref) == (False, NOT_GITHUB, None)
    enterprise = tracker(fake_github, web_host="ghe.corp.example")
    other_host = enterprise.state(web(1))
    assert not other_host.reachable and "not served by" in str(other_host.error)
    assert fake_github.requests == []


def test_one_request_per_distinct_issue(fake_github: FakeGitHub) -> None:
    number = fake_github.add_issue(REPO, state="closed")
    other = fake_github.add_issue(REPO)
    client_tracker = tracker(fake_github)
    urls = [web(number), web(number, "pull"), f"{web(number)}#issuecomment-5", web(other), web(other)]
    states = [client_tracker.state(url) for url in urls]
    assert issue_gets(fake_github, number) == 1
    assert issue_gets(fake_github, other) == 1
    assert len(fake_github.requests) == 2
    assert states[0] == states[1] == states[2]


# ---- failures ---------------------------------------------------------------------------------------


def test_server_error_then_success_is_retried(fake_github: FakeGitHub) -> None:
    number = fake_github.add_issue(REPO, state="closed")
    fake_github.inject(f"/repos/{REPO}/issues/{number}", Fault.error(500))
    state = tracker(fake_github).state(web(number))
    assert (state.reachable, state.state) == (True, "closed")
    assert [r.status for r in fake_github.requests] == [500, 200]


def test_bad_gateway_forever_is_unreachable_then_circuit_breaker_opens(fake_github: FakeGitHub) -> None:
    first, second = fake_github.add_issue(REPO, state="closed"), fake_github.add_issue(REPO, state="closed")
    fake_github.inject("/repos/*", Fault.error(502), times=None)
    client_tracker = tracker(fake_github, retries=2, breaker_threshold=1)
    state = client_tracker.state(web(first))
    assert (state.reachable, state.state) == (False, None)
    assert state.error == "HTTP 502 after 3 attempts"
    assert not state.closed_as_fixed
    assert len(fake_github.requests) == 3
    short_circuited = client_tracker.state(web(second))
    assert (short_circuited.reachable, short_circuited.state) == (False, None)
    assert "kept failing" in str(short_circuited.error)
    assert len(fake_github.requests) == 3  # no new request


def test_circuit_breaker_counts_consecutive_failures_only(fake_github: FakeGitHub) -> None:
    numbers = [fake_github.add_issue(REPO) for _ in range(4)]
    client_tracker = tracker(fake_github, retries=0, breaker_threshold=2)
    fake_github.inject(f"/repos/{REPO}/issues/{numbers[0]}", Fault.error(502))
    fake_github.inject(f"/repos/{REPO}/issues/{numbers[2]}", Fault.error(503))
    reachable = [client_tracker.state(web(n)).reachable for n in numbers]
    assert reachable == [False, True, False, True]  # a success in between resets the count
    assert len(fake_github.requests) == 4


def test_primary_rate_limit_with_near_reset_waits_then_succeeds(fake_github: FakeGitHub) -> None:
    number = fake_github.add_issue(REPO, state="closed")
    fake_github.inject(f"/repos/{REPO}/issues/{number}", Fault.rate_limited(reset_in=2))
    waits: list[float] = []
    state = tracker(fake_github, max_wait=10, sleep=waits.append).state(web(number))
    assert (state.reachable, state.state) == (True, "closed")
    assert len(waits) == 1 and 0 < waits[0] <= 4
    assert [r.status for r in fake_github.requests] == [403, 200]


def test_primary_rate_limit_with_far_reset_raises_for_a_partial_report(fake_github: FakeGitHub) -> None:
    done, blocked = fake_github.add_issue(REPO, state="closed"), fake_github.add_issue(REPO)
    client_tracker = tracker(fake_github, max_wait=5)
    client_tracker.state(web(done))
    fake_github.inject("/repos/*", Fault.rate_limited(reset_in=3600))
    with pytest.raises(RateLimited) as caught:
        client_tracker.state(web(blocked))
    assert abs(caught.value.reset_at.timestamp() - (time.time() + 3600)) < 10
    assert caught.value.host == "github.com"
    assert list(client_tracker.snapshot()["states"]) == [f"github.com/pytorch/pytorch#{done}"]


def test_spent_server_budget_raises_rate_limited() -> None:
    with FakeGitHub(rate_limit=1) as server:
        first, second = server.add_issue(REPO), server.add_issue(REPO)
        client_tracker = tracker(server)
        assert client_tracker.state(web(first)).reachable
        with pytest.raises(RateLimited) as caught:
            client_tracker.state(web(second))
        assert caught.value.reset_at.timestamp() == pytest.approx(server.rate_reset, abs=5)
        assert [r.status for r in server.requests] == [200, 403]


def test_secondary_rate_limit_429_honours_retry_after(fake_github: FakeGitHub) -> None:
    number = fake_github.add_issue(REPO, state="closed")
    fake_github.inject(f"/repos/{REPO}/issues/{number}", Fault.too_many_requests(retry_after=1))
    started = time.monotonic()
    state = tracker(fake_github).state(web(number))  # the real clock
    assert time.monotonic() - started >= 1.0
    assert state.state == "closed"
    assert [r.status for r in fake_github.requests] == [429, 200]


def test_secondary_rate_limit_403_with_far_retry_after_raises(fake_github: FakeGitHub) -> None:
    number = fake_github.add_issue(REPO)
    fake_github.inject("/repos/*", Fault.too_many_requests(retry_after=600, status=403))
    with pytest.raises(RateLimited):
        tracker(fake_github, max_wait=60).state(web(number))


def test_slow_response_times_out_and_is_retried(fake_github: FakeGitHub) -> None:
    number = fake_github.add_issue(REPO, state="closed")
    fake_github.inject(f"/repos/{REPO}/issues/{number}", Fault.slow(1.6))
    state = tracker(fake_github, timeout=1).state(web(number))
    assert (state.reachable, state.state) == (True, "closed")
    assert issue_gets(fake_github, number) == 2


def test_slow_forever_is_unreachable(fake_github: FakeGitHub) -> None:
    number = fake_github.add_issue(REPO, state="closed")
    fake_github.inject("/repos/*", Fault.slow(1.6), times=None)
    state = tracker(fake_github, timeout=1, retries=1).state(web(number))
    assert (state.reachable, state.state, state.error) == (False, None, "timed out after 2 attempts")


def test_malformed_json_is_unreachable(fake_github: FakeGitHub) -> None:
    number = fake_github.add_issue(REPO, state="closed")
    fake_github.inject(f"/repos/{REPO}/issues/{number}", Fault.malformed())
    state = tracker(fake_github).state(web(number))
    assert (state.reachable, state.state) == (False, None)
    assert "malformed JSON" in str(state.error)


def test_forbidden_is_unknown_and_not_retried(fake_github: FakeGitHub) -> None:
    number = fake_github.add_issue(REPO)
    fake_github.inject("/repos/*", Fault.error(403, "Resource protected by organization SAML enforcement."))
    state = tracker(fake_github).state(web(number))
    assert (state.reachable, state.state) == (False, None)
    assert state.error == "HTTP 403: Resource protected by organization SAML enforcement."
    assert len(fake_github.requests) == 1


# ---- conditional requests and snapshots -------------------------------------------------------------


def test_etag_revalidation_uses_304_and_spares_the_rate_limit(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    number = fake_github.add_issue(REPO, "unchanged", state="closed", state_reason="not_planned")
    first = tracker(fake_github)
    before = first.state(web(number))
    snapshot = write_snapshot(first, tmp_path / "tracker.json")
    assert before.ref is not None
    assert json.loads(snapshot.read_text())["states"][before.ref.key]["etag"].startswith('W/"')

    remaining = fake_github.rate_remaining
    again = tracker(fake_github, previous_snapshot=snapshot).state(web(number))
    assert again == before
    last = fake_github.requests[-1]
    assert (last.status, "if-none-match" in last.headers) == (304, True)
    assert fake_github.rate_remaining == remaining

    fake_github.reopen_issue(REPO, number)
    changed = tracker(fake_github, previous_snapshot=snapshot).state(web(number))
    assert (changed.state, changed.state_reason) == ("open", "reopened")
    assert fake_github.requests[-1].status == 200
    assert fake_github.rate_remaining == remaining - 1


def test_snapshot_round_trip_through_offline_tracker(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fixed = fake_github.add_issue(REPO, "fixed", state="closed")
    pull = fake_github.add_pull(REPO, merged=True)
    broken = fake_github.add_issue("onnx/onnx")
    fake_github.inject(f"/repos/onnx/onnx/issues/{broken}", Fault.malformed())
    urls = [web(fixed), web(pull, "pull"), web(999), web(broken, repo="onnx/onnx")]
    online = tracker(fake_github)
    states = [online.state(url) for url in urls]
    path = write_snapshot(online, tmp_path / "snapshot.json")

    offline = Tracker.from_snapshot(path)
    assert isinstance(offline, OfflineTracker)
    assert [offline.state(url) for url in urls] == states
    assert offline.state(web(fixed, "pull")).closed_as_fixed  # same issue, other URL form
    assert offline.state(web(12345)).error == f"not in tracker snapshot {path}"
    assert offline.state("https://example.com/bug/1").error == NOT_GITHUB
    assert json.loads(json.dumps(offline.snapshot())) == json.loads(path.read_text())


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("{not json", "not JSON"),
        ('{"format": "something-else", "version": 1, "states": {}}', "not a tracker snapshot"),
        ('{"format": "exportbot-tracker-snapshot", "version": 99, "states": {}}', "version 99"),
        ('{"format": "exportbot-tracker-snapshot", "version": 1, "states": []}', "no 'states'"),
    ],
)
def test_unusable_snapshot_files(tmp_path: Path, content: str, complaint: str) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text(content)
    with pytest.raises(SnapshotError, match=complaint):
        OfflineTracker(path)
    with pytest.raises(SnapshotError, match="cannot read"):
        OfflineTracker(tmp_path / "missing.json")


# ---- the token --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variables", "token_env", "authenticated"),
    [
        ({"GITHUB_TOKEN": TOKEN}, None, True),
        ({"GH_TOKEN": TOKEN}, None, True),
        ({"EXPORTBOT_TOKEN": TOKEN, "GITHUB_TOKEN": ""}, "EXPORTBOT_TOKEN", True),
        ({"GITHUB_TOKEN": "  "}, None, False),
        ({}, None, False),
    ],
)
def test_from_env_reads_the_token_from_the_environment(
    fake_github: FakeGitHub,
    monkeypatch: pytest.MonkeyPatch,
    variables: dict[str, str],
    token_env: str | None,
    authenticated: bool,
) -> None:
    for name in ("GITHUB_TOKEN", "GH_TOKEN", "EXPORTBOT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    number = fake_github.add_issue(REPO, state="closed")
    state = Tracker.from_env(fake_github.url, token_env, web_host="github.com", retries=0).state(web(number))
    assert state.state == "closed"
    assert [r.authenticated for r in fake_github.requests] == [authenticated]


def test_token_never_appears_in_logs_errors_reprs_or_snapshots(
    fake_github: FakeGitHub, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    caplog.set_level(logging.DEBUG)  # PyGithub and urllib3 log requests at DEBUG
    ok, flaky, blocked = (fake_github.add_issue(REPO, state="closed") for _ in range(3))
    fake_github.inject(f"/repos/{REPO}/issues/{flaky}", Fault.error(502), times=None)
    client_tracker = Tracker.from_env(fake_github.url, web_host="github.com", retries=1, backoff=0.01)
    states = [client_tracker.state(web(n)) for n in (ok, flaky, 999)]
    fake_github.inject("/repos/*", Fault.rate_limited(reset_in=3600))
    with pytest.raises(RateLimited) as caught:
        client_tracker.state(web(blocked))

    assert all(r.authenticated for r in fake_github.requests)  # the token was really sent
    assert f"/repos/{REPO}/issues/{ok}" in caplog.text  # PyGithub's request log was captured
    texts = [
        caplog.text,
        *(record.getMessage() for record in caplog.records),
        str(caught.value),
        repr(caught.value),
        repr(client_tracker),
        json.dumps(client_tracker.snapshot()),
        *map(repr, states),
        *map(repr, fake_github.requests),
    ]
    assert not [text for text in texts if TOKEN in text]


# ---- the fake server itself -------------------------------------------------------------------------


def _schema_file() -> Path:
    """GitHub's own response schemas (a subset of its public OpenAPI description), vendored under
    tests/data/ so the check runs wherever the tests do; never a skip."""
    return Path(__file__).parent / "data" / SCHEMA_NAME


class SchemaChecker:
    """Just enough OpenAPI 3.0 to check GitHub's response schemas: $ref, type, nullable, required,
    properties, items, oneOf, enum and the date-time/uri formats. A $ref to a component missing from
    the subset is not checked."""

    def __init__(self, path: Path) -> None:
        document = json.loads(path.read_text())
        self.components: dict[str, Any] = document["components"]
        self.operations: dict[str, Any] = document["operations"]

    def errors(self, value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
        nullable = bool(schema.get("nullable"))
        while "$ref" in schema:
            schema = self.components.get(schema["$ref"].rsplit("/", 1)[-1], {})
            nullable = nullable or bool(schema.get("nullable"))
        if value is None:
            return [] if nullable or not schema else [f"{where}: null"]
        if "oneOf" in schema:
            fits = any(not self.errors(value, option, where) for option in schema["oneOf"])
            return [] if fits else [f"{where}: matches no oneOf branch"]
        kind = schema.get("type")
        types = {
            "string": str,
            "integer": int,
            "number": (int, float),
            "boolean": bool,
            "object": dict,
            "array": list,
        }
        if kind in types and (
            not isinstance(value, types[kind]) or (kind != "boolean" and isinstance(value, bool))
        ):
            return [f"{where}: expected {kind}, got {type(value).__name__}"]
        if "enum" in schema and value not in schema["enum"]:
            return [f"{where}: {value!r} not in {schema['enum']}"]
        found = (
            [f"{where}: {value!r} is not {schema.get('format')}"]
            if not self._format_ok(value, schema)
            else []
        )
        if kind == "object":
            found += [f"{where}.{name}: missing" for name in schema.get("required", []) if name not in value]
            for name, sub in schema.get("properties", {}).items():
                if name in value:
                    found += self.errors(value[name], sub, f"{where}.{name}")
        if kind == "array" and "items" in schema:
            for index, item in enumerate(value):
                found += self.errors(item, schema["items"], f"{where}[{index}]")
        return found

    @staticmethod
    def _format_ok(value: Any, schema: dict[str, Any]) -> bool:
        if schema.get("format") == "date-time":
            try:
                return value.endswith("Z") and datetime.fromisoformat(value).tzinfo == UTC
            except ValueError:
                return False
        if schema.get("format") == "uri":
            parts = urlsplit(value)
            return bool(parts.scheme and parts.netloc)
        return True

    def check(self, operation: str, status: int, payload: Any) -> list[str]:
        return self.errors(payload, self.operations[operation][str(status)])


def call(server: FakeGitHub, method: str, path: str, body: Any = None) -> tuple[int, Any, dict[str, str]]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {TOKEN}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            raw, status, headers = response.read(), response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        raw, status, headers = error.read(), error.code, dict(error.headers)
    return status, json.loads(raw) if raw else None, {k.lower(): v for k, v in headers.items()}


def test_fake_server_payloads_follow_githubs_openapi_schemas(fake_github: FakeGitHub) -> None:
    """Every operation the bot uses, checked against GitHub's response schema for it. (No issue closed
    as "duplicate" here: GitHub added that state_reason after the schema subset was taken.)"""
    schemas = SchemaChecker(_schema_file())
    problems: list[str] = []

    def check(operation: str, path: str, body: Any = None, status: int = 200) -> Any:
        got, payload, headers = call(fake_github, operation.split()[0], path, body)
        assert got == status, (operation, got, payload)
        assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} <= set(headers)
        problems.extend(f"{operation}: {problem}" for problem in schemas.check(operation, got, payload))
        return payload

    repo = f"/repos/{REPO}"
    closed = fake_github.add_issue(REPO, state="closed", state_reason="not_planned", labels=("bug",))
    reopened = fake_github.add_issue(REPO, state="closed")
    fake_github.reopen_issue(REPO, reopened)
    merged, unmerged = fake_github.add_pull(REPO, head="a", merged=True), fake_github.add_pull(REPO, head="b")
    main = fake_github.branch_sha(REPO, "main")

    check("GET /rate_limit", "/rate_limit")
    check("GET /repos/{owner}/{repo}", repo)
    for number in (closed, reopened, merged, unmerged):
        check("GET /repos/{owner}/{repo}/issues/{issue_number}", f"{repo}/issues/{number}")
    for number in (merged, unmerged):
        check("GET /repos/{owner}/{repo}/pulls/{pull_number}", f"{repo}/pulls/{number}")
    check("GET /repos/{owner}/{repo}/issues", f"{repo}/issues?state=all")
    check("GET /repos/{owner}/{repo}/pulls", f"{repo}/pulls?state=all")

    created = check(
        "POST /repos/{owner}/{repo}/issues", f"{repo}/issues", {"title": "t", "labels": ["x"]}, 201
    )
    issue = f"{repo}/issues/{created['number']}"
    check("PATCH /repos/{owner}/{repo}/issues/{issue_number}", issue, {"state": "closed"})
    comment = check(
        "POST /repos/{owner}/{repo}/issues/{issue_number}/comments", f"{issue}/comments", {"body": "hi"}, 201
    )
    check("GET /repos/{owner}/{repo}/issues/{issue_number}/comments", f"{issue}/comments")
    check("GET /repos/{owner}/{repo}/issues/comments/{comment_id}", f"{repo}/issues/comments/{comment['id']}")
    check(
        "PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}",
        f"{repo}/issues/comments/{comment['id']}",
        {"body": "edited"},
    )
    check(
        "POST /repos/{owner}/{repo}/issues/{issue_number}/labels",
        f"{issue}/labels",
        {"labels": ["exportbot"]},
    )
    check("PUT /repos/{owner}/{repo}/issues/{issue_number}/labels", f"{issue}/labels", ["a", "b"])
    check("DELETE /repos/{owner}/{repo}/issues/{issue_number}/labels/{name}", f"{issue}/labels/a")
    check("GET /repos/{owner}/{repo}/issues/{issue_number}/labels", f"{issue}/labels")
    check("POST /repos/{owner}/{repo}/labels", f"{repo}/labels", {"name": "new", "color": "ff0000"}, 201)
    check("GET /repos/{owner}/{repo}/labels", f"{repo}/labels")
    check("GET /repos/{owner}/{repo}/labels/{name}", f"{repo}/labels/new")

    check("GET /repos/{owner}/{repo}/git/ref/{ref}", f"{repo}/git/ref/heads/main")
    check(
        "POST /repos/{owner}/{repo}/git/refs", f"{repo}/git/refs", {"ref": "refs/heads/bot", "sha": main}, 201
    )
    check("GET /repos/{owner}/{repo}/git/matching-refs/{ref}", f"{repo}/git/matching-refs/heads/")
    blob = check("POST /repos/{owner}/{repo}/git/blobs", f"{repo}/git/blobs", {"content": "x = 1\n"}, 201)
    check("GET /repos/{owner}/{repo}/git/blobs/{file_sha}", f"{repo}/git/blobs/{blob['sha']}")
    entries = [{"path": "pkg/mod.py", "mode": "100644", "type": "blob", "sha": blob["sha"]}]
    tree = check("POST /repos/{owner}/{repo}/git/trees", f"{repo}/git/trees", {"tree": entries}, 201)
    check("GET /repos/{owner}/{repo}/git/trees/{tree_sha}", f"{repo}/git/trees/{tree['sha']}?recursive=1")
    commit_body = {"message": "m", "tree": tree["sha"], "parents": [main]}
    commit = check("POST /repos/{owner}/{repo}/git/commits", f"{repo}/git/commits", commit_body, 201)
    check("GET /repos/{owner}/{repo}/git/commits/{commit_sha}", f"{repo}/git/commits/{commit['sha']}")
    check("PATCH /repos/{owner}/{repo}/git/refs/{ref}", f"{repo}/git/refs/heads/bot", {"sha": commit["sha"]})

    check("GET /repos/{owner}/{repo}/contents/{path}", f"{repo}/contents/pkg/mod.py?ref=bot")
    check("GET /repos/{owner}/{repo}/contents/{path}", f"{repo}/contents/pkg?ref=bot")
    put = {"message": "add", "content": "YSA9IDEK", "branch": "bot"}
    added = check("PUT /repos/{owner}/{repo}/contents/{path}", f"{repo}/contents/skips.toml", put, 201)
    delete = {"message": "drop", "sha": added["content"]["sha"], "branch": "bot"}
    check("DELETE /repos/{owner}/{repo}/contents/{path}", f"{repo}/contents/skips.toml", delete)

    pull_body = {"title": "Shrink", "head": "bot", "base": "main", "draft": True}
    pull = check("POST /repos/{owner}/{repo}/pulls", f"{repo}/pulls", pull_body, 201)
    check(
        "PATCH /repos/{owner}/{repo}/pulls/{pull_number}",
        f"{repo}/pulls/{pull['number']}",
        {"state": "closed"},
    )
    assert problems == []


def test_fake_server_write_flow_through_pygithub(fake_github: FakeGitHub) -> None:
    """The calls the shrink-PR feature needs, through PyGithub, read back from the server's state."""
    fake_github.add_repo("huggingface/exportbot", files={"skips.toml": "[a]\n", "docs/x.md": "x\n"})
    repo = client(fake_github).get_repo("huggingface/exportbot")
    main = repo.get_git_ref("heads/main")
    repo.create_git_ref("refs/heads/exportbot/shrink", main.object.sha)
    current = repo.get_contents("skips.toml", ref="exportbot/shrink")
    assert not isinstance(current, list) and current.decoded_content == b"[a]\n"
    repo.update_file("skips.toml", "shrink", "", current.sha, branch="exportbot/shrink")
    assert fake_github.read_file("huggingface/exportbot", "exportbot/shrink", "skips.toml") == ""
    assert fake_github.read_file("huggingface/exportbot", "main", "skips.toml") == "[a]\n"

    head = repo.get_git_commit(fake_github.branch_sha("huggingface/exportbot", "exportbot/shrink") or "")
    blob = repo.create_git_blob("print(1)\n", "utf-8")
    tree = repo.create_git_tree(
        [InputGitTreeElement("bot/new.py", "100644", "blob", sha=blob.sha)], head.tree
    )
    commit = repo.create_git_commit("add file", tree, [head])
    repo.get_git_ref("heads/exportbot/shrink").edit(commit.sha)
    assert fake_github.read_file("huggingface/exportbot", "exportbot/shrink", "bot/new.py") == "print(1)\n"
    assert fake_github.read_file("huggingface/exportbot", "exportbot/shrink", "docs/x.md") == "x\n"

    pull = repo.create_pull(
        base="main", head="exportbot/shrink", title="Shrink", body="<!-- meta -->", draft=True
    )
    listed = repo.get_pulls(state="open", head="huggingface:exportbot/shrink")
    assert [p.number for p in listed] == [pull.number]
    pull.edit(body="updated")
    pull.add_to_labels("exportbot")
    repo.get_issue(pull.number).create_comment("re-verified")
    assert fake_github.labels_of("huggingface/exportbot", pull.number) == ["exportbot"]
    assert fake_github.comments_of("huggingface/exportbot", pull.number) == ["re-verified"]
    assert [label.name for label in repo.get_labels()] == ["exportbot"]
    assert repo.get_pull(pull.number).body == "updated"
    pull.edit(state="closed")
    assert list(repo.get_pulls(state="open")) == []
