"""A python process with the operator CLI imported, forking one child per command (``_cli.py``).

Started once per test session (and startup environment and preload): ``python -m
redis_agent_sessions`` spends most of its time importing (about a second of CPU per command,
hundreds of commands per run). Each command
still runs in an OS process of its own, as ``python -m redis_agent_sessions ARGS`` runs:
stdin, stdout and stderr are its own files, ``sys.argv``, ``sys.path``, the environment and
the working directory are the caller's, ``__main__`` runs through runpy, and the exit code
is the process's (an uncaught exception prints its traceback and exits 1, as Python does).
A test's helper script runs the same way, as ``python SCRIPT ARGS`` runs (``sys.path[0]``
its directory): the ADK helpers spend a second or more importing google-adk.

Protocol, one JSON line each way per command: the request ``{"argv", "env", "cwd", "stdin",
"stdout", "stderr", "script"}`` (``stdin`` a file path, or null for the caller's stdin,
passed open; ``stdout`` and ``stderr`` the paths to write; ``script`` null for the CLI, else
the script's path, ``argv`` then its arguments), then ``{"pid"}`` once forked and
``{"status"}`` (the exit code; minus the signal if one ended it) once it ended. Its first
argument is the number of the file descriptor of the caller's stdin, the next ones modules
to import beforehand (those some commands import on their own, when worth it).
"""

from __future__ import annotations

import gc
import importlib
import io
import json
import os
import runpy
import sys
import threading

_BASE_PATH: list[str] = []


def _prepare(preload: list[str]) -> None:
    """Import what every command imports (and ``preload``), and note the ``sys.path`` a
    child extends."""
    # Started with `-c`: sys.path[0] is '' (the cwd), then PYTHONPATH's entries.
    given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    assert sys.path[0] == "", sys.path
    _BASE_PATH[:] = sys.path[1 + len(given) :]
    from redis_agent_sessions.cli import _COMMANDS, _parser

    _parser()
    try:  # the [cli] extra's modules; a run without it imports nothing more
        for module, _ in _COMMANDS.values():
            importlib.import_module(f"redis_agent_sessions.cli.{module}")
        importlib.import_module("redis_agent_sessions.cli._context")
    except ImportError:
        pass
    try:  # the [adk] extra's models, which `import` writes through (about 0.5 s a command)
        importlib.import_module("redis_agent_sessions.adk")
    except ImportError:
        pass
    for module in preload:
        importlib.import_module(module)
    # Forking copies one thread: the imports must not have started others.
    assert threading.active_count() == 1, threading.enumerate()


def _stdio(fd: int, like: object) -> io.TextIOWrapper:
    """A text stream on ``fd`` made as Python makes ``sys.std*`` at startup (not a tty)."""
    raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
    buffered = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffered,
        encoding=like.encoding,  # type: ignore[attr-defined]
        errors=like.errors,  # type: ignore[attr-defined]
        newline="\n",  # no translation, on POSIX
        line_buffering=fd == 2,  # as Python's stderr is
    )


def _child(request: dict[str, object], callers_stdin: int) -> None:
    """In the forked child: become ``python -m redis_agent_sessions ARGS`` (or ``python
    SCRIPT ARGS``); never returns."""
    stdin = request["stdin"]
    source = os.open(stdin, os.O_RDONLY) if isinstance(stdin, str) else callers_stdin
    os.dup2(source, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    if source != callers_stdin:
        os.close(source)
    os.close(callers_stdin)
    sys.stdin = sys.__stdin__ = _stdio(0, sys.stdin)  # type: ignore[assignment,misc]
    sys.stdout = sys.__stdout__ = _stdio(1, sys.stdout)  # type: ignore[assignment,misc]
    sys.stderr = sys.__stderr__ = _stdio(2, sys.stderr)  # type: ignore[assignment,misc]
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(str(request["cwd"]))
    given = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    argv = request["argv"]
    assert isinstance(argv, list)
    script = request.get("script")
    if isinstance(script, str):
        # As `python SCRIPT` makes them.
        sys.path[:] = [os.path.dirname(os.path.abspath(script)), *given, *_BASE_PATH]
        sys.argv = [script, *argv]
        runpy.run_path(script, run_name="__main__")
    else:
        sys.path[:] = [os.getcwd(), *given, *_BASE_PATH]  # as `python -m` makes it
        sys.argv = ["-m", *argv]  # runpy puts the module's path in argv[0], as `-m` does
        runpy.run_module("redis_agent_sessions", run_name="__main__", alter_sys=True)
    sys.exit(0)


def serve(callers_stdin: int, preload: list[str]) -> None:
    _prepare(preload)
    # What the imports made lives on in every child: frozen, a child's collections (and
    # its exit) pass over it instead of walking it and copying each page it touches (a
    # command took 0.24 s instead of 0.07, a script doing nothing 0.23 s instead of 0.06).
    gc.freeze()
    control_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    control_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    for line in control_in:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            control_in.close()
            control_out.close()
            _child(request, callers_stdin)  # exits; an exception ends the child as it ends python
        control_out.write(json.dumps({"pid": pid}) + "\n")
        control_out.flush()
        _, status = os.waitpid(pid, 0)
        control_out.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        control_out.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2:])
