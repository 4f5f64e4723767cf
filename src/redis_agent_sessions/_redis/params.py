"""redis-py's connection parameters as a URL's query may give them, read from redis-py itself.

A hand-written list would drift from the installed redis-py (and did: ``ssl_ca_certs`` was
missing, so TLS with a private CA could not be configured by URL). The parameters are those
of the constructors a URL reaches: the connection pool and the connection class of its scheme
for one node, ``RedisCluster`` for a cluster. Only those a URL can express (strings, numbers,
booleans) are accepted; their values are converted as redis-py converts its URL's, booleans
strictly, so ``ssl_check_hostname=maybe`` is refused instead of meaning True.
"""

from __future__ import annotations

import codecs
import functools
import inspect
import math
import os
import ssl
import types
import typing
from collections.abc import Callable
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import (
    URL_QUERY_ARGUMENT_PARSERS,
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)

from redis_agent_sessions._redis.redact import MASK, SECRET_PARAMETERS
from redis_agent_sessions.errors import InvalidInputError

__all__ = ["BOOLEANS", "DOCS", "accepted", "check_client_kwargs", "convert"]

DOCS = "docs/settings.md#connection-urls"
"""Where the connection parameters are described: errors point there rather than list
redis-py's ~60 constructor parameters, internals among them."""

BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_CLASSES = {"redis": Connection, "rediss": SSLConnection, "unix": UnixDomainSocketConnection}
_TLS_FILES = {"ssl_ca_certs", "ssl_certfile", "ssl_keyfile"}
_TLS_DIRECTORIES = {"ssl_ca_path"}
_SIGNED = {"ssl_min_version"}
"""Integers that may be negative: ssl.TLSVersion's MINIMUM_SUPPORTED is -2."""


def _boolean(value: str) -> bool:
    try:
        return BOOLEANS[value.lower()]
    except KeyError:
        raise ValueError(value) from None


def _cert_reqs(value: str) -> str:
    """``none``, ``optional`` or ``required`` (ssl's modes), which redis-py checks only at
    the first connection, and only in lower case."""
    mode = value.lower()
    if mode not in {m.name.removeprefix("CERT_").lower() for m in ssl.VerifyMode}:
        raise ValueError(value)
    return mode


def _converter(parameter: inspect.Parameter) -> Callable[[str], Any] | None:
    """How a URL's string becomes this parameter's value; None when a URL cannot give it
    (objects such as ``retry`` or ``credential_provider``)."""
    if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
        return None
    if parameter.name == "ssl_cert_reqs":
        return _cert_reqs
    kinds = _scalar_types(parameter.annotation)
    if bool in kinds:
        return _boolean
    if parameter.name in URL_QUERY_ARGUMENT_PARSERS:
        return URL_QUERY_ARGUMENT_PARSERS[parameter.name]
    for kind in (str, float, int):
        if kind in kinds:
            return kind
    return None


def _scalar_types(annotation: Any) -> set[type]:
    """The plain types a parameter's annotation admits (``str | None`` -> {str})."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return {t for arg in typing.get_args(annotation) for t in _scalar_types(arg)}
    return {annotation} & {str, int, float, bool}


def _parameters(*constructors: Callable[..., Any]) -> dict[str, Callable[[str], Any]]:
    found: dict[str, Callable[[str], Any]] = {}
    for constructor in constructors:
        for name, parameter in inspect.signature(constructor).parameters.items():
            converter = _converter(parameter)
            if name != "self" and converter is not None:
                found.setdefault(name, converter)
    return found


@functools.cache
def accepted(scheme: str, cluster: bool) -> dict[str, Callable[[str], Any]]:
    """redis-py's parameters a ``scheme`` URL may carry, with their converters."""
    if cluster:
        return _parameters(RedisCluster.__init__)
    # Each connection class passes what it does not take on to its base (via **kwargs).
    own = [c.__dict__["__init__"] for c in _CLASSES[scheme].__mro__ if "__init__" in c.__dict__]
    return _parameters(ConnectionPool.__init__, *own)


def convert(scheme: str, cluster: bool | None, name: str, value: str) -> Any:
    """The value redis-py gets for ``name=value`` (for a cluster client, a single node's, or
    with None, either); InvalidInputError for a name it does not take or a bad value."""
    if cluster is None:
        parameters = {**accepted(scheme, False), **accepted(scheme, True)}
    else:
        parameters = accepted(scheme, cluster)
    if name not in parameters:
        target = {None: "", True: " for a Redis Cluster"}.get(cluster, f" for {scheme}://")
        raise InvalidInputError(
            f"URL parameter {name!r} is not one redis-py takes{target}{_elsewhere(name)}; "
            f"the connection parameters are in {DOCS}"
        )
    shown = MASK if name in SECRET_PARAMETERS else repr(value)
    try:
        converted = parameters[name](value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"bad value for URL parameter {name}: {shown}") from None
    # Every float redis-py takes by URL is a timeout, where -1 and nan time out at once and
    # 1e400 (inf) never: none is what its writer meant.
    if isinstance(converted, float) and not (math.isfinite(converted) and converted > 0):
        raise InvalidInputError(
            f"URL parameter {name} must be a positive number of seconds: {shown}"
        )
    if type(converted) is int and converted < 0 and name not in _SIGNED:
        raise InvalidInputError(f"URL parameter {name} must not be negative: {shown}")
    if name == "encoding":
        _check_encoding(converted)
    return converted


def check_client_kwargs(kwargs: dict[str, Any]) -> None:
    """What redis-py would only find out at the first connection, or never: InvalidInputError
    for a TLS file that does not exist (redis-py reports it as a failed connection, "Error 2
    connecting to host:port") or an encoding other than UTF-8."""
    for name in sorted(kwargs.keys() & {*_TLS_FILES, *_TLS_DIRECTORIES}):
        path = kwargs[name]
        if path is None:
            continue
        if name in _TLS_DIRECTORIES:
            if not os.path.isdir(path):
                raise InvalidInputError(f"{name}: no such directory: {str(path)!r}")
        elif not os.path.isfile(path):
            raise InvalidInputError(f"{name}: no such file: {str(path)!r}")
        elif not os.access(path, os.R_OK):
            raise InvalidInputError(f"{name}: the file cannot be read: {str(path)!r}")
    if kwargs.get("encoding") is not None:
        _check_encoding(kwargs["encoding"])


def _check_encoding(encoding: object) -> None:
    """The library reads and writes UTF-8 (its JSON, the ids in its keys): another encoding
    turns each of its commands into other bytes, which Redis refuses or stores garbled."""
    try:
        utf8 = isinstance(encoding, str) and codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        utf8 = False
    if not utf8:
        raise InvalidInputError(
            f"encoding must be utf-8 (the library stores UTF-8 JSON): {encoding!r}"
        )


def _elsewhere(name: str) -> str:
    """`` (it is one for rediss://)``: the URLs whose redis-py takes ``name``, if any."""
    where = [f"{scheme}://" for scheme in _CLASSES if name in accepted(scheme, False)]
    if any(name in accepted(scheme, True) for scheme in _CLASSES):
        where.append("a Redis Cluster (cluster=true)")
    return f" (it is one for {' and '.join(where)})" if where else ""
