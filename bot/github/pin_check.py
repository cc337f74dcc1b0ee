"""The pull-request check for someone else's pin move (Dependabot, Renovate, a person): one sticky comment and
one check run on the PR, from the result of ``exportbot pin-check run`` (the same candidate audit as
``exportbot watch``, for the PR's pins against the base's).

Trust model (docs/github-actions.md): ``pin-check run`` executes the PR's code and installs the PR's pins, so it
runs in a ``pull_request`` job with a read-only token and no secret; its result is an artifact. ``pin-check
publish`` runs in a separate ``workflow_run`` job of the base branch's code, the only one allowed to write; it
never checks out or runs the PR's code and treats the artifact as untrusted input: :func:`check_result` accepts
only the expected fields and types, sizes are capped, text is shown as text, and a commit pushed to the PR
branch may change only the ledger and verification files and ``constraints.txt`` (and only when the PR's branch
is in this repository and ``--push`` is given).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from github import InputGitTreeElement

from bot.github.shrink_session import CONTENTS_WRITE, ISSUES_READ, ISSUES_WRITE, PULLS_READ, GitHubSession

PIN_CHECK_MARKER = "<!-- exportbot:pin-check -->"
CHECK_NAME = "exportbot pin check"
RESULT_SCHEMA = 1
MAX_TEXT = 60_000  # GitHub refuses comment bodies and check summaries over 65,536 characters
_PUSHABLE = re.compile(r"(?:constraints\.txt|registry/[A-Za-z0-9_.-]+\.toml)")


class ResultError(ValueError):
    """The pin-check result (an artifact of an untrusted job) is not one this command writes from."""


@dataclass(frozen=True)
class PinCheckResult:
    """What ``pin-check run`` found, as ``pin-check publish`` reads it back (checked field by field)."""

    moves: dict[str, tuple[str, str]]
    removals: tuple[str, ...]
    regressions: tuple[dict[str, str], ...]  # export, status, error, command
    withheld: tuple[str, ...]
    checked: tuple[str, ...]
    patch: str
    files: dict[str, str]  # repository path → its text after the removals (the commit to apply)
    problem: str | None = None  # the candidate could not be tried (one line)

    @property
    def conclusion(self) -> str:
        """The check run's conclusion: regressions fail it; a candidate that could not be tried is neutral."""
        if self.problem is not None:
            return "neutral"
        return "failure" if self.regressions else "success"

    def as_dict(self) -> dict[str, Any]:
        return {"schema": RESULT_SCHEMA, "moves": {k: list(v) for k, v in self.moves.items()},
                "removals": list(self.removals), "regressions": list(self.regressions), "withheld": list(self.withheld),
                "checked": list(self.checked), "patch": self.patch, "files": self.files, "problem": self.problem}  # fmt: skip


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ResultError(f"{where}: expected an array of strings")
    return tuple(value)


def check_result(data: Any) -> PinCheckResult:
    """The result if every field has the expected type and size; else :class:`ResultError` naming the field."""
    if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA:
        raise ResultError(f"not a pin-check result of schema {RESULT_SCHEMA}")
    moves = data.get("moves")
    if not isinstance(moves, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)
        for k, v in moves.items()
    ):
        raise ResultError("moves: expected an object of package → [base version, PR version]")
    regressions = data.get("regressions")
    keys = ("export", "status", "error", "command")
    if not isinstance(regressions, list) or not all(
        isinstance(r, dict) and set(r) == set(keys) and all(isinstance(r[k], str) for k in keys) for r in regressions
    ):
        raise ResultError(f"regressions: expected an array of objects with string fields {', '.join(keys)}")
    files = data.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ResultError("files: expected an object of repository path → text")
    outside = sorted(path for path in files if not _PUSHABLE.fullmatch(path))
    if outside:
        raise ResultError(f"files: {outside[0]!r} is not a ledger, verification or pin file")
    patch, problem = data.get("patch"), data.get("problem")
    if not isinstance(patch, str) or not (problem is None or isinstance(problem, str)):
        raise ResultError("patch/problem: expected text")
    return PinCheckResult(
        {k: (v[0], v[1]) for k, v in moves.items()}, _strings(data.get("removals"), "removals"),
        tuple(dict(r) for r in regressions), _strings(data.get("withheld"), "withheld"),
        _strings(data.get("checked"), "checked"), patch, dict(files), problem,
    )  # fmt: skip


def _code(text: str) -> str:
    """Text shown as inline code whatever it holds (no Markdown, no HTML, no closing the span)."""
    return "`" + text.replace("`", "'").replace("\n", " ")[:300] + "`"


def comment_body(result: PinCheckResult, pushed: str | None = None) -> str:
    """The sticky comment: the moves, the regressions (each with its first error line and command), the removals
    the move allows with the commit to apply, what was checked."""
    moves = ", ".join(f"{_code(name)} {_code(old)} → {_code(new)}" for name, (old, new) in result.moves.items())
    lines = [PIN_CHECK_MARKER, f"**exportbot pin check** of this PR's pin move: {moves or 'no package of the stack moved'}", ""]
    if result.problem is not None:
        lines += [f"Not tried: {_code(result.problem)}", ""]
    if result.regressions:
        lines += [f"### Regressions ({len(result.regressions)}): the check fails", "",
                  "| export | first error line | reproduce |", "| --- | --- | --- |",
                  *(f"| {_code(r['export'])} | {_code(r['status'] + ': ' + r['error'])} | {_code(r['command'])} |"
                    for r in result.regressions), ""]  # fmt: skip
        if result.withheld:
            lines += [f"Removable at these versions but withheld while they regress: {', '.join(map(_code, result.withheld))}", ""]
    if result.removals:
        lines += [f"### Removals this move allows ({len(result.removals)}): {', '.join(map(_code, result.removals))}", ""]
        lines += [f"Pushed to this PR's branch as {pushed}." if pushed else
                  "The commit to apply (`git apply` in the PR's checkout):", ""]  # fmt: skip
        if not pushed:
            fence = "~~~~" if "```" in result.patch else "```"
            lines += [f"{fence}diff", result.patch[:MAX_TEXT // 2].rstrip("\n"), fence, ""]
    lines += ["<details><summary>What was checked</summary>", "", *(f"- {_code(line)}" for line in result.checked),
              "", "</details>"]  # fmt: skip
    return "\n".join(lines)[:MAX_TEXT] + "\n"


def check_output(result: PinCheckResult) -> dict[str, str]:
    title = (f"{len(result.regressions)} regression(s)" if result.regressions else "no regression") + (
        f", {len(result.removals)} removal(s) allowed" if result.removals else "")
    if result.problem is not None:
        title = "the PR's pins could not be tried"
    return {"title": title, "summary": comment_body(result).replace(PIN_CHECK_MARKER + "\n", "")}


class PinCheckSession(GitHubSession):
    """The writes of ``pin-check publish``: the sticky comment, the check run, optionally the commit."""

    def publish(self, number: int, head_sha: str, result: PinCheckResult, apply: bool, push: bool) -> list[str]:
        """Bring PR ``number``'s comment and check run (on ``head_sha``) in line with ``result``; the steps, done
        (``apply``) or that would be done."""
        name = self.config.repository or ""
        self.repo = self._must(f"read repository {name}", lambda: self.github.get_repo(name), permission=PULLS_READ)
        pull = self._must(f"read pull request #{number}", lambda: self.repo.get_pull(number), permission=PULLS_READ)
        if pull.head.sha != head_sha:  # the artifact names the PR; the event names the commit it checked
            raise self._stop(f"read pull request #{number}", f"its head is {pull.head.sha[:12]}, not the commit checked "
                             f"({head_sha[:12]})", rerun=False,
                             advice="a rerun will not complete it: the check of the PR's new head will publish")  # fmt: skip
        steps: list[str] = []
        pushed = None
        if push and result.removals and result.files:
            pushed = self._push_removals(pull, head_sha, result, apply, steps)
        body = comment_body(result, pushed)
        comments = self._must("read comments", lambda: list(pull.get_issue_comments()), permission=ISSUES_READ)
        mine = next((c for c in comments if PIN_CHECK_MARKER in (c.body or "")), None)
        if mine is None:
            steps.append(f"comment on #{number}")
            if apply:
                self._call("comment", lambda: pull.create_issue_comment(body), permission=ISSUES_WRITE)
        elif mine.body != body:
            steps.append(f"update the comment on #{number}")
            if apply:
                self._call("update comment", lambda: mine.edit(body), permission=ISSUES_WRITE)
        output = check_output(result)
        runs = self._must("read check runs", lambda: list(self.repo.get_commit(head_sha).get_check_runs(check_name=CHECK_NAME)),
                          permission=PULLS_READ)  # fmt: skip
        current = runs[0] if runs else None
        if current is None or current.conclusion != result.conclusion or (current.output.summary or "") != output["summary"]:
            steps.append(f"check run '{CHECK_NAME}' on {head_sha[:12]}: {result.conclusion}")
            if apply and current is None:
                self._call("create check run", lambda: self.repo.create_check_run(
                    CHECK_NAME, head_sha, status="completed", conclusion=result.conclusion, output=output),
                    permission="checks: write")  # fmt: skip
            elif apply:
                self._call("update check run", lambda: current.edit(status="completed", conclusion=result.conclusion,
                                                                    output=output), permission="checks: write")  # fmt: skip
        return steps

    def _push_removals(self, pull: Any, head_sha: str, result: PinCheckResult, apply: bool, steps: list[str]) -> str | None:
        """Commit the removals onto the PR's branch: only a branch of this repository, never over a newer head."""
        if pull.head.repo is None or pull.head.repo.full_name.lower() != self.repo.full_name.lower():
            steps.append("not pushed: the PR's branch is in another repository (a fork); the comment holds the commit")
            return None
        head = self._must("read the PR's head", lambda: self.repo.get_git_commit(head_sha), permission=PULLS_READ)
        elements = [InputGitTreeElement(path, "100644", "blob", content=text) for path, text in sorted(result.files.items())]
        steps.append(f"push the removals to {pull.head.ref}")
        if not apply:
            return None
        tree = self._must("create tree", lambda: self.repo.create_git_tree(elements, head.tree), permission=CONTENTS_WRITE)
        message = f"exportbot: remove what {', '.join(f'{n} {v[1]}' for n, v in result.moves.items())} makes unnecessary\n\n" \
                  f"Removes: {', '.join(result.removals)}\n"  # fmt: skip
        commit = self._must("create commit", lambda: self.repo.create_git_commit(message, tree, [head]),
                            permission=CONTENTS_WRITE)  # fmt: skip
        ref = self._must("read the PR's branch", lambda: self.repo.get_git_ref(f"heads/{pull.head.ref}"),
                         permission=PULLS_READ)  # fmt: skip
        self._call("push", lambda: ref.edit(commit.sha), permission=CONTENTS_WRITE)
        self.done.append(f"pushed {commit.sha[:12]} to {pull.head.ref}")
        return f"commit {commit.sha[:12]}"


def result_of(moves: Mapping[str, tuple[str, str]], decision: Any, checked: list[str], changes: Mapping[str, tuple[str, str]],
              patch: str, problem: str | None = None) -> PinCheckResult:  # fmt: skip
    """The result ``pin-check run`` writes, from the bump decision and the planned removal changes."""
    regressions = tuple({"export": r.export, "status": r.status, "error": r.error, "command": r.command or ""}
                        for r in decision.regressions) if decision else ()  # fmt: skip
    files = {path: new for path, (old, new) in changes.items() if old != new and _PUSHABLE.fullmatch(path)}
    return PinCheckResult(dict(moves), tuple(decision.removals) if decision else (), regressions,
                          tuple(decision.withheld) if decision else (), tuple(checked), patch, files, problem)  # fmt: skip
