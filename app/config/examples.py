"""What a configuration error's key should look like: a short YAML example per place in
the document (``providers``, a provider, ``models``, a model entry, a price, headers).

:func:`example_for` picks the example of the nearest enclosing place that has one, so
every error of ``taskgate config check`` shows the expected shape next to what was found.
A test loads each example as part of a document, so they cannot drift from the schema.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel

from app.config.schema import GatewayConfig

#: ``*`` stands for any key of a mapping by name (a provider's name), ``[]`` for any item.
EXAMPLES: dict[tuple[str, ...], str] = {
    (): """\
providers:
  openai:
    kind: openai
    base_url: https://api.openai.com/v1
    api_key: ${OPENAI_API_KEY}
models:
  - name: gpt-4.1-mini
    provider: openai""",
    ("providers",): """\
providers:
  openai:                 # a name of your choice, referred to by models[].provider
    kind: openai          # or anthropic
    base_url: https://api.openai.com/v1
    api_key: ${OPENAI_API_KEY}""",
    ("providers", "*"): """\
providers:
  openai:
    kind: openai          # or anthropic
    base_url: https://api.openai.com/v1
    api_key: ${OPENAI_API_KEY}
    headers: {x-title: my-app}
    list_models: false""",
    ("providers", "*", "headers"): """\
    headers:
      x-title: my-app""",
    ("models",): """\
models:
  - name: gpt-4.1-mini    # what clients send as "model"; globs such as claude-* allowed
    provider: openai      # a key of providers""",
    ("models", "[]"): """\
models:
  - name: gpt-4.1-mini
    provider: openai
    upstream_model: gpt-4.1-mini-2025-04-14   # optional: forward under this name
    max_output_tokens: 32768
    price: {input_per_mtok: 0.40, output_per_mtok: 1.60}""",
    ("models", "[]", "price"): """\
    price:                # US dollars per million tokens
      input_per_mtok: 0.40
      output_per_mtok: 1.60
      cached_input_per_mtok: 0.10   # optional""",
}


def _unwrap(annotation: Any) -> Any:
    """``X | None`` → ``X``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def pattern(loc: tuple[str | int, ...]) -> tuple[str, ...]:
    """``("providers", "oa", "headers")`` → ``("providers", "*", "headers")``: list indexes
    become ``[]`` and the keys of a mapping by name (``dict[str, ...]``) become ``*``."""
    out: list[str] = []
    annotation: Any = GatewayConfig
    for part in loc:
        annotation = _unwrap(annotation)
        origin = typing.get_origin(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            out.append(str(part))
            annotation = field.annotation if field is not None else None
        elif origin is dict:
            out.append("*")
            annotation = typing.get_args(annotation)[1]
        elif origin is list:
            out.append("[]")
            annotation = typing.get_args(annotation)[0]
        else:
            out.append("[]" if isinstance(part, int) else str(part))
            annotation = None
    return tuple(out)


def known_keys(loc: tuple[str | int, ...]) -> list[str]:
    """The keys the schema allows in the mapping at ``loc`` (for "did you mean")."""
    annotation: Any = GatewayConfig
    for part in loc:
        annotation = _unwrap(annotation)
        origin = typing.get_origin(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return []
            annotation = field.annotation
        elif origin in (dict, list):
            annotation = typing.get_args(annotation)[-1]
        else:
            return []
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return []


def example_for(loc: tuple[str | int, ...]) -> str | None:
    """The example of the nearest place at or above ``loc`` that has one."""
    shape = pattern(loc)
    for n in range(len(shape), -1, -1):
        if shape[:n] in EXAMPLES:
            return EXAMPLES[shape[:n]]
    return None
