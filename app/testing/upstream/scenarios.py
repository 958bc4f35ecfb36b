"""Scenarios: what the mock upstream answers, as a name and params (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MOCK_MODEL = "mock-model"
SCENARIO_PREFIX = "scenario:"



REPLY_DEFAULTS: dict[str, Any] = {
    "text": "Hello from the taskgate mock upstream.",
    "chunks": 5,
    "chunk_delay_s": 0.0,
    "name": None,
    "arguments": {},
    "parallel": 1,
    "input_tokens": None,
    "output_tokens": None,
}
TOOL_DEFAULTS: dict[str, Any] = {"text": "", "name": "read_file", "arguments": {"path": "README.md"}}

SCENARIOS: dict[str, dict[str, Any]] = {
    "text": {},
    "tool_call": dict(TOOL_DEFAULTS),
    "tool_cycle": {
        "text": "",
        "calls": [
            {"name": "read_file", "arguments": {"path": "README.md"}},
            {"name": "list_dir", "arguments": {"path": "."}},
        ],
    },
    "error": {"status": 500, "message": "mock upstream error", "type": None, "code": None, "headers": {}},
    "delay": {"delay_s": 5.0},
    "stall": {"after_events": 1, "stall_s": 3600.0},
    "heartbeats": {"after_events": 1, "interval_s": 1.0, "duration_s": 3600.0},
    "think": {"think_s": 5.0, "heartbeat_interval_s": None},
    "truncate": {"after_events": 2},
    "close_mid_event": {"after_events": 1},
    "malformed": {"after_events": 1},
    "search": {"text": "", "name": "grep", "pattern": "needle"},
    "text_tool": {"name": "read_file", "arguments": {"path": "README.md"}, "convention": "react",
                  "vary": False, "final_after": None},
    "chant": {"phrase": "Let me check the configuration file once more. ", "repeats": 40, "chunks": 40},
}
"""Scenario name -> its own params and defaults (on top of the reply params)."""

ALIASES = {"loop": "tool_call"}


@dataclass(frozen=True, slots=True)
class Script:
    """The behaviour of the upstream: a scenario name and its full params."""

    scenario: str
    params: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "params": self.params}


def make_script(scenario: str, params: dict[str, Any] | None = None) -> Script:
    """Validate ``scenario`` and ``params`` and fill in defaults. Raises ``ValueError``."""
    name = ALIASES.get(scenario, scenario)
    if name not in SCENARIOS:
        known = ", ".join(sorted([*SCENARIOS, *ALIASES]))
        raise ValueError(f"unknown scenario {scenario!r} (known: {known})")
    merged = {**REPLY_DEFAULTS, **SCENARIOS[name]}
    unknown = sorted(set(params or {}) - set(merged))
    if unknown:
        raise ValueError(f"unknown params for scenario {name!r}: {', '.join(unknown)}")
    merged.update(params or {})
    if int(merged["chunks"]) < 1 or int(merged["parallel"]) < 0:
        raise ValueError("chunks must be >= 1 and parallel >= 0")
    if name == "text_tool" and merged["convention"] not in ("react", "json", "code"):
        raise ValueError("text_tool's convention is one of react, json, code")
    if name == "tool_cycle" and not merged["calls"]:
        raise ValueError("tool_cycle needs at least one call")
    return Script(name, merged)

