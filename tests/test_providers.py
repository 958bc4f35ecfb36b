"""Routing by model through a real gateway to three real loopback providers (two
OpenAI-style, one Anthropic-style), configured by a TASKGATE_CONFIG file."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import anthropic
import httpx
import openai
import pytest

from app.testing.upstream import UpstreamServer
from tests.support import Admin, GatewayProcess

CONFIG = """\
providers:
  main:
    kind: openai
    base_url: {main}/v1
    api_key: ${{MAIN_KEY}}
  local:
    kind: openai
    base_url: {local}/v1
    headers: {{x-extra: "1"}}
  claude:
    kind: anthropic
    base_url: {claude}
    api_key: sk-ant-file-key
  broken:
    kind: openai
    base_url: http://127.0.0.1:99999/v1
models:
  - name: gpt-4.1-mini
    provider: main
  - name: coder
    provider: local
    upstream_model: qwen2.5-coder-7b-instruct
  - name: "claude-*"
    provider: claude
  - name: "unbuildable-*"
    provider: broken
"""


@pytest.fixture(scope="module")
def providers() -> Iterator[tuple[UpstreamServer, UpstreamServer, UpstreamServer]]:
    with UpstreamServer() as main, UpstreamServer() as local, UpstreamServer() as claude:
        yield main, local, claude


@pytest.fixture(scope="module")
def routed(database_url: str, providers: tuple[UpstreamServer, ...], tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[GatewayProcess]:
    main, local, claude = providers
    path = Path(tmp_path_factory.mktemp("config")) / "taskgate.yaml"
    path.write_text(CONFIG.format(main=main.base_url, local=local.base_url, claude=claude.base_url))
    with GatewayProcess(database_url, "http://127.0.0.1:9", TASKGATE_CONFIG=str(path),
                        MAIN_KEY="sk-main-file-key") as gw:
        yield gw


@pytest.fixture(autouse=True)
def _reset(providers: tuple[UpstreamServer, ...]) -> None:
    for server in providers:
        server.reset()


def _counted(admin: Admin, task_id: str) -> int:
    return admin.task(task_id)["admitted_requests"]


def test_each_model_goes_to_its_provider_with_its_key(routed: GatewayProcess, providers: tuple) -> None:
    main, local, claude = providers
    admin = Admin(routed.url)
    _, token = admin.create_task()
    oa = openai.OpenAI(base_url=routed.url + "/v1", api_key=token, max_retries=0)
    oa.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}])
    an = anthropic.Anthropic(base_url=routed.url, api_key=token, max_retries=0)
    an.messages.create(model="claude-test-1", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    (m,), (c,) = main.requests, claude.requests
    assert m.path == "/v1/chat/completions" and m.headers["authorization"] == "Bearer sk-main-file-key"
    assert c.path == "/v1/messages" and c.headers["x-api-key"] == "sk-ant-file-key"
    assert local.requests == []


def test_an_alias_changes_only_the_model_field(routed: GatewayProcess, providers: tuple) -> None:
    _, local, _ = providers
    admin = Admin(routed.url)
    _, token = admin.create_task()
    body = b'{"messages": [{"role": "user", "content": "model: coder"}],\n  "model":"coder", "temperature": 0.50}'
    r = httpx.post(routed.url + "/v1/chat/completions", content=body,
                   headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
    assert r.status_code == 200, r.text
    (rec,) = local.requests
    assert rec.body == body.replace(b'"coder"', b'"qwen2.5-coder-7b-instruct"')
    assert rec.headers["x-extra"] == "1" and "authorization" not in rec.headers


@pytest.mark.parametrize(("path", "body", "status", "code"), [
    ("/v1/chat/completions", {"model": "gpt-9", "messages": []}, 404, "model_not_found"),
    ("/v1/messages", {"model": "gpt-4.1-mini", "max_tokens": 5, "messages": []}, 400, "model_wrong_format"),
    ("/v1/chat/completions", {"model": "claude-test-1", "messages": []}, 400, "model_wrong_format"),
])
def test_unroutable_models_are_refused_before_admission(routed: GatewayProcess, providers: tuple, path: str,
                                                         body: dict, status: int, code: str) -> None:
    admin = Admin(routed.url)
    task_id, token = admin.create_task()
    r = httpx.post(routed.url + path, json=body, headers={"authorization": f"Bearer {token}"})
    assert r.status_code == status, r.text
    if path == "/v1/messages":
        assert r.json()["type"] == "error"
        assert "gpt-4.1-mini" in r.json()["error"]["message"]
    else:
        assert r.json()["error"]["code"] == code
    assert _counted(admin, task_id) == 0
    assert all(not server.requests for server in providers)


def test_a_request_that_cannot_be_built_is_refused_and_not_counted(routed: GatewayProcess, providers: tuple) -> None:
    """The upstream URL and headers are checked before admission (the body is added
    after it), so a request that cannot be built is a 400 and nothing is counted or
    reserved; here a provider's port is out of range."""
    admin = Admin(routed.url)
    task_id, token = admin.create_task(token_limit=100_000)
    before = admin.task(task_id)
    r = httpx.post(routed.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                   json={"model": "unbuildable-1", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_request"
    after = admin.task(task_id)
    assert _counted(admin, task_id) == 0 and after["status"] == before["status"] == "active"
    assert {k: after[k] for k in before if "reserved" in k or "spent" in k} == \
        {k: before[k] for k in before if "reserved" in k or "spent" in k}
    assert all(not server.requests for server in providers)


def test_models_are_listed_from_the_configuration(routed: GatewayProcess, providers: tuple) -> None:
    _, token = Admin(routed.url).create_task()
    oa = openai.OpenAI(base_url=routed.url + "/v1", api_key=token, max_retries=0)
    assert [m.id for m in oa.models.list()] == ["gpt-4.1-mini", "coder"]
    assert oa.models.retrieve("coder").owned_by == "local"
    with pytest.raises(openai.NotFoundError):
        oa.models.retrieve("gpt-9")
    an = anthropic.Anthropic(base_url=routed.url, api_key=token, max_retries=0)
    assert [m.id for m in an.models.list()] == []  # only a glob: no names to list
    assert an.models.retrieve("claude-test-2").id == "claude-test-2"
    assert all(not server.requests for server in providers)


def test_a_bad_configuration_file_stops_start_up_with_one_line(database_url: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("providers:\n  x:\n    kind: gemini\n    base_url: http://127.0.0.1:9\n")
    gw = GatewayProcess(database_url, "http://127.0.0.1:9", TASKGATE_CONFIG=str(path))
    with pytest.raises(RuntimeError):
        gw.start(timeout=20)
    lines = [line for line in gw.output().splitlines() if line.strip()]
    assert lines[-1].startswith(f"taskgate: TASKGATE_CONFIG: {path}:3: providers.x.kind: Input should be"), lines
    assert "Traceback" not in gw.output()
