"""Edit a workaround's registration in its source file as a syntax tree: delete one the audit proved unnecessary,
or give it its ``upstream=`` link (:func:`set_workaround_upstream`, the shrink PR's links section).

Why libcst and not text surgery or ``ast``: the edit must find the function, its decorators and any
standalone registration statement exactly (decorators spanning lines, comments between them), and the
rest of the file must stay byte-identical so the removal PR shows only the deletion. libcst keeps every
byte of the code it parses, so deleting nodes from its tree and printing it back changes nothing else.

What goes: the top-level ``def NAME`` with its decorators, and any top-level statement that only
registers it (``register_patch(...)(NAME)``, ``announce_workaround(...NAME...)``). The blank lines
that separated it from the previous statement go with it; comment lines above it stay (they are often a
section banner shared with neighbours), and so do imports or helpers that only it used: ``ruff check``
names those in the same PR.

It is refused (:class:`NotSelfContained`) when deleting could break something: the name is used anywhere
else in the module (a call, a table, a string), it is not registered at top level, or another file given
in ``elsewhere`` mentions it. The result is checked before anything is written: it must parse, and it must
equal the original with one or more spans cut out.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

REPO_ROOT = Path(__file__).resolve().parents[2]
SEARCHED_FOLDERS = ("exporters", "bot", "tests")  # where another mention of a workaround's name blocks removal
REGISTRATION_PREFIXES = ("register_", "_register_")
REGISTRATION_FUNCTIONS = ("announce_workaround",)


class NotSelfContained(ValueError):
    """The workaround cannot be deleted on its own; the message says where it is used."""


@dataclass(frozen=True)
class _Use:
    line: int
    text: str


class _Uses(cst.CSTVisitor):
    """Every mention of ``name`` in a subtree: identifiers (also ``obj.name``) and string literals."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, name: str, positions: dict[cst.CSTNode, object]) -> None:
        self.name, self.positions, self.found = name, positions, []
        self.word = re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])")

    def _add(self, node: cst.CSTNode, text: str) -> None:
        self.found.append(_Use(self.positions[node].start.line, text))  # type: ignore[attr-defined]

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self._add(node, node.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if self.word.search(node.value):
            self._add(node, node.value)


def _callee_name(expression: cst.BaseExpression) -> str | None:
    """The called name of ``f(...)``, ``mod.f(...)`` or a curried ``f(...)(...)``; None for anything else."""
    while isinstance(expression, cst.Call):
        expression = expression.func
    if isinstance(expression, cst.Name):
        return expression.value
    if isinstance(expression, cst.Attribute):
        return expression.attr.value
    return None


def _is_registration(name: str | None) -> bool:
    return bool(name) and (name.startswith(REGISTRATION_PREFIXES) or name in REGISTRATION_FUNCTIONS)


def _registration_statement(statement: cst.BaseStatement) -> bool:
    """A top-level ``register_x(...)(f)`` / ``announce_workaround(...)`` expression statement."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    expression = statement.body[0]
    return isinstance(expression, cst.Expr) and _is_registration(_callee_name(expression.value))


def _kept_comments(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The leading lines of a deleted statement that stay: up to its last comment line, or none at all."""
    last = max((i for i, line in enumerate(lines) if line.comment is not None), default=-1)
    return list(lines[: last + 1])


def _is_cut_of(original: str, edited: str) -> bool:
    """Whether ``edited`` is ``original`` with whole lines removed (every kept line in order, unchanged)."""
    before, after = original.splitlines(keepends=True), edited.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return all(op in ("equal", "delete") for op, *_ in matcher.get_opcodes())


def remove_workaround_text(text: str, name: str, where: str = "<source>") -> str:
    """``text`` without workaround ``name`` (pure); ``NotSelfContained`` when it cannot go on its own."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as error:
        raise NotSelfContained(f"{where}: cannot parse: {error}") from None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    definitions = [
        i for i, s in enumerate(module.body) if isinstance(s, cst.FunctionDef) and s.name.value == name
    ]
    if len(definitions) != 1:
        found = "no top-level function" if not definitions else f"{len(definitions)} top-level functions"
        raise NotSelfContained(f"{where}: {found} named {name!r}")
    [index] = definitions
    function = module.body[index]
    assert isinstance(function, cst.FunctionDef)
    decorated = any(_is_registration(_callee_name(d.decorator)) for d in function.decorators)
    removed = {index}
    outside: list[_Use] = []
    for i, statement in enumerate(module.body):
        if i == index:
            continue
        visitor = _Uses(name, positions)
        statement.visit(visitor)
        if visitor.found and _registration_statement(statement):
            removed.add(i)
        else:
            outside += visitor.found
    if not decorated and len(removed) == 1:
        raise NotSelfContained(f"{where}: {name!r} is not registered by a decorator or a top-level statement")
    if outside:
        uses = ", ".join(f"line {use.line} ({use.text})" for use in outside[:5])
        raise NotSelfContained(f"{where}: {name!r} is used elsewhere in the module: {uses}")

    body: list[cst.BaseStatement] = []
    carried: list[cst.EmptyLine] = []
    for i, statement in enumerate(module.body):
        if i in removed:
            carried += _kept_comments(statement.leading_lines)
            continue
        if carried:
            statement = statement.with_changes(leading_lines=[*carried, *statement.leading_lines])
            carried = []
        body.append(statement)
    edited = module.with_changes(body=body, footer=[*carried, *module.footer]).code
    try:
        ast.parse(edited)
    except SyntaxError as error:  # pragma: no cover - a libcst deletion always leaves valid code
        raise NotSelfContained(f"{where}: removal would leave invalid Python ({error})") from None
    if not _is_cut_of(text, edited):  # pragma: no cover - guards the invariant the module promises
        raise NotSelfContained(f"{where}: removal would change more than the workaround; nothing written")
    return edited


def remove_workaround_source(
    path: Path, name: str, *, elsewhere: Iterable[Path] = (), write: bool = True
) -> str:
    """Delete workaround ``name`` from ``path`` and return the new text (also written unless ``write`` is
    False). ``elsewhere`` are other files that must not mention the name (callers, tests, ``--without``)."""
    word = re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])")
    mentions = []
    for other in elsewhere:
        for number, line in enumerate(Path(other).read_text(encoding="utf-8").splitlines(), 1):
            if word.search(line):
                mentions.append(f"{other}:{number}")
    if mentions:
        raise NotSelfContained(f"{name!r} is mentioned in other files: {', '.join(mentions[:5])}")
    text = path.read_bytes().decode("utf-8")  # no newline translation: CRLF files stay CRLF
    edited = remove_workaround_text(text, name, str(path))
    if write:
        path.write_bytes(edited.encode("utf-8"))
    return edited


def defining_file(func: object) -> Path:
    """The source file of a workaround's function (what :func:`remove_workaround_source` edits)."""
    return Path(inspect.getsourcefile(func) or "").resolve()  # type: ignore[arg-type]


def other_files(source: Path, root: Path = REPO_ROOT) -> list[Path]:
    """The repository's Python files other than ``source`` that must not mention a deleted workaround."""
    return [p for d in SEARCHED_FOLDERS for p in sorted((root / d).rglob("*.py")) if p != source]


def removal_blocker(func: object, name: str, root: Path = REPO_ROOT) -> str | None:
    """Why workaround ``name`` (its function ``func``) cannot be deleted on its own; None when it can.
    Reads only: the audit records this beside a ``removable`` verdict for the shrink PR."""
    source = defining_file(func)
    try:
        remove_workaround_source(source, name, elsewhere=other_files(source, root), write=False)
    except NotSelfContained as refused:
        return str(refused)
    return None


# ── Linking a workaround to its upstream issue ──
def _with_upstream(call: cst.Call, url: str, replace: bool) -> cst.Call:
    """``call`` with ``upstream=url``: the keyword's value replaced where it is given (only with ``replace``), else
    the keyword added before ``dependency=`` (the registration order of the keywords) or last, in the call's own
    layout."""
    value = cst.SimpleString(repr(url) if '"' in url else f'"{url}"')
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == "upstream":
            if not replace and not (isinstance(arg.value, cst.Name) and arg.value.value == "None"):
                raise ValueError(f"it already links {cst.Module([]).code_for_node(arg.value)}")
            args[i] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    at = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "dependency"), len(args))
    before = args[at - 1] if at > 0 else None
    spacing = (before.comma.whitespace_after if before is not None and isinstance(before.comma, cst.Comma)
               else cst.SimpleWhitespace(" "))  # fmt: skip
    new = cst.Arg(value=value, keyword=cst.Name("upstream"),
                  equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))  # fmt: skip
    if at < len(args):
        new = new.with_changes(comma=cst.Comma(whitespace_after=spacing))
    elif before is not None:
        if isinstance(before.comma, cst.Comma):  # a trailing comma stays the last argument's
            new = new.with_changes(comma=before.comma)
        args[at - 1] = before.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.insert(at, new)
    return call.with_changes(args=args)


def set_workaround_upstream(text: str, name: str, url: str, where: str = "<source>", *, replace: bool = False) -> str:
    """``text`` with ``upstream=url`` in the registration decorator of workaround ``name`` (pure): one syntax-tree
    edit of that call; every line outside the decorator stays as it was. ``ValueError`` when ``name`` has no
    top-level function registered by a decorator, or (unless ``replace``) already links an issue."""
    module = cst.parse_module(text)
    for index, statement in enumerate(module.body):
        if not (isinstance(statement, cst.FunctionDef) and statement.name.value == name):
            continue
        for d, decorator in enumerate(statement.decorators):
            call = decorator.decorator
            if isinstance(call, cst.Call) and _is_registration(_callee_name(call)):
                decorators = list(statement.decorators)
                try:
                    decorators[d] = decorator.with_changes(decorator=_with_upstream(call, url, replace))
                except ValueError as error:
                    raise ValueError(f"{where}: {name!r}: {error}") from None
                body = list(module.body)
                body[index] = statement.with_changes(decorators=decorators)
                edited = module.with_changes(body=body).code
                ast.parse(edited)
                return edited
        raise ValueError(f"{where}: {name!r} has no registration decorator to carry upstream=")
    raise ValueError(f"{where}: no top-level function named {name!r}")
