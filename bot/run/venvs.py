"""Isolated, cached virtual environments that differ from the pins in exactly one package.

``exportbot bisect`` (one environment per released version) and ``exportbot audit --candidate PKG==VER``
(one for the candidate) run this repository's exports there, through ``PYTHONPATH`` (it is not
installed), so nothing leaks between the development environment and the version under test.

An environment is ``python -m venv`` + ``pip install -c <constraints.txt with PKG==VER> <requirements>``,
kept under ``.exportbot-cache/venvs/`` and reused while its recipe (constraints and requirements, stored
in the environment) is unchanged. Two ways to build one:

* **fresh** (bisect): every package installed into it, a full stack per version (a few GB and minutes,
  less when pip's wheel cache already holds the wheels);
* **layered** (``base=``): the new environment also sees a *pinned* environment's site-packages through a
  ``.pth`` file placed after its own, so pip finds every pinned package already installed and installs
  only what the constraints change (the candidate and any dependency it moves), which then shadows the
  pinned copy. Seconds for a pure-Python package. Only sound when the base really holds the pins, which
  :func:`pin_mismatches` checks first. The setuptools ``venv`` seeds is removed, so the base's is the one seen
  (an older seeded copy made pip fetch a newer one for torch from the index on every build).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path

from bot.audit.pins import normalize_name, same_release

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = REPO_ROOT / ".exportbot-cache" / "venvs"
INSTALL_TIMEOUT = 3600.0
_RECIPE_MARKER = "exportbot-recipe.txt"  # written last: a half-built environment is rebuilt
_BASE_PTH = "_exportbot_pinned_base.pth"
_NETWORK = re.compile(
    r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|ConnectTimeout"
    r"|ReadTimeoutError|Network is unreachable"
)


class EnvironmentFailure(RuntimeError):
    """No environment can be built now (the package index unreachable, venv creation failed)."""


class Uninstallable(Exception):
    """This version cannot be installed together with the other pins; the message is pip's reason."""


def project_dependencies(root: Path = REPO_ROOT) -> list[str]:
    """The project's own dependencies (``pyproject.toml``), which every environment installs."""
    with (root / "pyproject.toml").open("rb") as handle:
        return list(tomllib.load(handle)["project"]["dependencies"])


def ensure_venv(
    directory: Path, constraints: str, requirements: Sequence[str], *, timeout: float = INSTALL_TIMEOUT,
    base: Path | None = None,
) -> Path:  # fmt: skip
    """The Python of an environment at ``directory`` holding ``requirements`` under ``constraints``.

    ``base``: a pinned environment's site-packages to layer on (see the module docstring); None builds a
    fresh one. Reused when it was built from the same recipe; rebuilt otherwise. Raises
    :class:`Uninstallable` when pip cannot satisfy the constraints (a conflict, no distribution for this
    Python, a failed build) and :class:`EnvironmentFailure` when pip could not reach the index.
    """
    python = directory / "bin" / "python"
    marker = directory / _RECIPE_MARKER
    recipe = constraints + "".join(f"# requirement: {r}\n" for r in requirements)
    recipe += f"# layered on: {base}\n" if base is not None else ""
    if marker.is_file() and python.is_file() and marker.read_text(encoding="utf-8") == recipe:
        return python
    if directory.exists():
        shutil.rmtree(directory)
    made = subprocess.run([sys.executable, "-m", "venv", str(directory)], capture_output=True, text=True, timeout=600)
    if made.returncode != 0:
        raise EnvironmentFailure(f"python -m venv {directory} failed: {made.stderr.strip()[-300:]}")
    if base is not None:
        (site_packages(python) / _BASE_PTH).write_text(f"{base}\n", encoding="utf-8")
        # venv seeds its own (older) setuptools, which would shadow the base's and make pip fetch another for
        # torch's setuptools>=77 requirement: the layered environment uses the base's, as it uses every pin.
        subprocess.run([str(python), "-m", "pip", "uninstall", "--yes", "--quiet", "--disable-pip-version-check",
                        "setuptools"], capture_output=True, text=True, timeout=120)  # fmt: skip
    pinned = directory / "constraints-in-use.txt"
    pinned.write_text(constraints, encoding="utf-8")
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-c", str(pinned), *requirements],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        if _NETWORK.search(output):
            raise EnvironmentFailure(f"pip could not reach the package index: {output[-300:]}")
        errors = [line for line in output.splitlines() if line.startswith("ERROR")]
        raise Uninstallable(" ".join(errors or output.splitlines()[-3:])[-400:])
    marker.write_text(recipe, encoding="utf-8")
    return python


def site_packages(python: Path | str = sys.executable) -> Path:
    """The ``purelib`` directory of the environment whose interpreter is ``python``."""
    if Path(python) == Path(sys.executable):
        return Path(sysconfig.get_paths()["purelib"])
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return Path(done.stdout.strip())


def layering_base(pins: Mapping[str, str], moved: Iterable[str]) -> Path | None:
    """This interpreter's site-packages when it holds every pin but the ``moved`` packages (which the new
    environment installs anyway), so an environment differing in them can be layered on it; else None (fresh)."""
    skip = {normalize_name(name) for name in moved}
    others = {name: version for name, version in pins.items() if normalize_name(name) not in skip}
    return None if pin_mismatches(others) else site_packages()


def pinned_environment(pin_text: str, pins: Mapping[str, str], cache_dir: Path = DEFAULT_CACHE) -> Path:
    """An interpreter holding exactly ``pins``: this one when it does, else an environment layered on it with
    the packages it holds at other versions installed at their pins (``exportbot watch`` on a pin file that is
    not the one this environment was set up from). Raises :class:`Uninstallable` / :class:`EnvironmentFailure`."""
    differing = [line.split(" ", 1)[0] for line in pin_mismatches(pins)]
    if not differing:
        return Path(sys.executable)
    recipe = hashlib.sha256(pin_text.encode("utf-8")).hexdigest()[:12]
    return ensure_venv(cache_dir / f"pins-{recipe}-layered", pin_text, project_dependencies(),
                       base=layering_base(pins, differing))  # fmt: skip


def pin_mismatches(pins: Mapping[str, str]) -> list[str]:
    """Pinned packages this interpreter's environment holds at another version (or not at all): a
    layered environment is only sound on a base without any."""
    found = []
    for name, version in sorted(pins.items()):
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            found.append(f"{name} not installed (pinned {version})")
            continue
        if not same_release(installed, version):
            found.append(f"{name} {installed} (pinned {version})")
    return found
