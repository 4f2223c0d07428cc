"""Drives `grove mcp` with the official MCP Python SDK, as an MCP host would.

Run by tests/suite/mcp.rs, which starts the fake model server, prepares the repository
and asserts on the one JSON object this script prints on stdout. The scenario:

1. list the tools;
2. `run` a task with `no_apply`, collecting its progress notifications;
3. `list_runs`, `show_run` (with diffs), then `review` approving the subtask the
   reviewer rejected, with `apply`;
4. `run` a second task and cancel the request (notifications/cancelled) once the fake
   server says its worker is mid-request, `list_runs` until it is interrupted, then
   `resume` it;

With the argument `crash`, it only starts a run ("write d then crash") and waits, to be
killed by the test while that run's worker is mid-request: the host dies, grove sees its
stdin close and no cancellation.

Environment: GROVE_BIN (the grove binary), GROVE_REPO (the repository), GROVE_HANG_DIR
(where the fake server creates a file named after the file a worker writes when that
worker's model request hangs), and the model API variables grove reads, passed through
to the server.
"""

import json
import os
import sys
import time
import traceback

import anyio
from importlib.metadata import version

from mcp import ClientSession, StdioServerParameters, stdio_client

DEADLINE_S = 60


def tool_result(result):
    """The parts of a CallToolResult the test looks at."""
    return {
        "is_error": bool(result.is_error),
        "texts": [block.text for block in result.content if block.type == "text"],
        "structured": result.structured_content,
    }


async def call(session, name, arguments, progress=None):
    async def on_progress(value, total, message):
        progress.append({"progress": value, "total": total, "message": message})

    result = await session.call_tool(
        name,
        arguments,
        progress_callback=on_progress if progress is not None else None,
    )
    return tool_result(result)


async def abandon_a_run(session, task, hang_file):
    """Starts a run, abandons the request once its worker waits on the model (the SDK
    then sends notifications/cancelled), and returns the progress seen until then and
    the result, which should never come."""
    progress = []
    outcome = {"finished_anyway": None}

    async def start():
        outcome["finished_anyway"] = await call(
            session, "run", {"task": task, "no_apply": True}, progress
        )

    async with anyio.create_task_group() as group:
        group.start_soon(start)
        deadline = time.monotonic() + DEADLINE_S
        while not os.path.exists(hang_file):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker of {task!r} never reached the model")
            await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    return progress, outcome["finished_anyway"]


async def wait_until_stopped(session):
    """list_runs until no run is `running` any more (the cancelled one winds down)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        runs = await call(session, "list_runs", {})
        statuses = [run["status"] for run in runs["structured"]["runs"]]
        if "running" not in statuses:
            return runs
        if time.monotonic() > deadline:
            raise TimeoutError(f"a run is still running: {statuses}")
        await anyio.sleep(0.1)


def server_parameters():
    return StdioServerParameters(
        command=os.environ["GROVE_BIN"],
        args=["-C", os.environ["GROVE_REPO"], "mcp"],
        env=dict(os.environ),
    )


async def scenario():
    server = server_parameters()
    hang_dir = os.environ["GROVE_HANG_DIR"]
    report = {"mcp_version": version("mcp")}
    # Every line grove writes on stdout must be a JSON-RPC message; one that is not
    # reaches the message handler as an exception.
    stray = []

    async def on_message(message):
        if isinstance(message, Exception):
            stray.append(repr(message))

    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            tools = await session.list_tools()
            report["tools"] = sorted(tool.name for tool in tools.tools)
            report["run_schema"] = next(
                tool.input_schema for tool in tools.tools if tool.name == "run"
            )

            progress = []
            report["run"] = await call(
                session, "run", {"task": "write a and b", "no_apply": True}, progress
            )
            report["run_progress"] = progress
            run_id = report["run"]["structured"]["run_id"]

            report["runs"] = await call(session, "list_runs", {})
            report["show"] = await call(
                session, "show_run", {"run_id": run_id, "diff": True, "diff_max_chars": 400}
            )
            report["show_cut"] = await call(
                session, "show_run", {"run_id": run_id, "diff": True, "diff_max_chars": 10}
            )
            report["review"] = await call(
                session, "review", {"run_id": run_id, "approve": ["S2"], "apply": True}
            )
            report["review_again"] = await call(
                session, "review", {"run_id": run_id, "reject": ["S1"], "apply": True}
            )

            progress, finished = await abandon_a_run(
                session, "write c slowly", os.path.join(hang_dir, "c.txt")
            )
            report["cancelled_progress"] = progress
            report["cancelled_result"] = finished
            report["runs_after_cancel"] = await wait_until_stopped(session)
            cancelled = next(
                run
                for run in report["runs_after_cancel"]["structured"]["runs"]
                if run["task"] == "write c slowly"
            )
            progress = []
            report["resumed"] = await call(
                session, "resume", {"run_id": cancelled["run_id"]}, progress
            )
            report["resumed_progress"] = progress
            report["runs_final"] = await call(session, "list_runs", {})
    report["stray_output"] = stray
    return report


async def crash():
    """Starts a run and waits to be killed."""
    async with stdio_client(server_parameters()) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await call(session, "run", {"task": "write d then crash", "no_apply": True})
    raise RuntimeError("the run ended before the test killed this client")


def main():
    try:
        report = anyio.run(crash if sys.argv[1:] == ["crash"] else scenario)
    except BaseException:  # the test prints stderr on failure
        traceback.print_exc()
        sys.exit(1)
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
