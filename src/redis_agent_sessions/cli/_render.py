"""Events as operators read them: one line per event, then its calls, data and state changes."""

from __future__ import annotations

from typing import Any

import orjson
from rich.text import Text

from redis_agent_sessions._messages import plural, visible
from redis_agent_sessions.cli._context import when

__all__ = ["event_lines", "short_json"]

_WIDTH = 160


def short_json(value: Any, width: int = 80) -> str:
    """JSON of ``value``, cut to ``width`` characters."""
    raw = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    return raw if len(raw) <= width else raw[: width - 1] + "…"


def event_lines(event: dict[str, Any]) -> list[Text]:
    """A transcript entry: ``time author: text`` and one indented line per function call,
    function response, inline data part and state change."""
    head = Text()
    head.append(when(event.get("timestamp")), style="dim")
    head.append(" ")
    head.append(visible(str(event.get("author") or "?")), style="bold")
    lines = [head]
    content = event.get("content") or {}
    texts: list[str] = []
    for part in content.get("parts") or []:
        if not isinstance(part, dict):
            continue
        if part.get("text"):
            texts.append(str(part["text"]))
        if call := part.get("function_call"):
            lines.append(
                _indent("call ", f"{call.get('name')}({short_json(call.get('args') or {})})")
            )
        if response := part.get("function_response"):
            lines.append(
                _indent(
                    "result ", f"{response.get('name')}: {short_json(response.get('response'))}"
                )
            )
        if data := part.get("inline_data"):
            size = len(str(data.get("data") or "")) * 3 // 4
            lines.append(_indent("data ", f"{data.get('mime_type')}, ~{plural(size, 'byte')}"))
    if texts:
        head.append(": ")
        head.append(visible(" ".join(texts)[:_WIDTH]))
    actions = event.get("actions") or {}
    for key, value in (actions.get("state_delta") or {}).items():
        lines.append(_indent("state ", f"{key} = {short_json(value)}"))
    if event.get("error_code") or event.get("error_message"):
        lines.append(_indent("error ", f"{event.get('error_code')}: {event.get('error_message')}"))
    return lines


def _indent(label: str, body: str) -> Text:
    line = Text("    ")
    line.append(label, style="cyan")
    line.append(visible(body))
    return line
