"""URLs as messages, logs and printed commands show them: never with a password.

The one redactor of the package: the URL parser's errors, the CLI's and the demo's all show a
URL through it, so no place can forget the query's ``password`` while another hides the
authority's. It works on the text, never on ``urlsplit``'s reading of it, because the URLs it
is most needed for are the malformed ones: an unencoded ``/`` or ``?`` in a password makes
``urlsplit`` put part of it in the path or the query, and a bad IPv6 host makes it raise.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

__all__ = ["MASK", "SECRET_PARAMETERS", "has_secret", "redact_url"]

MASK = "***"
SECRET_PARAMETERS = frozenset({"password", "ssl_password"})
"""Query parameters whose value is a secret (redis-py takes both from a URL's query)."""
_HOST_PORT = re.compile(r"(\[[^\]]*\]|[^:\[\]]*)(:[0-9]*)?")
"""A host (a name, an IPv4 address or a bracketed IPv6 one) with an optional port."""


def redact_url(url: str) -> str:
    """``url`` with every password replaced by ``***``: the authority's (the user name
    stays) and the query's ``password`` and ``ssl_password``."""
    head, sep, rest = url.partition("//")
    if not sep:
        return _redact_query(url)
    # The userinfo ends at the last "@" before the query, not before the first "/": a "/" may
    # be an unencoded character of the password.
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    userinfo, at, after = rest[:cut].rpartition("@")
    if not at and not _HOST_PORT.fullmatch(re.split(r"[/?#]", rest, maxsplit=1)[0]):
        # No "@" before the query, yet no host either ("u:pa?ss@h"): an unencoded "?" or
        # "#" in the password. Better to hide too much of a URL that cannot work.
        cut = rest.find("&") if "&" in rest else len(rest)
        userinfo, at, after = rest[:cut].rpartition("@")
    if at and ":" in userinfo:
        user = userinfo.split(":", 1)[0]
        rest = f"{user}:{MASK}@{after}{rest[cut:]}"
    return head + sep + _redact_query(rest)


def has_secret(url: str) -> bool:
    """Whether ``url`` holds a password anywhere ``redact_url`` would hide it."""
    return redact_url(url) != url


def _redact_query(text: str) -> str:
    before, mark, query = text.partition("?")
    if not mark:
        return text
    query, hash_mark, fragment = query.partition("#")
    pairs = []
    for pair in query.split("&"):
        name, eq, value = pair.partition("=")
        if eq and value and unquote_plus(name) in SECRET_PARAMETERS:
            pair = f"{name}={MASK}"
        pairs.append(pair)
    return f"{before}?{'&'.join(pairs)}{hash_mark}{fragment}"
