"""README and ``docs/``: README stays a short tour (at most ~300 lines), and every
relative link in README.md and docs/*.md points at a file that exists and, when it
names an anchor, at a heading that exists in that file (GitHub's anchor rules:
lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"(?ms)^```.*?^```")


def anchors(markdown: str) -> set[str]:
    """GitHub heading anchors of ``markdown`` (``## Dollar ceiling`` → ``dollar-ceiling``)."""
    out = set()
    for line in _FENCE.sub("", markdown).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_readme_is_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 300


def test_docs_index_lists_every_page() -> None:
    index = (REPO / "docs" / "README.md").read_text()
    missing = [p.name for p in PAGES[1:] if p.name != "README.md" and f"]({p.name})" not in index]
    assert not missing, f"docs/README.md does not link {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    text = _FENCE.sub("", page.read_text())
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def test_readme_test_command_is_one_line_from_either_state_and_ci_runs_it() -> None:
    """README's test command works on a fresh clone and after the quick start alike: it
    makes or reuses the quick start's ``.venv`` and installs the test extra before pytest;
    ``.ci/run`` runs the same install line and the same pytest command."""
    lines = (REPO / "README.md").read_text().splitlines()
    quick = next(line for line in lines if line.startswith("python3 -m venv") and "taskgate serve" in line)
    command = next(line for line in lines if line.startswith("python3 -m venv") and "pytest" in line)
    venv = "python3 -m venv .venv && . .venv/bin/activate && "
    assert quick.startswith(venv) and command.startswith(venv)  # the same environment
    install, sep, run = command.partition(" && python -m pytest")
    assert sep and install.endswith("pip install -q -e '.[test]'"), command
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert f"{install} || exit 1" in ci
    runs = [line for line in ci if "python -m pytest" in line and not line.lstrip().startswith("#")]
    assert len(runs) == 2 and all(f"python -m pytest{run} " in line for line in runs), runs
