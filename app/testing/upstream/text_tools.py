"""The ``text_tool`` scenario: tool use written as text, as prompt-driven agents expect the
model to answer (no structured tool calls). Pure."""

from __future__ import annotations

import json
from typing import Any

#: ``convention`` values: ReAct (``Action:`` / ``Action Input:``), smolagents' text tool
#: calling (``Action:`` and a JSON blob) and smolagents' ``CodeAgent`` (a ``<code>`` block).
CONVENTIONS = ("react", "json", "code")


def _varied(arguments: dict[str, Any], n: int) -> dict[str, Any]:
    return {k: f"{v}-{n}" if isinstance(v, str) else v for k, v in arguments.items()}


def text_tool(params: dict[str, Any], n: int) -> str:
    """The answer to the ``n``-th request (from 0) under a ``text_tool`` script."""
    name, convention = str(params["name"] or "read_file"), params["convention"]
    arguments = params["arguments"] if isinstance(params["arguments"], dict) else {}
    final = params["final_after"] is not None and n >= int(params["final_after"])
    if params["vary"]:
        arguments = _varied(arguments, n)
    if convention == "react":
        if final:
            return "Thought: I know the answer.\nFinal Answer: done"
        return f"Thought: I should use {name}.\nAction: {name}\nAction Input: {json.dumps(arguments)}"
    if convention == "json":
        call = {"name": "final_answer", "arguments": {"answer": "done"}} if final else \
            {"name": name, "arguments": arguments}
        return "Action:\n" + json.dumps(call)
    if final:
        return 'Thought: done.\n<code>\nfinal_answer("done")\n</code>'
    kwargs = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return f"Thought: I call {name}.\n<code>\nprint({name}({kwargs}))\n</code>"
