"""The configuration file (TASKGATE_CONFIG): loading, errors with their lines and the
expected shape (every one listed by ``taskgate config check``), routing by model, and the
built-in price table. No server."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from app.config import environment_config
from app.config.examples import EXAMPLES, example_for
from app.config.loader import ConfigError, parse
from app.config.prices import default_price, price_table
from app.config.routing import ModelNotFound, WrongFormat, resolve, routing_table
from app.config.schema import GatewayConfig, Price, Provider

DOC = """\
providers:
  openai:
    kind: openai
    base_url: https://api.openai.com/v1/
    api_key: ${OPENAI_API_KEY}
  anthropic:
    kind: anthropic
    base_url: https://api.anthropic.com
    api_key: ${ANTHROPIC_API_KEY:-}
  local:
    kind: openai
    base_url: http://127.0.0.1:8000/v1
    headers: {X-Extra: "1"}
models:
  - name: gpt-4.1-mini
    provider: openai
    price: {input_per_mtok: 0.40, output_per_mtok: 1.60, cached_input_per_mtok: 0.10}
  - name: "claude-*"
    provider: anthropic
  - name: coder
    provider: local
    upstream_model: qwen2.5-coder-7b-instruct
    max_output_tokens: 8192
    price: {input_per_mtok: 0, output_per_mtok: 0}
  - name: "*"
    provider: openai
"""
ENV = {"OPENAI_API_KEY": "sk-openai"}


def test_the_issue_example_loads_with_environment_references() -> None:
    config = parse(DOC, ENV)
    assert config.providers["openai"].api_key == "sk-openai"
    assert config.providers["openai"].base_url == "https://api.openai.com/v1"  # trailing / dropped
    assert config.providers["anthropic"].api_key == ""  # ${NAME:-} default
    assert config.providers["local"].headers == {"x-extra": "1"}
    assert [m.name for m in config.models] == ["gpt-4.1-mini", "claude-*", "coder", "*"]


@pytest.mark.parametrize(("edit", "expected"), [
    (("${OPENAI_API_KEY}", "${NOPE_KEY}"),
     "t.yaml:5: providers.openai.api_key: environment variable NOPE_KEY is not set"),
    (("provider: local", "provider: locl"),
     "t.yaml:21: models[2].provider: unknown provider 'locl' (known: anthropic, local, openai); "
     "did you mean 'local'?"),
    (("output_per_mtok: 1.60", "output_per_mtok: cheap"),
     "t.yaml:17: models[0].price.output_per_mtok: Input should be a valid number"),
    (("output_per_mtok: 1.60", "output_per_mtok: -1"),
     "t.yaml:17: models[0].price.output_per_mtok: Input should be greater than or equal to 0"),
    (("kind: anthropic", "kind: gemini"),
     "t.yaml:7: providers.anthropic.kind: Input should be 'openai' or 'anthropic'"),
    (("base_url: http://127.0.0.1:8000/v1", "base_url: 127.0.0.1:8000"),
     "t.yaml:12: providers.local.base_url: Value error, must be an http:// or https:// URL"),
    (("max_output_tokens: 8192", "max_output_tokens: '8192'"),
     "t.yaml:23: models[2].max_output_tokens: Input should be a valid integer"),
    (("    provider: openai\n    price", "    provider: openai\n    pricing: 1\n    price"),
     "t.yaml:17: models[0].pricing: unknown key; did you mean 'price'?"),
    (("  - name: \"*\"", "  - name: \"gpt-*\"\n    upstream_model: x"),
     "t.yaml:25: models[3]: Value error, upstream_model needs an exact name, not a glob"),
])
def test_errors_are_one_line_naming_file_line_and_key(edit: tuple[str, str], expected: str) -> None:
    old, new = edit
    assert old in DOC
    with pytest.raises(ConfigError) as info:
        parse(DOC.replace(old, new, 1), ENV, "t.yaml")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(expected), message


@pytest.mark.parametrize(("text", "expected"), [
    ("", "t.yaml: the file is empty"),
    ("providers: [", "t.yaml:1: not valid YAML"),
    ("- a\n- b\n", "t.yaml:1: the document must be a mapping"),
    ("providers: {}\n", "t.yaml:1: providers: Value error, at least one provider is needed"),
    ("providers:\n  a: {kind: openai, base_url: 'http://x'}\n  a: {kind: openai, base_url: 'http://y'}\n",
     "t.yaml:3: providers.a: duplicate key"),
    ("providers:\n  - kind: openai\n", "t.yaml:1: providers: expected a mapping (key: value lines), found a list"),
    ("providers: {a: {kind: openai, base_url: 'http://x'}}\nmodels: {name: x}\n",
     "t.yaml:2: models: expected a list ('- ' items), found a mapping"),
])
def test_malformed_documents(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(text, {}, "t.yaml")
    assert str(info.value).startswith(expected), str(info.value)


def test_routing_exact_before_glob_and_by_wire_format() -> None:
    config = parse(DOC, ENV)
    route = resolve(config, "gpt-4.1-mini", "openai")
    assert (route.provider_name, route.upstream_model, route.is_alias) == ("openai", "gpt-4.1-mini", False)
    assert route.price is not None and route.price.cached_input == 0.10
    assert resolve(config, "claude-sonnet-4-5", "anthropic").provider_name == "anthropic"
    # the glob "claude-*" is anthropic, so on an OpenAI endpoint the catch-all "*" takes it
    assert resolve(config, "claude-sonnet-4-5", "openai").provider_name == "openai"
    alias = resolve(config, "coder", "openai")
    assert (alias.provider_name, alias.upstream_model, alias.is_alias) == ("local", "qwen2.5-coder-7b-instruct", True)
    assert alias.max_output_tokens == 8192


def test_unknown_model_and_wrong_format() -> None:
    config = parse(DOC.replace('  - name: "*"\n    provider: openai\n', ""), ENV)
    with pytest.raises(ModelNotFound, match="'gpt-9' is not configured"):
        resolve(config, "gpt-9", "openai")
    with pytest.raises(WrongFormat, match="provider openai, which does not speak the anthropic"):
        resolve(config, "gpt-4.1-mini", "anthropic")


def test_environment_config_routes_every_model_by_endpoint_as_before() -> None:
    config = environment_config("http://o/v1", "k1", "http://a", "k2")
    assert resolve(config, "anything", "openai").provider.base_url == "http://o/v1"
    assert resolve(config, "anything", "anthropic").provider.api_key == "k2"


@pytest.mark.parametrize(("model", "price_in", "price_out"), [
    ("gpt-4.1-mini", 0.40, 1.60),
    ("gpt-4.1-mini-2025-04-14", 0.40, 1.60),
    ("gpt-4.1", 2.00, 8.00),
    ("gpt-4o-mini", 0.15, 0.60),
    ("claude-sonnet-4-5-20250929", 3.00, 15.00),
    ("claude-opus-4-1-20250805", 15.00, 75.00),
    ("claude-opus-4-20250514", 15.00, 75.00),
    ("claude-opus-4-5", 5.00, 25.00),
    ("claude-haiku-4-5", 1.00, 5.00),
])
def test_built_in_prices(model: str, price_in: float, price_out: float) -> None:
    price = default_price(model)
    assert price is not None
    assert (price.input_per_mtok, price.output_per_mtok) == (price_in, price_out)


def test_price_table_names_its_sources_and_date_and_unknown_models_have_none() -> None:
    table = price_table()
    assert table["sources"] and table["retrieved"]
    assert default_price("qwen2.5-coder-7b-instruct") is None


def test_routing_table_rows() -> None:
    rows = routing_table(parse(DOC, ENV))
    assert rows[0]["price"] == "$0.4 in / $1.6 out per MTok (config)"
    assert rows[1]["upstream_model"] == "(as requested)"
    assert rows[2]["upstream_model"] == "qwen2.5-coder-7b-instruct"


def test_every_problem_is_listed_with_its_line_and_an_example_of_the_shape() -> None:
    """Three mistakes at once (a list where a mapping belongs, a misspelled key, an unset
    variable) and a dangling provider: all four, in file order, each with its line; the
    structural ones with an example of the expected shape."""
    text = """\
providers:
  openai:
    kind: openai
    base_url: https://api.openai.com/v1
    api_key: ${NOPE_KEY}
    headers: [x-title]
models:
  - name: gpt-4.1-mini
    provider: openia
    pricing: {input_per_mtok: 1, output_per_mtok: 2}
"""
    with pytest.raises(ConfigError) as info:
        parse(text, {}, "t.yaml")
    problems = info.value.problems
    assert [p.line() for p in problems] == [
        "t.yaml:5: providers.openai.api_key: environment variable NOPE_KEY is not set "
        "(use ${NOPE_KEY:-default} for a default)",
        "t.yaml:6: providers.openai.headers: expected a mapping (key: value lines), found a list",
        "t.yaml:9: models[0].provider: unknown provider 'openia' (known: openai); did you mean 'openai'?",
        "t.yaml:10: models[0].pricing: unknown key; did you mean 'price'?",
    ]
    assert all(p.example for p in problems)  # each with the shape expected there
    assert problems[0].example == EXAMPLES[("providers", "*")]
    assert problems[1].example == EXAMPLES[("providers", "*", "headers")]
    assert problems[2].example == problems[3].example == EXAMPLES[("models", "[]")]
    assert str(info.value).endswith("(and 3 more)") and "\n" not in str(info.value)


def test_a_list_of_providers_shows_the_mapping_expected() -> None:
    with pytest.raises(ConfigError) as info:
        parse("providers:\n  - kind: openai\n    base_url: http://x\n", {}, "t.yaml")
    (problem,) = info.value.problems
    assert "found a list" in problem.message and "dictionary" not in problem.message
    assert problem.example is not None and "providers:\n  openai:" in problem.example


@pytest.mark.parametrize("shape", sorted(EXAMPLES))
def test_each_example_is_valid(shape: tuple[str, ...]) -> None:
    """The examples shown with errors validate themselves, so they cannot drift from the
    schema: whole-document ones with a provider added when they lack one, fragments
    (headers, a price) against their own model."""
    example = textwrap.dedent(EXAMPLES[shape])
    if shape[-1:] == ("headers",):
        Provider(kind="openai", base_url="http://x", **yaml.safe_load(example))
    elif shape[-1:] == ("price",):
        Price.model_validate(yaml.safe_load(example)["price"])
    else:
        doc = example if example.startswith("providers:") else EXAMPLES[("providers",)] + "\n" + example
        assert parse(doc, {"OPENAI_API_KEY": "k"}).providers


def test_example_for_picks_the_nearest_place() -> None:
    assert example_for(("models", 3, "price", "input_per_mtok")) == EXAMPLES[("models", "[]", "price")]
    assert example_for(("models", 3, "pricing")) == EXAMPLES[("models", "[]")]
    assert example_for(("providers", "my-local", "headers")) == EXAMPLES[("providers", "*", "headers")]
    assert example_for(("providers", "my-local", "kind")) == EXAMPLES[("providers", "*")]
    assert example_for(("nonsense",)) == EXAMPLES[()]


def _check(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "TASKGATE_CONFIG"} | env
    return subprocess.run([sys.executable, "-m", "app.cli", "config", "check", *args], capture_output=True,
                          text=True, timeout=60, env=environ)


def test_config_check_lists_every_problem_and_names_the_file_given(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("providers:\n  - kind: openai\nmodels:\n  - name: x\n    provider: openai\n    pricing: 1\n")
    run = _check(str(path))
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert lines[0] == f"taskgate: {path}: 2 problems"
    assert "TASKGATE_CONFIG" not in run.stderr  # the file was given as an argument
    assert f"{path}:1: providers: expected a mapping (key: value lines), found a list" in lines
    assert f"{path}:6: models[0].pricing: unknown key; did you mean 'price'?" in lines
    assert "    expected shape, for example:" in lines
    assert "        openai:                 # a name of your choice, referred to by models[].provider" in lines
    # named by TASKGATE_CONFIG: said so
    assert _check(TASKGATE_CONFIG=str(path)).stderr.splitlines()[0] == f"taskgate: {path} (TASKGATE_CONFIG): 2 problems"
    path.write_text(DOC)
    ok = _check(str(path), OPENAI_API_KEY="k")
    assert ok.returncode == 0 and ok.stdout.startswith(f"{path}: OK, 3 providers, 4 models"), ok.stdout + ok.stderr


def test_config_check_lists_the_mcp_servers(tmp_path: Path) -> None:
    path = tmp_path / "taskgate.yaml"
    path.write_text("providers:\n  main: {kind: openai, base_url: 'http://127.0.0.1:9/v1'}\n"
                    "mcp_servers:\n  - name: git\n    url: http://127.0.0.1:9000/mcp\n"
                    "    headers: {authorization: 'Bearer ${GIT_TOKEN:-t}'}\n"
                    "    tools: {push: {price_usd: 0.01}}\n")
    done = _check(str(path))
    assert done.returncode == 0, done.stderr
    assert "1 MCP server" in done.stdout and "1 MCP servers" not in done.stdout
    assert "/mcp/git" in done.stdout and "http://127.0.0.1:9000/mcp" in done.stdout
    assert "push (price_usd=0.01)" in done.stdout
    assert "Bearer" not in done.stdout  # header names only, never their values


def test_mcp_server_names_are_unique_and_urls_http() -> None:
    base = {"providers": {"main": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}}}
    with pytest.raises(ValueError, match="unique"):
        GatewayConfig.model_validate({**base, "mcp_servers": [{"name": "a", "url": "http://x/mcp"}] * 2})
    with pytest.raises(ValueError, match="http"):
        GatewayConfig.model_validate({**base, "mcp_servers": [{"name": "a", "url": "ftp://x/mcp"}]})
