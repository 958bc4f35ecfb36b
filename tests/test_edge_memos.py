"""What the request's edge remembers or makes once (issue 39) answers as the work it
saves: the route per model name (app.proxy.request._Routes), a provider's added headers
(app.proxy.upstream.request_headers) and parsed upstream URLs (app.proxy.transport)."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.config.schema import GatewayConfig, ModelRoute, Provider
from app.errors import GatewayError
from app.proxy import transport
from app.proxy.providers import route_request
from app.proxy.request import _Routes
from app.proxy.upstream import _DROP_REQUEST, _PROXY_HEADERS, request_headers


def _reference_headers(provider: Provider, incoming: list[tuple[bytes, bytes]],
                       forward_proxy_headers: bool = False) -> list[tuple[bytes, bytes]]:
    """request_headers as it was written before its provider part was made once."""
    extra = {name.encode("latin-1") for name in provider.headers}
    out = []
    for name, value in incoming:
        text = name.decode("latin-1")
        if text in _DROP_REQUEST or name in extra:
            continue
        if not forward_proxy_headers and (text in _PROXY_HEADERS or text.startswith("x-forwarded-")):
            continue
        out.append((name, value))
    out.append((b"accept-encoding", b"identity"))
    out.extend((name.encode("latin-1"), value.encode()) for name, value in provider.headers.items())
    if provider.api_key:
        if provider.kind == "anthropic":
            out.append((b"x-api-key", provider.api_key.encode()))
        else:
            out.append((b"authorization", f"Bearer {provider.api_key}".encode()))
    return out


_NAMES = st.sampled_from([b"authorization", b"x-api-key", b"api-key", b"cookie", b"host", b"content-length",
                          b"connection", b"accept-encoding", b"forwarded", b"x-real-ip", b"x-forwarded-for",
                          b"x-forwarded-proto", b"x-title", b"openai-organization", b"anthropic-version",
                          b"content-type", b"X-Forwarded-For", b"Authorization", b"x-extra"])
_PROVIDERS = [
    Provider(kind="openai", base_url="http://a.test/v1", api_key="sk-a"),
    Provider(kind="anthropic", base_url="http://b.test", api_key="sk-b", headers={"x-extra": "1", "x-title": "t"}),
    Provider(kind="openai", base_url="http://c.test/v1"),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_NAMES, st.binary(max_size=8)), max_size=12), st.sampled_from(_PROVIDERS), st.booleans())
def test_request_headers_are_those_it_made_before(incoming: list[tuple[bytes, bytes]], provider: Provider,
                                                  forward: bool) -> None:
    assert request_headers(provider, incoming, forward) == _reference_headers(provider, incoming, forward)
    assert request_headers(provider, incoming, forward) == _reference_headers(provider, incoming, forward)


def test_each_provider_keeps_its_own_key() -> None:
    sent = [request_headers(p, [(b"authorization", b"Bearer task")]) for p in _PROVIDERS * 2]
    assert sent[0][-1] == (b"authorization", b"Bearer sk-a") and sent[1][-1] == (b"x-api-key", b"sk-b")
    assert sent[2] == [(b"accept-encoding", b"identity")] and sent[3:] == sent[:3]


def _config(model: str = "gpt-*") -> GatewayConfig:
    return GatewayConfig(providers={"a": _PROVIDERS[0], "b": _PROVIDERS[1]},
                         models=[ModelRoute(name="alias", provider="a", upstream_model="gpt-4.1"),
                                 ModelRoute(name=model, provider="a"), ModelRoute(name="claude-*", provider="b")])


@pytest.mark.parametrize("model", ["alias", "gpt-4.1", "gpt-x", "claude-3"])
def test_a_remembered_route_is_the_route(model: str) -> None:
    routes, config = _Routes(), _config()
    kind = "anthropic" if model.startswith("claude") else "openai"
    assert routes.route(config, kind, model) == route_request(config, kind, model)
    assert routes.route(config, kind, model) is routes.route(config, kind, model)


def test_routing_errors_are_raised_every_time_and_a_new_configuration_routes_anew() -> None:
    routes, config = _Routes(), _config()
    for _ in range(2):
        with pytest.raises(GatewayError) as unknown:
            routes.route(config, "openai", "mistral-large")
        assert unknown.value.status == 404
        with pytest.raises(GatewayError) as wrong:
            routes.route(config, "openai", "claude-3")
        assert wrong.value.status == 400
    assert routes.route(config, "openai", "gpt-4.1").provider_name == "a"
    other = _config("o3-*")
    with pytest.raises(GatewayError):
        routes.route(other, "openai", "gpt-4.1")  # the first configuration's route is not kept


def test_routes_kept_are_bounded() -> None:
    routes, config = _Routes(), _config("*")
    for i in range(_Routes.SIZE + 10):
        routes.route(config, "openai", f"m{i}")
    routes.route(config, "openai", "x" * (_Routes.NAME_CHARS + 1))
    assert len(routes._routes) <= _Routes.SIZE


def test_upstream_urls_are_parsed_once_and_bad_ones_refused_every_time() -> None:
    url = "http://up.test:8080/v1/chat/completions?x=1"
    first = transport._checked(url)
    assert first == transport._checked(url) and str(first) == url
    for _ in range(2):
        with pytest.raises(httpx.InvalidURL):
            transport._checked("ftp://up.test/v1")
        with pytest.raises(httpx.InvalidURL):
            transport._checked("/v1/relative")
