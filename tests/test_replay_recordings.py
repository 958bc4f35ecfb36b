"""The replay harness (``python -m bench.replay``) on the recordings shipped in
bench/recordings, through a real gateway at default settings: each run is stopped at the
turn its recording expects, for the reason it expects, or never (issue 34 item 6).

The recordings exercise issue 34's rules: a 64-digit number in a healthy answer is not
repeated output (item 1), a chant is cut and the run goes on (item 2: a strike before the
latch), a second one-piece chant latches at its own turn whatever the client's timing
(items 2 and 3), and edit + identical re-run pairs are never a stop (item 5)."""

from __future__ import annotations

from typing import Iterator

import pytest

from bench.recording import Recording, load
from bench.replay import RECORDINGS, ReplayUpstream, replay_all
from tests.support import ADMIN_TOKEN, GatewayProcess

SHIPPED = sorted(RECORDINGS.glob("*.jsonl"))


@pytest.fixture(scope="module")
def recordings() -> list[Recording]:
    return [load(path) for path in SHIPPED]


@pytest.fixture(scope="module")
def replayed(database_url: str, recordings: list[Recording]) -> Iterator[dict[str, object]]:
    with ReplayUpstream(recordings) as upstream, GatewayProcess(database_url, upstream.url) as gateway:
        yield {r.run: r for r in replay_all(gateway.url, recordings, ADMIN_TOKEN)}


def test_the_shipped_recordings_are_there() -> None:
    assert {p.stem for p in SHIPPED} >= {"long-number", "chant-recovers", "one-piece-chant", "edit-rerun"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_each_run_stops_where_its_recording_expects(path, replayed) -> None:
    recording = load(path)
    result = replayed[recording.name]
    assert result.differs_from(recording.expect) == [], (result, recording.expect)
