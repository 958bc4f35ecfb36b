"""The MCP gateway: ``/mcp/<name>`` relays MCP's streamable HTTP transport to configured
MCP servers, with each ``tools/call`` admitted, counted and loop-guarded on the agent's
task (:mod:`app.mcp.routes`, :mod:`app.mcp.admission`, :mod:`app.mcp.jsonrpc`)."""
