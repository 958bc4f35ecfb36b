"""``taskgate run`` and an agent's MCP servers (:func:`app.cli.run.agent_env`, ``key_env``).

docs/mcp.md's client snippets read the task token from ``TASKGATE_TOKEN``; ``taskgate run``
sets ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` but not that. opencode and Codex can read
``OPENAI_API_KEY`` instead, but Claude Code 2.1 will not expand its own credential
variables toward a remote MCP server ("MCP server config references credential variable(s)
that are never expanded toward a remote server: ANTHROPIC_API_KEY (read as empty)" in its
debug log): under ``taskgate run`` its ``/mcp`` server fails to connect (401) whatever the
``.mcp.json`` says, so its MCP tool calls could not be governed. ``run`` now exports the
token (and a key run's run name) as the snippets read them."""

from __future__ import annotations

from app.cli.run import agent_env, key_env


def test_the_model_variables_carry_the_token() -> None:
    env = agent_env("http://127.0.0.1:8080", "t", "tg-abc")
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] == "tg-abc"


def test_a_task_run_exports_the_token_mcp_configs_read() -> None:
    assert agent_env("http://127.0.0.1:8080", "t", "tg-abc").get("TASKGATE_TOKEN") == "tg-abc"


def test_a_key_run_exports_the_key_mcp_configs_read() -> None:
    env = key_env("http://127.0.0.1:8080", "tgb-key", "r1")
    assert (env.get("TASKGATE_TOKEN"), env.get("TASKGATE_RUN")) == ("tgb-key", "r1")
