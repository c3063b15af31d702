"""MCP servers' tools as loopwright Tools: annotations to safety, results to observations,
and real third-party servers (mcp-server-time from PyPI, server-everything from npm) over
stdio and streamable HTTP, including crashes, hangs and reconnects."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys

import mcp.types as types
import pytest

import loopwright as lw
from helpers.mcp_servers import (
    everything_server,
    free_port,
    kill_pid_file,
    pid_wrapper,
    stop,
    time_server,
    wait_for_port,
)
from loopwright.mcp import MCPError, MCPServer, MCPToolError, safety_from_annotations
from loopwright.mcp.client import error_line, result_value

# --- annotations and results (no server) ----------------------------------------------


def test_a_tool_with_no_annotations_is_destructive_and_approval_gated_as_the_spec_defaults_say():
    assert safety_from_annotations(None) == {
        "side_effects": "destructive", "idempotent": False, "requires_approval": True, "open_world": True,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("annotations", "side_effects", "idempotent", "gated"),
    [
        ({"readOnlyHint": True}, "read", True, False),
        ({"readOnlyHint": True, "destructiveHint": True}, "read", True, False),
        ({"destructiveHint": False}, "write", False, False),
        ({"destructiveHint": False, "idempotentHint": True}, "write", True, False),
        ({"readOnlyHint": False}, "destructive", False, True),
        ({"idempotentHint": True}, "destructive", True, True),
    ],
)
def test_annotations_map_to_side_effects(annotations, side_effects, idempotent, gated):
    s = safety_from_annotations(annotations)
    assert (s["side_effects"], s["idempotent"], s["requires_approval"]) == (side_effects, idempotent, gated)


def _server_with(specs):
    server = MCPServer(lambda stack: None, "fake", overrides={"wipe": {"side_effects": "write"}})  # type: ignore[arg-type, return-value]
    return [server._tool(spec) for spec in specs]


def test_listed_tools_get_the_mapped_metadata_and_a_per_tool_override_wins():
    plain, wipe, odd = _server_with([
        {"name": "plain", "inputSchema": {"type": "object", "properties": {}}},
        {"name": "wipe", "inputSchema": {"type": "object", "properties": {}}},
        {"name": "odd/name:x", "annotations": {"readOnlyHint": True},
         "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
    ])  # fmt: skip
    assert (plain.side_effects, plain.requires_approval, plain.idempotent) == ("destructive", True, False)
    assert (wipe.side_effects, wipe.requires_approval) == ("write", False)
    assert odd.name == "odd_name_x" and odd.mcp_name == "odd/name:x" and odd.side_effects == "read"
    assert odd.is_async and odd.timeout_s == 30.0


def test_listed_tools_validate_arguments_strictly_against_the_servers_schema():
    (odd,) = _server_with([{"name": "q", "annotations": {"readOnlyHint": True},
                            "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}},
                                            "required": ["q"]}}])  # fmt: skip
    registry = lw.ToolRegistry([odd])
    for bad in ({}, {"q": 3}, {"q": "x", "extra": 1}):
        result = registry.execute("q", bad)
        assert result.error is not None and result.error.kind == "invalid_args", bad


def test_an_unknown_override_key_is_refused():
    with pytest.raises(ValueError, match="unknown key"):
        MCPServer.stdio("true", overrides={"x": {"sideeffects": "read"}})


def _result(*content, structured=None, is_error=False):
    return types.CallToolResult(content=list(content), structured_content=structured, is_error=is_error)


def test_results_become_text_structured_content_or_descriptions_never_dropped():
    text = types.TextContent(type="text", text="hello")
    assert result_value(_result(text)) == "hello"
    assert result_value(_result(types.TextContent(type="text", text='{"a": 1}'), structured={"a": 1})) == {"a": 1}
    assert result_value(_result(structured={"a": 1})) == {"a": 1}
    assert result_value(_result(text, structured={"a": 1})) == 'hello\n{"a": 1}'
    image = types.ImageContent(type="image", data="aGVsbG8=", mime_type="image/png")
    assert result_value(_result(text, image)) == "hello\n[image image/png, 5 bytes]"
    link = types.ResourceLink(type="resource_link", uri="file:///a.txt", name="a.txt", mime_type="text/plain")
    assert result_value(_result(link)) == "[resource link file:///a.txt (a.txt, text/plain)]"
    embedded = types.EmbeddedResource(
        type="resource", resource=types.TextResourceContents(uri="mem://x", mime_type="text/plain", text="body")
    )
    assert result_value(_result(embedded)) == "[resource mem://x (text/plain)]\nbody"


def test_is_error_raises_so_the_registry_makes_it_a_tool_error():
    with pytest.raises(MCPToolError, match="bad zone"):
        result_value(_result(types.TextContent(type="text", text="bad zone"), is_error=True))


# --- a real Python server from PyPI over stdio ------------------------------------------


@pytest.fixture(scope="module")
def time_mcp():
    with MCPServer.stdio(time_server(), ["--local-timezone", "Etc/UTC"], timeout_s=60) as server:
        yield server


@pytest.mark.slow
def test_the_time_servers_tools_are_listed_as_read_only_tools_with_their_schema(time_mcp):
    tools = {t.name: t for t in time_mcp.tools()}
    assert {"get_current_time", "convert_time"} <= set(tools)
    get = tools["get_current_time"]
    assert get.side_effects == "read" and not get.requires_approval and get.idempotent
    assert get.parameters["required"] == ["timezone"]
    assert get.parameters["additionalProperties"] is False


@pytest.mark.slow
def test_a_call_returns_the_servers_structured_answer_and_an_error_becomes_a_tool_error(time_mcp):
    registry = lw.ToolRegistry(time_mcp.tools())
    ok = registry.execute("get_current_time", {"timezone": "Asia/Tokyo"})
    assert ok.error is None and ok.value["timezone"] == "Asia/Tokyo"
    converted = registry.execute(
        "convert_time", {"source_timezone": "Etc/UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    )
    assert converted.error is None and converted.value["target"]["datetime"].startswith(
        converted.value["source"]["datetime"][:10]
    ) and "T21:00:00" in converted.value["target"]["datetime"]
    bad = registry.execute("get_current_time", {"timezone": "Mars/Olympus"})
    assert bad.error is not None and bad.error.kind == "exception"
    assert bad.observation.startswith("ERROR[get_current_time]: MCPToolError:") and "Mars/Olympus" in bad.observation


@pytest.mark.slow
def test_the_session_is_started_once_and_reused_across_runs_and_tools(time_mcp):
    before = time_mcp.connects
    registry = lw.ToolRegistry(time_mcp.tools())
    for _ in range(2):
        policy = lw.ScriptedPolicy([
            'Action: get_current_time\nAction Input: {"timezone": "Europe/Paris"}',
            'Action: convert_time\nAction Input: {"source_timezone": "Etc/UTC", "time": "08:30", '
            '"target_timezone": "Europe/Paris"}',
            "Final Answer: done",
        ])  # fmt: skip
        trace = lw.run("What time is it in Paris?", policy, registry)
        assert trace.stopped_reason == "final" and trace.tool_calls == 2
        assert all(s.error is None for s in trace.steps)
    assert time_mcp.connects == max(before, 1)


@pytest.mark.slow
def test_the_async_path_awaits_the_call_on_the_callers_loop(time_mcp):
    registry = lw.ToolRegistry(time_mcp.tools())

    async def both():
        return await asyncio.gather(
            registry.aexecute("get_current_time", {"timezone": "Asia/Tokyo"}),
            registry.aexecute("get_current_time", {"timezone": "Europe/London"}),
            time_mcp.acall("get_current_time", {"timezone": "Etc/UTC"}),
        )

    tokyo, london, utc = asyncio.run(both())
    assert tokyo.value["timezone"] == "Asia/Tokyo" and london.value["timezone"] == "Europe/London"
    assert utc["timezone"] == "Etc/UTC"


@pytest.mark.slow
def test_a_server_that_fails_to_start_is_a_clear_error_at_set_up(tmp_path):
    with pytest.raises(MCPError, match="failed"):
        MCPServer.stdio(str(tmp_path / "no-such-server"), timeout_s=20).tools()
    broken = MCPServer.stdio("sh", ["-c", "echo not json; echo boom >&2; exit 3"], timeout_s=20)
    with pytest.raises(MCPError, match="boom|failed|did not answer"):
        broken.tools()


def test_a_server_that_exits_at_start_leads_with_its_error_line_then_the_root_cause():
    with pytest.raises(MCPError) as bad_zone:
        MCPServer.stdio(time_server(), ["--local-timezone", "Not/AZone"], timeout_s=30).tools()
    message = str(bad_zone.value)
    assert "ExceptionGroup" not in message and "TaskGroup" not in message
    assert message.startswith(
        f"MCP server '{time_server()} --local-timezone Not/AZone' failed: "
        "Error: invalid --local-timezone 'Not/AZone': not a known IANA timezone name; "
    )
    assert "Connection closed" in message  # the root cause, unwrapped from nested groups


@pytest.mark.parametrize(
    ("log", "line"),
    [("node:internal/modules/cjs/loader:1210\n  throw err;\n  ^\n\nError: Cannot find module '/x.js'\n    at Module._load",
      "Error: Cannot find module '/x.js'"),
     ("Traceback (most recent call last):\n  File \"<string>\", line 1\n    raise ValueError('no')\nValueError: no",
      "ValueError: no"),
     ("TypeError [ERR_INVALID_ARG_TYPE]: bad path\n    at x", "TypeError [ERR_INVALID_ARG_TYPE]: bad path"),
     ("java.io.IOException: disk full", "java.io.IOException: disk full"),
     ("starting\npanic: runtime error: index out of range", "panic: runtime error: index out of range"),
     ("[ERROR] could not bind 0.0.0.0:80", "[ERROR] could not bind 0.0.0.0:80"),
     ("error handling is on\nerrors are logged\nDeprecationWarning: old", None),
     ("cannot open /srv/data: no such directory", None)],
)  # fmt: skip
def test_the_error_line_is_one_that_reads_as_an_error(log, line):
    assert error_line(log) == line


def _node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.fail("node is not installed: run scripts/install.sh --dev")
    return found


def test_a_node_server_that_dies_at_start_leads_with_the_error_not_the_tail_of_its_stack(tmp_path):
    missing = tmp_path / "missing.js"
    with pytest.raises(MCPError) as info:
        MCPServer.stdio(_node(), [str(missing)], timeout_s=30).tools()
    message = str(info.value)
    assert message.startswith(f"MCP server '{_node()} {missing}' failed: Error: Cannot find module '{missing}'; ")
    assert "Connection closed" in message and "at Module._load" not in message and "\n" not in message


def test_a_python_server_that_dies_at_start_leads_with_its_exception_line():
    with pytest.raises(MCPError) as info:
        MCPServer.stdio(sys.executable, ["-c", "import missing_module_xyz"], timeout_s=30).tools()
    message = str(info.value)
    assert message.split(" failed: ", 1)[1].startswith(
        "ModuleNotFoundError: No module named 'missing_module_xyz'; "
    )
    assert "Traceback" not in message and 'File "<string>"' not in message


def test_the_first_error_line_leads_and_with_none_the_last_lines_of_stderr_end_the_message():
    lines = "".join(f"line {i}\\n" for i in range(20))
    script = f"import sys; sys.stderr.write('{lines}fatal: no such directory /srv/data\\nretrying\\n'); sys.exit(3)"
    with pytest.raises(MCPError) as fatal:
        MCPServer.stdio(sys.executable, ["-c", script], timeout_s=30).tools()
    assert str(fatal.value).split(" failed: ", 1)[1].startswith("fatal: no such directory /srv/data; ")

    script = f"import sys; sys.stderr.write('{lines}giving up on /srv/data\\n'); sys.exit(3)"
    with pytest.raises(MCPError) as dies:
        MCPServer.stdio(sys.executable, ["-c", script], timeout_s=30).tools()
    tail = str(dies.value).split("server stderr (last lines):\n", 1)[1]
    assert tail.splitlines() == [f"line {i}" for i in range(13, 20)] + ["giving up on /srv/data"]


def test_the_cli_reports_a_server_that_dies_at_start_by_its_error_line(tmp_path):
    from loopwright.interfaces.common import UsageError
    from loopwright.interfaces.mcp_cli import add_mcp_tools, mcp_servers

    missing = tmp_path / "missing.js"
    servers = mcp_servers([f"{_node()} {missing}"], None)
    try:
        with pytest.raises(UsageError) as info:
            add_mcp_tools(lw.ToolRegistry(), servers)
    finally:
        servers[0].close()
    assert f"failed: Error: Cannot find module '{missing}'" in str(info.value)


def test_a_command_that_does_not_exist_names_the_missing_file(tmp_path):
    missing = tmp_path / "no-such-server"
    with pytest.raises(MCPError) as info:
        MCPServer.stdio(str(missing), timeout_s=30).tools()
    assert str(info.value) == (
        f"MCP server {str(missing)!r} failed: FileNotFoundError: [Errno 2] No such file or directory: {str(missing)!r}"
    )


def test_a_server_that_cannot_restart_gives_a_tool_error_saying_why(tmp_path):
    marker = tmp_path / "started"
    script = (
        f"[ -e '{marker}' ] && {{ echo 'cannot open /srv/data: no such directory' >&2; exit 7; }}; "
        f"touch '{marker}'; exec '{time_server()}'"
    )
    server = MCPServer.stdio("sh", ["-c", script], timeout_s=30)
    try:
        registry = lw.ToolRegistry(server.tools())
        server.close()  # the next call starts the server again, and this time it exits at start
        result = registry.execute("get_current_time", {"timezone": "Etc/UTC"})
        assert result.error is not None
        assert "Connection closed" in result.observation and "ExceptionGroup" not in result.observation
        assert result.observation.endswith("cannot open /srv/data: no such directory")
    finally:
        server.close()


@pytest.mark.slow
def test_a_server_killed_mid_run_gives_tool_errors_the_run_ends_in_its_limits_and_it_reconnects(tmp_path):
    command, args, pid_file = pid_wrapper(tmp_path, time_server(), "--local-timezone", "Etc/UTC")
    server = MCPServer.stdio(command, args, timeout_s=20)
    try:
        killed: list[int] = []

        @lw.tool
        def crash_the_server() -> str:
            """Kill the MCP server process."""
            killed.append(kill_pid_file(pid_file))
            return "killed"

        registry = lw.ToolRegistry([*server.tools(), crash_the_server])
        call = 'Action: get_current_time\nAction Input: {"timezone": "Etc/UTC"}'
        policy = lw.ScriptedPolicy(
            [call, "Action: crash_the_server\nAction Input: {}", call, call, "Final Answer: done"]
        )
        trace = lw.run("time?", policy, registry, max_steps=5, timeout_s=120)
        actions = [s for s in trace.steps if s.kind == "action"]
        assert [s.tool for s in actions] == ["get_current_time", "crash_the_server", "get_current_time", "get_current_time"]
        assert actions[0].error is None and killed
        assert actions[2].error is not None and actions[2].observation.startswith("ERROR[get_current_time]:")
        assert actions[3].error is None, actions[3].observation  # a fresh session
        assert trace.stopped_reason == "final" and server.connects == 2
        assert int(pid_file.read_text()) != killed[0]  # a new process
    finally:
        server.close()


@pytest.mark.slow
def test_a_hung_server_times_out_as_a_tool_error_and_the_next_call_reconnects(tmp_path):
    command, args, pid_file = pid_wrapper(tmp_path, time_server())
    server = MCPServer.stdio(command, args, timeout_s=60, overrides={"get_current_time": {"timeout_s": 2}})
    try:
        registry = lw.ToolRegistry(server.tools())
        assert registry["get_current_time"].timeout_s == 2
        kill_pid_file(pid_file, signal.SIGSTOP)
        hung = registry.execute("get_current_time", {"timezone": "Etc/UTC"})
        assert hung.error is not None and hung.error.kind == "timeout"
        again = server.call("get_current_time", {"timezone": "Etc/UTC"})  # the server's own 60 s
        assert again["timezone"] == "Etc/UTC" and server.connects == 2
    finally:
        server.close()


@pytest.mark.slow
def test_a_server_that_cannot_restart_gives_a_tool_error_not_a_crashed_run(tmp_path):
    marker = tmp_path / "started"
    script = f"[ -e '{marker}' ] && exit 7; touch '{marker}'; echo $$ > '{tmp_path}/server.pid'; exec '{time_server()}'"
    server = MCPServer.stdio("sh", ["-c", script], timeout_s=20)
    try:
        registry = lw.ToolRegistry(server.tools())
        kill_pid_file(tmp_path / "server.pid")
        call = 'Action: get_current_time\nAction Input: {"timezone": "Etc/UTC"}'
        trace = lw.run("t", lw.ScriptedPolicy([call, call, "Final Answer: gave up"]), registry, max_steps=3)
        errors = [s.error for s in trace.steps if s.kind == "action"]
        assert len(errors) == 2 and all(e is not None for e in errors)
        assert trace.stopped_reason == "final"
    finally:
        server.close()


# --- a real Node server from npm: stdio and streamable HTTP -----------------------------


@pytest.mark.slow
def test_the_everything_server_over_stdio_echoes_adds_and_describes_an_image():
    with MCPServer.stdio(everything_server(), ["stdio"], timeout_s=60) as server:
        registry = lw.ToolRegistry(server.tools())
        assert {"echo", "get-sum", "get-tiny-image", "get-structured-content"} <= set(registry.names)
        assert registry["echo"].side_effects == "read"
        assert registry["toggle-simulated-logging"].side_effects == "write"
        assert registry.execute("echo", {"message": "hi"}).observation == "Echo: hi"
        assert "3" in registry.execute("get-sum", {"a": 1, "b": 2}).observation
        image = registry.execute("get-tiny-image", {})
        assert image.error is None and "[image image/png," in image.observation
        structured = registry.execute("get-structured-content", {"location": "New York"})
        assert structured.error is None and isinstance(structured.value, dict)
        assert registry.execute("get-sum", {"a": "x", "b": 2}).error.kind == "invalid_args"


@pytest.mark.slow
def test_the_everything_server_over_streamable_http(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [everything_server(), "streamableHttp"], env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port, proc)
        with MCPServer.http(f"http://127.0.0.1:{port}/mcp", headers={"X-Test": "1"}, timeout_s=60) as server:
            registry = lw.ToolRegistry(server.tools())
            assert registry.execute("echo", {"message": "over http"}).observation == "Echo: over http"
            policy = lw.ScriptedPolicy(['Action: get-sum\nAction Input: {"a": 2, "b": 40}', "Final Answer: 42"])
            trace = lw.run("2 + 40?", policy, registry)
            assert trace.stopped_reason == "final" and "42" in trace.steps[0].observation
    finally:
        stop(proc)


# --- the embedded model calls an MCP tool ------------------------------------------------

@pytest.mark.slow
def test_the_embedded_model_calls_an_mcp_tool(time_mcp):
    """The server's schema gives an `e.g.` value but no result, which makes no worked
    example; a whole-run example (call, result, answer) shows the model the call."""
    paris = {"timezone": "Europe/Paris", "datetime": "2026-12-03T09:15:00+01:00", "is_dst": False}
    registry = lw.ToolRegistry(time_mcp.tools(include=["get_current_time"]), examples=[
        {"question": "What time is it in Paris?", "answer": "09:15",
         "calls": [{"tool": "get_current_time", "args": {"timezone": "Europe/Paris"}, "result": paris}]}])  # fmt: skip
    model = lw.models.LlamaCpp(n_ctx=2048, max_tokens=64)
    trace = lw.run("What time is it in Tokyo?", model, registry, max_steps=2)
    calls = [s for s in trace.steps if s.kind == "action"]
    assert calls and calls[0].tool == "get_current_time", [s.raw for s in trace.steps]
    # the server answered: the time in the zone the model chose, or the server's own error
    first = calls[0]
    assert first.error is None or "MCPToolError" in first.observation, first.observation
    if first.error is None:
        assert json.loads(first.observation)["timezone"] == first.args["timezone"]


def test_the_cli_parses_repeatable_mcp_flags():
    from loopwright.interfaces.cli import build_parser

    args = build_parser().parse_args(["run", "t", "--mcp", "mcp-server-time --local-timezone UTC",
                                      "--mcp", "other", "--mcp-url", "http://127.0.0.1:1/mcp"])  # fmt: skip
    assert args.mcp == ["mcp-server-time --local-timezone UTC", "other"]
    assert args.mcp_url == ["http://127.0.0.1:1/mcp"]


@pytest.mark.slow
def test_the_cli_adds_an_mcp_servers_tools_and_an_unreachable_one_is_a_usage_error():
    from loopwright.interfaces.common import UsageError
    from loopwright.interfaces.mcp_cli import add_mcp_tools, mcp_servers

    servers = mcp_servers([f"{time_server()} --local-timezone UTC"], None)
    try:
        registry = add_mcp_tools(lw.ToolRegistry(), servers)
        assert {"get_current_time", "convert_time"} <= set(registry.names)
    finally:
        servers[0].close()
    with pytest.raises(UsageError, match="127.0.0.1:1"):
        add_mcp_tools(lw.ToolRegistry(), mcp_servers(None, ["http://127.0.0.1:1/mcp"]))
