"""Set up every path, run the figures ``repeats`` times, tear everything down.

Setup: the fixed upstream; the LiteLLM proxy (started first, it takes longest);
an embedded PostgreSQL and a gateway on it; a fresh database on the server at
127.0.0.1:5432 (when reachable) and a second gateway on it; 1 + 1,000 tasks per
gateway. A path that cannot be set up is reported unavailable, with the reason,
and the rest still runs. Repeats run every figure in turn (so paths and figures
interleave in time); no repeat starts after ``time_budget_s``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path as FsPath
from typing import Any, Callable

from bench import bare_relay, litellm_proxy, portkey, scenarios
from bench.config import FIGURES, Config
from bench.metrics import PgBackends, machine
from bench.paths import ORDER, Path
from bench.services import (
    Service,
    Unavailable,
    create_tasks,
    database_version,
    embedded_database,
    free_port,
    server_database,
    spawn,
    start_gateway,
    start_upstream,
)
from bench.upstream import model_name


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def litellm_models(cfg: Config) -> list[str]:
    """Every bench model name the figures use (LiteLLM needs each in its config)."""
    names = {scenarios.NONSTREAM_MODEL, model_name(2, cfg.chunk_size, hold_s=cfg.hold_s)}
    for n in cfg.chunk_counts:
        names.add(model_name(n, cfg.chunk_size))
        names.add(model_name(n, cfg.chunk_size, delay_ms=cfg.paced_delay_ms))
    return sorted(names)


class Suite:
    """Owns the processes and databases of one benchmark run (a context manager)."""

    def __init__(self, cfg: Config, litellm_python: str | None = None) -> None:
        self.cfg = cfg
        self.litellm_python = litellm_python
        self.stack = ExitStack()
        self.tmp = FsPath(tempfile.mkdtemp(prefix="taskgate-bench-"))
        self.paths: dict[str, Path] = {k: Path(k) for k in ORDER}
        self.info: dict[str, Any] = {"machine": machine(), "versions": {}}
        self.services: list[Service] = []

    # ---------------------------------------------------------------- setup

    def __enter__(self) -> Suite:
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for svc in reversed(self.services):
            svc.stop()
        self.stack.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _setup(self) -> None:
        cfg = self.cfg
        log(f"scratch directory {self.tmp}")
        upstream = start_upstream(self.tmp)
        self.services.append(upstream)
        direct = self.paths["direct"]
        direct.port, direct.hot_token, direct.upstream = upstream.port, "x", upstream
        log(f"upstream on :{upstream.port}")

        litellm = self._spawn_litellm(upstream) if cfg.use_litellm else None
        if not cfg.use_litellm:
            self.paths["litellm"].unavailable = "skipped (--no-litellm)"

        self._setup_taskgate("taskgate_embedded", upstream)
        self._setup_workers(upstream)
        if cfg.use_server_pg:
            self._setup_taskgate("taskgate_server", upstream)
        else:
            self.paths["taskgate_server"].unavailable = "not asked for (--server-pg)"
        self._setup_bare_relay(upstream)
        self._setup_portkey(upstream)

        if litellm is not None:
            self._await_litellm(litellm, upstream)
        for p in self.paths.values():
            if p.ok:
                t0 = time.monotonic()
                failures = scenarios.warm(p.port, p.spread_tokens[0] if p.spread_tokens else p.hot_token, cfg,
                                          headers=p.headers, streams=p.runs("stream"))
                log(f"{p.key}: warmed in {time.monotonic() - t0:.1f} s" + (f" ({failures} failed)" if failures else ""))

    def _setup_taskgate(self, key: str, upstream: Service) -> None:
        p = self.paths[key]
        try:
            if key == "taskgate_embedded":
                data_dir = self.tmp / "pg"
                url = self.stack.enter_context(embedded_database(data_dir))
            else:
                url = self.stack.enter_context(server_database())
            p.database_url = url
            self.info["versions"][f"postgresql ({key[9:]})"] = database_version(url)
            gw = start_gateway(key, url, upstream, self.tmp)
            self.services.append(gw)
            tokens = create_tasks(gw, 1 + self.cfg.spread_tasks)
        except Unavailable as exc:
            p.unavailable = str(exc)
            log(f"{key} unavailable: {exc}")
            return
        p.port, p.proxy, p.upstream = gw.port, gw, upstream
        p.hot_token, p.spread_tokens = tokens[0], tokens[1:]
        p.fresh_proxy = lambda: start_gateway(f"{key}-fresh", url, upstream, self.tmp)
        p.pg = PgBackends(url)
        log(f"{key}: gateway on :{gw.port}, {len(tokens)} tasks")

    def _setup_workers(self, upstream: Service) -> None:
        """The ``taskgate_workers`` path: ``cfg.workers`` gateway processes on the
        embedded database and tasks of ``taskgate_embedded``."""
        p, base = self.paths["taskgate_workers"], self.paths["taskgate_embedded"]
        p.figures = frozenset({"latency"})
        if self.cfg.workers < 2:
            p.unavailable = "not asked for (--workers 1)"
            return
        if not base.ok or base.database_url is None:
            p.unavailable = f"needs the embedded gateway ({base.unavailable})"
            return
        try:
            gw = start_gateway("taskgate-workers", base.database_url, upstream, self.tmp, workers=self.cfg.workers)
        except Unavailable as exc:
            p.unavailable = str(exc)
            return
        self.services.append(gw)
        p.port, p.proxy, p.upstream, p.pg = gw.port, gw, upstream, base.pg
        p.hot_token, p.spread_tokens, p.database_url = base.hot_token, base.spread_tokens, base.database_url
        log(f"taskgate_workers: {self.cfg.workers} workers on :{gw.port}")

    def _attach(self, p: Path, start: Callable[[], Service], upstream: Service, name: str) -> Service | None:
        """Start the relay process of ``p`` (no database, no tokens); ``None``, with
        the reason on ``p``, when it does not start."""
        try:
            svc = start()
        except Unavailable as exc:
            p.unavailable = f"{name} did not start: {exc}"
            return None
        self.services.append(svc)
        p.port, p.proxy, p.upstream, p.hot_token = svc.port, svc, upstream, "x"
        return svc

    def _setup_bare_relay(self, upstream: Service) -> None:
        p = self.paths["bare_relay"]
        p.figures = frozenset({"latency", "stream", "relay_cpu", "memory"})
        svc = self._attach(p, lambda: bare_relay.start(upstream, self.tmp), upstream, "the bare relay")
        if svc is None:
            return
        p.fresh_proxy = lambda: bare_relay.start(upstream, self.tmp)
        log(f"bare relay on :{svc.port}")

    def _setup_portkey(self, upstream: Service) -> None:
        p = self.paths["portkey"]
        p.figures = frozenset({"latency", "stream", "relay_cpu", "memory"})
        if not self.cfg.use_portkey:
            p.unavailable = "skipped (--no-portkey)"
            return
        node, how = portkey.find()
        if node is None:
            p.unavailable = how
            log(f"portkey unavailable: {how}")
            return
        svc = self._attach(p, lambda: portkey.start(node, self.tmp), upstream, "Portkey")
        if svc is None:
            return
        self.info["versions"]["portkey"] = how
        p.fresh_proxy = lambda: portkey.start(node, self.tmp, "portkey-fresh")
        p.headers = portkey.headers(upstream)
        p.notes.append(portkey.STREAMS_NOTE)
        log(f"portkey on :{svc.port} ({how})")

    def _spawn_litellm(self, upstream: Service) -> Service | None:
        python, how = litellm_proxy.find_python(self.litellm_python)
        p = self.paths["litellm"]
        if python is None:
            p.unavailable = how
            log(f"litellm unavailable: {how}")
            return None
        self.info["versions"]["litellm"] = how
        self.litellm_python_found = python
        port = free_port()
        config = self.tmp / "litellm.yaml"
        litellm_proxy.write_config(config, upstream.url, litellm_models(self.cfg))
        svc = spawn("litellm", litellm_proxy.command(python, config, port), port, self.tmp,
                    litellm_proxy.environment())
        self.services.append(svc)
        log(f"litellm starting on :{port} ({how})")
        return svc

    def _await_litellm(self, svc: Service, upstream: Service) -> None:
        p = self.paths["litellm"]
        try:
            litellm_proxy.wait_ready(svc)
        except Unavailable as exc:
            p.unavailable = f"LiteLLM proxy did not start: {exc}"
            log(p.unavailable)
            return
        p.port, p.proxy, p.upstream, p.hot_token = svc.port, svc, upstream, litellm_proxy.MASTER_KEY
        p.notes.append(litellm_proxy.LIMITS_NOTE)
        python = self.litellm_python_found

        def fresh() -> Service:
            port = free_port()
            new = spawn("litellm-fresh", litellm_proxy.command(python, self.tmp / "litellm.yaml", port), port,
                        self.tmp, litellm_proxy.environment())
            litellm_proxy.wait_ready(new)
            return new

        p.fresh_proxy = fresh
        log("litellm ready")

    # ------------------------------------------------------------------ run

    def run(self) -> list[dict[str, Any]]:
        cfg = self.cfg
        figures = [f for f in FIGURES if not cfg.only or f in cfg.only]
        records: list[dict[str, Any]] = []
        started = time.monotonic()
        self.info["repeats_done"] = 0
        last = 0.0
        for repeat in range(cfg.repeats):
            spent = time.monotonic() - started
            if repeat and spent + last > cfg.time_budget_s:
                log(f"another repeat ({last:.0f} s) would pass the time budget of {cfg.time_budget_s:g} s; "
                    f"stopping after {repeat}")
                break
            t_repeat = time.monotonic()
            for fig in figures:
                active = [p for p in self._rotated(repeat) if p.runs(fig)]
                t0 = time.monotonic()
                if fig == "parsing":
                    new = scenarios.parsing(cfg, repeat)
                else:
                    new = scenarios.PATH_FIGURES[fig](active, cfg, repeat)
                for rec in new:
                    if "error" in rec:
                        log(f"  {rec['figure']} {rec['path']} {rec['params']}: ERROR {rec['error'][:300]}")
                records.extend(new)
                log(f"repeat {repeat + 1}/{cfg.repeats}: {fig} done in {time.monotonic() - t0:.1f} s")
            self.info["repeats_done"] = repeat + 1
            last = time.monotonic() - t_repeat
        self.info["elapsed_s"] = round(time.monotonic() - started, 1)
        return records

    def _rotated(self, repeat: int) -> list[Path]:
        """Paths in a different order each repeat, so none always runs first."""
        keys = list(ORDER)
        k = repeat % len(keys)
        return [self.paths[x] for x in keys[k:] + keys[:k]]
