"""The server's questions to ``call``: elicitation forms, roots, and sampling (refused).

A server asks in one of two ways: a legacy server sends a JSON-RPC request on the call's
SSE stream (``connection`` hands it to ``Asker.answer``), a modern one (or the gateway for
a legacy child) ends the call with an MRTR ``input_required`` result whose
``inputRequests`` ``answer_all`` answers, so the command can retry (digest §1.4).

Contract:

* ``capabilities()`` declares only what this invocation can answer: ``elicitation`` (form
  mode) when a person is at a terminal, ``roots`` when ``--root`` was given. Compliant
  servers never ask for anything else; ``sampling`` is never declared (``call`` has no model).
* ``elicitation/create`` (form): the message and one prompt per property of the flat
  ``requestedSchema`` (string, number, integer, boolean, single- and multi-select enums:
  ``gateway.tools.call.fields``), on stderr, read from stdin; a bad value is asked again;
  an empty answer leaves an optional field out (or takes its default); end of input
  (Ctrl-D) declines. URL mode is declined with a note.
* ``roots/list`` → the ``--root`` roots; ``sampling/createMessage`` and anything else →
  ``AskRefused`` with a clear message (a JSON-RPC error on the legacy stream; for MRTR the
  command stops with that message, since an ``inputResponses`` value must be a result).

Reading stdin runs in a worker thread, so the event loop (and the call's stream) go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import anyio
from rich.console import Console
from rich.text import Text

from gateway.protocol import inputs
from gateway.protocol.jsonrpc import METHOD_NOT_FOUND, JsonObject
from gateway.tools.call.fields import field_label, field_value

__all__ = ["AskRefused", "Asker", "ReadLine", "field_label", "field_value"]

MAX_REASKS: Final = 5
"""A value that does not fit its type is asked again at most this often, then the form is declined."""

ReadLine = Callable[[], str]
"""Reads one line of the user's answer ('' at end of input), as ``sys.stdin.readline``."""


class AskRefused(Exception):
    """This client cannot answer the server's request; ``message`` says why, ``code`` is the JSON-RPC code."""

    def __init__(self, message: str, code: int = METHOD_NOT_FOUND) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Asker:
    def __init__(self, err: Console, *, read_line: ReadLine | None, roots: Sequence[JsonObject] = ()) -> None:
        self.err = err
        self.read_line = read_line  # None: no person at a terminal to ask
        self.roots = list(roots)

    def capabilities(self) -> JsonObject:
        declared: JsonObject = {}
        if self.read_line is not None:
            declared["elicitation"] = {"form": {}}
        if self.roots:
            declared["roots"] = {}
        return declared

    async def answer(self, method: str, params: JsonObject | None) -> JsonObject:
        """The result for one request of the server; ``AskRefused`` when there is none."""
        params = params or {}
        if method == "ping":
            return {}
        if method == inputs.ROOTS:
            if not self.roots:
                raise AskRefused("the server asked for roots/list; give roots with --root PATH")
            return {"roots": self.roots}
        if method == inputs.ELICITATION:
            return await self._elicit(params)
        if method == inputs.SAMPLING:
            raise AskRefused("the server asked for sampling/createMessage (an LLM completion); call has no model")
        raise AskRefused(f"this client does not handle {method}")

    async def answer_all(self, requests: object) -> JsonObject:
        """``inputResponses`` for an MRTR ``inputRequests`` map, asked in order."""
        if not isinstance(requests, dict):
            return {}
        responses: JsonObject = {}
        for key, request in requests.items():
            method = request.get("method") if isinstance(request, dict) else None
            params = request.get("params") if isinstance(request, dict) else None
            if not isinstance(method, str):
                raise AskRefused(f"the server's input request {key!r} names no method")
            responses[key] = await self.answer(method, params if isinstance(params, dict) else None)
        return responses

    # -- elicitation ----------------------------------------------------------------------

    async def _elicit(self, params: JsonObject) -> JsonObject:
        message = params.get("message")
        if params.get("mode") == "url":
            self.err.print(Text(f"the server asked to open {params.get('url')!r}: declined (call opens no URLs)"))
            return {"action": "decline"}
        if self.read_line is None:
            raise AskRefused("the server asked for input (elicitation); run call in a terminal to answer it")
        self.err.print(Text(f"the server asks: {message}", style="bold"))
        self.err.print(Text("(Enter an empty line to skip an optional field; Ctrl-D declines.)", style="dim"))
        schema = params.get("requestedSchema")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        required = schema.get("required") if isinstance(schema, dict) else None
        required_names = set(required) if isinstance(required, list) else set()
        content: JsonObject = {}
        for name, prop in (properties if isinstance(properties, dict) else {}).items():
            value = await self._ask_field(name, prop if isinstance(prop, dict) else {}, name in required_names)
            if value is _DECLINED:
                self.err.print(Text("declined", style="yellow"))
                return {"action": "decline"}
            if value is not _SKIPPED:
                content[name] = value
        return {"action": "accept", "content": content}

    async def _ask_field(self, name: str, schema: JsonObject, required: bool) -> Any:
        label = field_label(name, schema, required)
        for _ in range(MAX_REASKS):
            self.err.print(Text(label), end="")
            assert self.read_line is not None
            line = await anyio.to_thread.run_sync(self.read_line)
            if line == "":
                return _DECLINED  # end of input
            text = line.rstrip("\r\n")
            if text == "":
                if "default" in schema:
                    return schema["default"]
                if not required:
                    return _SKIPPED
                self.err.print(Text(f"{name} is required", style="yellow"))
                continue
            try:
                return field_value(text, schema)
            except ValueError as exc:
                self.err.print(Text(str(exc), style="yellow"))
        return _DECLINED


_SKIPPED: Final = object()
_DECLINED: Final = object()
