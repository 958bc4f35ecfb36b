"""The sentence a stopped task's requests are refused with quotes its counters after the
response that led to the stop has been accounted (``taskgate demo`` printed ``699 tokens,
4 tool calls`` beside ``tool_calls=5`` in one run of three): the demo's agent, in the
gateway's own process, sends its next request the moment it has the last byte, while the
gateway is still recording that response. A few runs, each compared with the task as the
admin API shows it afterwards. (:mod:`tests.test_in_flight` pins the mechanism.)"""

from __future__ import annotations

import re

from click.testing import CliRunner

from app.cli import main

COUNTERS = re.compile(r"Counters: (\d+) of \d+ requests admitted, (\d+) tokens, (\d+) tool calls")
FINAL = re.compile(r"admitted_requests=(\d+) tool_calls=(\d+)")


def test_demo_refusal_quotes_the_counters_after_the_last_response():
    for run in range(4):
        result = CliRunner().invoke(main, ["demo", "--max-turns", "10"])
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.split())  # the demo wraps the refusal to the terminal
        admitted, _tokens, calls = map(int, COUNTERS.search(text).groups())
        assert (admitted, calls) == tuple(map(int, FINAL.search(text).groups())), (run, result.output)
