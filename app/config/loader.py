"""Read a configuration file (``TASKGATE_CONFIG``): YAML, environment references, validation.

``load(path, environ)`` returns a :class:`~app.config.schema.GatewayConfig` or raises
:class:`ConfigError`, which holds every problem found (:class:`Problem`: the file, the
line, the key, what is wrong and an example of the expected shape); its message is the
first problem on one line, e.g.::

    taskgate.yaml:14: models[1].provider: unknown provider 'openia' (known: anthropic, openai); did you mean 'openai'?

Secrets stay out of the file: a string value may reference the environment as
``${NAME}`` (an unset ``NAME`` is an error) or ``${NAME:-default}``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app.config.examples import example_for, known_keys
from app.config.schema import GatewayConfig

#: ``${NAME}`` or ``${NAME:-default}``; ``$${`` escapes a literal ``${``.
ENV_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document: ``where`` is ``file:line`` (or the file),
    ``path`` the key (``models[1].provider``; empty for the file as a whole),
    ``example`` YAML showing the expected shape (``None`` when there is none to show)."""

    where: str
    path: str
    message: str
    example: str | None = None

    def line(self) -> str:
        return f"{self.where}: {self.path}: {self.message}" if self.path else f"{self.where}: {self.message}"


class ConfigError(ValueError):
    """An unusable configuration document. ``problems`` lists every problem found;
    ``str(err)`` is the first on one line, with how many more there are."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        more = len(problems) - 1
        super().__init__(problems[0].line() + (f" (and {more} more)" if more else ""))


def format_path(loc: Path_) -> str:
    """``("models", 1, "price")`` → ``models[1].price``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def _record_lines(node: yaml.Node, loc: Path_, lines: dict[Path_, int],
                  duplicates: list[tuple[int, Path_]]) -> None:
    """Record the 1-based line of every key and item under ``node`` by its path, and
    every duplicate key as ``(line, path)`` (YAML loaders silently keep the last)."""
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            if key in seen:
                duplicates.append((key_node.start_mark.line + 1, loc + (key,)))
                continue
            seen.add(key)
            _record_lines(value_node, loc + (key,), lines, duplicates)
            lines[loc + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _record_lines(item, loc + (i,), lines, duplicates)


def expand_env(value: Any, environ: Mapping[str, str], loc: Path_ = (),
               unset: list[tuple[Path_, str]] | None = None) -> Any:
    """Replace ``${NAME}`` / ``${NAME:-default}`` in every string of ``value``.

    An unset variable without default is appended to ``unset`` as ``(loc, name)`` (and
    left as written); without ``unset``, it raises ``KeyError`` carrying ``(loc, name)``."""
    if isinstance(value, dict):
        return {k: expand_env(v, environ, loc + (k,), unset) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, environ, loc + (i,), unset) for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        if unset is None:
            raise KeyError((loc, name))
        unset.append((loc, name))
        return match.group(0)

    return ENV_REFERENCE.sub(replace, value)


def _kind(value: Any) -> str:
    """What a YAML value is, in YAML's words."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return f"{type(value).__name__} {value!r}" if isinstance(value, (bool, int, float)) else f"the text {value!r}"


def _message(error: Any) -> str:
    """A pydantic error in the words of a YAML file: mappings and lists rather than
    dictionaries and models; an unknown key with the nearest known one."""
    loc, kind = tuple(error["loc"]), error["type"]
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping (key: value lines), found {_kind(error.get('input'))}"
    if kind == "list_type":
        return f"expected a list ('- ' items), found {_kind(error.get('input'))}"
    if kind == "missing":
        return "required key missing"
    if kind == "extra_forbidden":
        known = known_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        if close:
            return f"unknown key; did you mean {close[0]!r}?"
        return "unknown key" + (f" (known: {', '.join(known)})" if known else "")
    return str(error["msg"])


def _dangling_providers(data: dict[str, Any]) -> list[tuple[Path_, str]]:
    """``(path, message)`` for every ``models[].provider`` naming no provider, on the raw
    document (so they are listed with the schema's errors)."""
    providers, models = data.get("providers"), data.get("models")
    if not isinstance(providers, dict) or not isinstance(models, list):
        return []
    names = sorted(str(k) for k in providers)
    out: list[tuple[Path_, str]] = []
    for i, route in enumerate(models):
        provider = route.get("provider") if isinstance(route, dict) else None
        if isinstance(provider, str) and provider not in providers:
            close = difflib.get_close_matches(provider, names, n=1)
            out.append((("models", i, "provider"), f"unknown provider {provider!r} (known: {', '.join(names)})"
                        + (f"; did you mean {close[0]!r}?" if close else "")))
    return out


def parse(text: str, environ: Mapping[str, str], source: str = "config") -> GatewayConfig:
    """Validate a configuration document given as YAML text. See :func:`load`."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError([Problem(f"{source}{line}", "", f"not valid YAML: {what}", example_for(()))]) from None
    finally:
        loader.dispose()
    if root is None:
        raise ConfigError([Problem(source, "", "the file is empty; it needs at least 'providers'", example_for(()))])
    lines: dict[Path_, int] = {}
    duplicates: list[tuple[int, Path_]] = []
    _record_lines(root, (), lines, duplicates)
    if not isinstance(data, dict):
        raise ConfigError([Problem(f"{source}:1", "", "the document must be a mapping with 'providers' and 'models'",
                                   example_for(()))])

    def where(loc: Path_) -> str:
        for n in range(len(loc), -1, -1):
            if loc[:n] in lines:
                return f"{source}:{lines[loc[:n]]}"
        return source

    def problem(loc: Path_, message: str, line: str | None = None) -> Problem:
        return Problem(line or where(loc), format_path(loc) if loc else "", message, example_for(loc))

    found = [problem(loc, "duplicate key (YAML would keep only the last)", f"{source}:{line}")
             for line, loc in duplicates]
    unset: list[tuple[Path_, str]] = []
    data = expand_env(data, environ, unset=unset)
    found += [problem(loc, f"environment variable {name} is not set (use ${{{name}:-default}} for a default)")
              for loc, name in unset]
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        found += [problem(tuple(e["loc"]), _message(e)) for e in exc.errors()]
        config = None
    found += [problem(loc, message) for loc, message in _dangling_providers(data)]
    if found or config is None:
        raise ConfigError(sorted(found, key=_line_order))
    return config


def _line_order(p: Problem) -> tuple[int, str]:
    """Problems in the order of the file: by line, then by key."""
    _, _, line = p.where.rpartition(":")
    return (int(line) if line.isdigit() else 0, p.path)


def load(path: str | Path, environ: Mapping[str, str]) -> GatewayConfig:
    """Read and validate the configuration file at ``path``.

    ``environ`` resolves ``${NAME}`` references (pass ``os.environ``). Raises
    :class:`ConfigError` (every problem: file, line, key, what is wrong, the expected
    shape) for a missing or unreadable file, invalid YAML, unset variables, or values the
    schema rejects.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(str(path), "", f"cannot read the configuration file ({exc.strerror})")]) from None
    except UnicodeDecodeError:
        raise ConfigError([Problem(str(path), "", "the configuration file is not UTF-8")]) from None
    return parse(text, environ, str(path))
