"""Read a configuration file (``TASKGATE_CONFIG``): YAML, environment references, validation.

``load(path, environ)`` returns a :class:`~app.config.schema.GatewayConfig` or raises
:class:`ConfigError`, whose message is one line naming the file, the line, the key and
what it expects, e.g.::

    taskgate.yaml:14: models[1].provider: unknown provider 'openia' (known: anthropic, openai)

Secrets stay out of the file: a string value may reference the environment as
``${NAME}`` (an unset ``NAME`` is an error) or ``${NAME:-default}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app.config.schema import GatewayConfig

#: ``${NAME}`` or ``${NAME:-default}``; ``$${`` escapes a literal ``${``.
ENV_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

Path_ = tuple[str | int, ...]


class ConfigError(ValueError):
    """An unusable configuration document; ``str(err)`` is one line for the operator."""


def format_path(loc: Path_) -> str:
    """``("models", 1, "price")`` → ``models[1].price``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def _record_lines(node: yaml.Node, loc: Path_, lines: dict[Path_, int]) -> None:
    """Record the 1-based line of every key and item under ``node`` by its path.
    Raises :class:`ConfigError` for a duplicate key (YAML loaders silently keep the last)."""
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            if key in seen:
                raise ConfigError(f"{key_node.start_mark.line + 1}: {format_path(loc + (key,))}: duplicate key")
            seen.add(key)
            _record_lines(value_node, loc + (key,), lines)
            lines[loc + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _record_lines(item, loc + (i,), lines)


def expand_env(value: Any, environ: Mapping[str, str], loc: Path_ = ()) -> Any:
    """Replace ``${NAME}`` / ``${NAME:-default}`` in every string of ``value``.

    Raises ``KeyError`` carrying ``(loc, name)`` for an unset variable without default."""
    if isinstance(value, dict):
        return {k: expand_env(v, environ, loc + (k,)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, environ, loc + (i,)) for i, v in enumerate(value)]
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
        raise KeyError((loc, name))

    return ENV_REFERENCE.sub(replace, value)


def parse(text: str, environ: Mapping[str, str], source: str = "config") -> GatewayConfig:
    """Validate a configuration document given as YAML text. See :func:`load`."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}{line}: not valid YAML: {problem}") from None
    finally:
        loader.dispose()
    if root is None:
        raise ConfigError(f"{source}: the file is empty; it needs at least 'providers'")
    lines: dict[Path_, int] = {}
    try:
        _record_lines(root, (), lines)
    except ConfigError as exc:
        raise ConfigError(f"{source}:{exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}:1: the document must be a mapping with 'providers' and 'models'")

    def where(loc: Path_) -> str:
        for n in range(len(loc), -1, -1):
            if loc[:n] in lines:
                return f"{source}:{lines[loc[:n]]}"
        return source

    try:
        data = expand_env(data, environ)
    except KeyError as exc:
        loc, name = exc.args[0]
        raise ConfigError(f"{where(loc)}: {format_path(loc)}: environment variable {name} is not set "
                          f"(use ${{{name}:-default}} for a default)") from None
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{where(loc)}: {format_path(loc)}: {first['msg']}{more}") from None
    for loc, message in config.reference_errors():
        raise ConfigError(f"{where(loc)}: {format_path(loc)}: {message}")
    return config


def load(path: str | Path, environ: Mapping[str, str]) -> GatewayConfig:
    """Read and validate the configuration file at ``path``.

    ``environ`` resolves ``${NAME}`` references (pass ``os.environ``). Raises
    :class:`ConfigError` (one line: file, line, key, what is wrong) for a missing or
    unreadable file, invalid YAML, an unset variable, or a value the schema rejects.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: the configuration file is not UTF-8") from None
    return parse(text, environ, str(path))
