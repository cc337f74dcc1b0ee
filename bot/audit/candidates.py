"""Finding an existing upstream issue for an item: the searches to make, the hits ranked, the cache (pure).

Why: an item without ``upstream`` may well have an issue already; filing a duplicate wastes a maintainer's
time, and linking the existing one lets the audit follow it. GitHub's issue search is keyword search with a
budget of 30 requests a minute, so the queries are few and specific (the error message's longest clean phrase,
the op and symbol names, the model class; each scoped to the repository that would fix it), and what comes
back is ranked here by how much of the item's own failure text a hit repeats, which GitHub's order does not
know. Nothing here links anything: a maintainer ticks a candidate on the dashboard, or runs ``exportbot
upstream link``.

Each item has a fingerprint (its repository and the texts its queries are built from): the cache keeps the
candidates per fingerprint, so a daily run searches again only for an item whose failure changed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bot.audit.drafts import ENTRY, DraftRecord, TrackedItem, last_error_line
from bot.signatures import normalize_text, strip_ansi

CACHE_SCHEMA = 1
DEFAULT_CACHE = Path(".exportbot-cache") / "upstream-find.json"  # relative to where find runs
MAX_QUERY_CHARS = 256  # GitHub refuses longer search queries
MAX_QUERIES = 3  # per item: the search budget is 30 a minute for every item of a run
MAX_CANDIDATES = 5
# Identifiers worth searching for: ATen ops, dotted paths, snake_case function names, CamelCase classes.
_OP = re.compile(r"\baten[._:]+\w+(?:\.\w+)?")
_DOTTED = re.compile(r"\b[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*){2,}\b")
_SNAKE = re.compile(r"\b_?[a-z][a-z0-9]*(?:_[a-z0-9]+){1,}\b")
_CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+\b")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_STOP = frozenset(["a", "an", "and", "are", "as", "at", "be", "by", "can", "cannot", "could", "does", "for", "from", "has", "have", "in", "is", "it", "its", "may", "must", "no", "not", "of", "on", "or", "that", "the", "this", "to", "was", "were", "when", "which", "while", "with", "without", "expression", "expressions", "error", "failed", "fails", "file", "line", "none", "torch", "self"])  # fmt: skip
_GENERIC = frozenset({"forward", "__init__", "self", "file_name", "call_function", "num_users"})


@dataclass(frozen=True)
class SearchHit:
    """One issue or pull request a search returned."""

    url: str
    repository: str
    number: int
    title: str
    state: str
    kind: str  # "issue" | "pull"
    text: str  # title and the start of the body: what ranking reads


@dataclass(frozen=True)
class Candidate:
    """A hit ranked for one item: ``score`` in [0, 1], and the terms of the item it repeats."""

    url: str
    repository: str
    number: int
    title: str
    state: str
    kind: str
    score: float
    shared: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        return f"{self.repository}#{self.number}"


@dataclass(frozen=True)
class FindResult:
    """What ``exportbot upstream find`` saw for one item, cached under its fingerprint."""

    item_id: str
    repository: str
    fingerprint: str
    searched_on: str
    queries: tuple[str, ...]
    candidates: tuple[Candidate, ...] = ()
    problem: str | None = None  # the search could not finish (rate limit outlasting the wait, GitHub refusal)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["candidates"] = [asdict(c) | {"shared": list(c.shared)} for c in self.candidates]
        data["queries"] = list(self.queries)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FindResult:
        candidates = tuple(Candidate(**(dict(c) | {"shared": tuple(c.get("shared", ()))})) for c in data["candidates"])
        return cls(data["item_id"], data["repository"], data["fingerprint"], data["searched_on"],
                   tuple(data["queries"]), candidates, data.get("problem"))  # fmt: skip


# ── What an item is searched by ──
def failure_text(item: TrackedItem, record: DraftRecord | None) -> str:
    """The item's failure as text: what its draft's run printed last and its probe's cause; else its recorded
    regex with the regex syntax dropped; the summary last (exportbot's words, the least likely upstream)."""
    parts = []
    if record is not None and record.script is not None and record.script.failed:
        parts.append(last_error_line(record.script.output))
    if record is not None and record.probe is not None and record.probe.cause:
        parts.append(record.probe.cause)
    if not parts and item.failure:
        parts.append(re.sub(r"\\[a-zA-Z]|\[[^\]]*\]|[\\()*+?|{}^$]", " ", item.failure))
    return "\n".join(parts) or item.summary


def symbols(text: str) -> list[str]:
    """Op and code names in ``text``, most specific first (ATen ops, dotted paths, snake_case, CamelCase)."""
    found: list[str] = []
    for pattern in (_OP, _DOTTED, _SNAKE, _CAMEL):
        for match in pattern.findall(strip_ansi(text)):
            name = match.strip(".")
            if name not in found and name.lower() not in _GENERIC and len(name) > 3:
                found.append(name)
    return found


def message_phrase(text: str, words: int = 7) -> str | None:
    """The longest run of plain words in the error message (numbers, symbols and punctuation end a run): a
    phrase GitHub can match verbatim in an issue that quotes the same error at other sizes."""
    line = text.splitlines()[0] if text else ""
    message = line.split(": ", 1)[-1] if re.match(r"^[\w.]+: ", line) else line
    runs, current = [], []
    for token in normalize_text(message).split():
        if re.fullmatch(r"[A-Za-z][A-Za-z'-]*[A-Za-z]", token):
            current.append(token)
        else:
            runs.append(current)
            current = []
    runs.append(current)
    best = max(runs, key=len)
    return " ".join(best[:words]) if len(best) >= 3 else None


def queries(item: TrackedItem, repository: str, text: str) -> list[str]:
    """At most :data:`MAX_QUERIES` repository-scoped searches: the message phrase, the names in the failure, and
    for a model-side item its class; each within GitHub's 256 characters."""
    scope = f"repo:{repository}"
    found: list[str] = []
    phrase = message_phrase(text)
    if phrase:
        found.append(f'{scope} "{phrase}"')
    names = symbols(text)
    if names:
        found.append(" ".join([scope, *(f'"{n}"' if "." in n else n for n in names[:2])]))
    if item.kind == ENTRY and item.models:
        found.append(f"{scope} {item.models[0]} export")
    elif names[2:]:
        found.append(f"{scope} {names[2]}")
    return [query[:MAX_QUERY_CHARS] for query in dict.fromkeys(found)][:MAX_QUERIES]


def fingerprint(item: TrackedItem, repository: str, text: str) -> str:
    """What the searches depend on: a changed failure (or repository, or model list) makes them run again."""
    basis = json.dumps([item.id, repository, normalize_text(text), list(item.models)], sort_keys=True)
    return hashlib.sha256(basis.encode("utf-8")).hexdigest()[:16]


# ── Ranking ──
def _terms(text: str) -> set[str]:
    words = {w.lower().strip(".") for w in _WORD.findall(normalize_text(text))}
    return {w for w in words if len(w) > 2 and w not in _STOP}


def rank(hits: Iterable[SearchHit], text: str, limit: int = MAX_CANDIDATES) -> list[Candidate]:
    """The hits ordered by how much of the item's failure they repeat: the share of its distinctive words a
    hit's title and body contain, names (ops, functions, classes) counting three times; ties by number, newest
    first. Hits of the same issue count once."""
    names = {n.lower() for n in symbols(text)}
    wanted = _terms(text) | names
    weight = {term: 3.0 if term in names else 1.0 for term in wanted}
    total = sum(weight.values()) or 1.0
    ranked: dict[str, Candidate] = {}
    for hit in hits:
        haystack = normalize_text(hit.text).lower()
        shared = sorted(term for term in wanted if term in haystack)
        score = round(sum(weight[t] for t in shared) / total, 2)
        ranked.setdefault(hit.url, Candidate(hit.url, hit.repository, hit.number, hit.title, hit.state, hit.kind,
                                             score, tuple(shared)))  # fmt: skip
    return sorted(ranked.values(), key=lambda c: (-c.score, -c.number))[:limit]


# ── The cache ──
def load_cache(text: str) -> dict[str, FindResult]:
    """The find cache (item id → result); an unreadable cache is an empty one (it is only a cache)."""
    try:
        data = json.loads(text)
        if data.get("schema") != CACHE_SCHEMA:
            return {}
        return {item: FindResult.from_dict(result) for item, result in data["items"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def dump_cache(results: Mapping[str, FindResult]) -> str:
    items = {item: result.as_dict() for item, result in sorted(results.items())}
    return json.dumps({"schema": CACHE_SCHEMA, "items": items}, indent=2, ensure_ascii=False) + "\n"


def reusable(cached: FindResult | None, print_: str) -> bool:
    """Whether a cached result answers for an item whose fingerprint is ``print_`` (and finished its searches)."""
    return cached is not None and cached.fingerprint == print_ and cached.problem is None


@dataclass
class SearchPlan:
    """The items a run searches and those the cache answers, in item order."""

    search: list[tuple[TrackedItem, str, str, list[str]]] = field(default_factory=list)  # item, repo, print, queries
    cached: list[FindResult] = field(default_factory=list)


def plan_searches(
    items: Sequence[tuple[TrackedItem, str | None, str]], cache: Mapping[str, FindResult]
) -> tuple[SearchPlan, list[str]]:
    """``items``: (item, repository, failure text) of each unlinked item. Returns the plan and one line per item
    that cannot be searched (no known repository)."""
    plan, skipped = SearchPlan(), []
    for item, repository, text in items:
        if repository is None:
            skipped.append(f"{item.id}: dependency {item.dependency!r} has no known tracker; not searched")
            continue
        print_ = fingerprint(item, repository, text)
        if reusable(cache.get(item.id), print_):
            plan.cached.append(cache[item.id])
        else:
            plan.search.append((item, repository, print_, queries(item, repository, text)))
    return plan, skipped
