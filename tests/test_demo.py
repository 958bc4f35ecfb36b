"""`taskgate demo` runs end to end and ends with the loop guard's stop."""

from click.testing import CliRunner

from app.cli import main


def test_demo_stops_the_looping_agent():
    result = CliRunner().invoke(main, ["demo", "--max-turns", "10"])
    assert result.exit_code == 0, result.output
    assert "stop_reason=repeated_tool_call" in result.output
    assert "turn  6: refused by taskgate (HTTP 400)" in result.output
    assert "upstream saw 5 requests" in result.output
