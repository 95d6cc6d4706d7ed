"""The stdio server the official MCP conformance suite runs against, behind the gateway:
``python tests/servers/conformance_fixture.py --era legacy|modern|dual``.

The suite (npm ``@modelcontextprotocol/conformance``) names, for each server scenario, the
tools, prompts and resources it calls and what they must answer. This server offers all of
them, in either era, so that ``tests/integration/test_npm_conformance.py`` can run the suite
against a gateway in front of a legacy-only, a modern-only and a dual-era child. Each
handler's docstring names the scenario it serves.

**Questions.** A handler asks its client through ``Questions.ask({key: request})`` and gets
``{key: answer}``; how depends on the era of the request it serves:

* legacy: the requests go to the client inside the call (``elicitation/create``,
  ``sampling/createMessage``, ``roots/list``; several in one write, so they form one round).
  The gateway turns them into MRTR ``input_required`` rounds for a modern client.
* modern: the handler answers ``input_required`` itself (SEP-2322): the questions not yet
  answered, under their keys, and a ``requestState`` that carries the answers of the rounds
  before, sealed with an HMAC (a tampered state is refused with -32602). The retry's
  ``inputResponses`` answer them; an answer that is not an object is asked again. A question
  the request did not declare the capability for is refused with -32021.

**Tasks.** The tools of the Tasks extension scenarios (``greet``, ``slow_compute``,
``failing_job``, …) are marked ``execution.taskSupport``; the gateway runs them as tasks. This
server never serves the extension itself.

Capabilities: tools and prompts with ``listChanged``, resources with ``subscribe`` and
``listChanged``, logging and completions.

Imports: standard library and ``gateway.tools.demo.framework`` only.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import io
import json
import struct
import sys
import wave
import zlib
from collections.abc import Callable
from typing import Any, Final

from gateway.tools.demo.framework import (
    JsonObject,
    RpcError,
    StdioServer,
    Tool,
    ToolContext,
    object_schema,
    str_arg,
)

ERAS: Final = {"modern": ("modern",), "legacy": ("legacy",), "dual": ("modern", "legacy")}
INVALID_PARAMS: Final = -32602
MISSING_CLIENT_CAPABILITY: Final = -32021
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
LOG_LEVEL_KEY: Final = "io.modelcontextprotocol/logLevel"
LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
STATE_KEY: Final = b"conformance-fixture: requestState integrity key"
"""A fixed key, so that any child of a pool verifies the state another child sealed."""
ASK_TIMEOUT: Final = 60.0
"""How long a legacy question waits for the client: above the gateway's own waits in the tests."""
CAPABILITY_OF: Final = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


# -- content ------------------------------------------------------------------------------------


def _png_1x1() -> str:
    """A 1x1 red PNG, base64: the image of the image scenarios."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte, then one red pixel
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def _wav_silence() -> str:
    """A tenth of a second of 8 kHz mono silence as WAV, base64: the audio scenario's sound."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(8000)
        sound.writeframes(b"\x00\x00" * 800)
    return base64.b64encode(buffer.getvalue()).decode()


IMAGE: Final = {"type": "image", "data": _png_1x1(), "mimeType": "image/png"}
AUDIO: Final = {"type": "audio", "data": _wav_silence(), "mimeType": "audio/wav"}


def _content(*blocks: JsonObject, is_error: bool = False) -> JsonObject:
    result: JsonObject = {"content": list(blocks)}
    if is_error:
        result["isError"] = True
    return result


def _text(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def _embedded(uri: str, mime_type: str, text: str) -> JsonObject:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": text}}


def _string(description: str) -> JsonObject:
    return {"type": "string", "description": description}


# -- questions ----------------------------------------------------------------------------------


def elicit(message: str, properties: JsonObject, required: list[str] | None = None) -> JsonObject:
    """An ``elicitation/create`` request (form mode)."""
    schema: JsonObject = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = required
    return {"method": "elicitation/create", "params": {"message": message, "requestedSchema": schema}}


def sample(prompt: str, max_tokens: int) -> JsonObject:
    """A ``sampling/createMessage`` request for one user message."""
    message = {"role": "user", "content": {"type": "text", "text": prompt}}
    return {"method": "sampling/createMessage", "params": {"messages": [message], "maxTokens": max_tokens}}


LIST_ROOTS: Final = {"method": "roots/list", "params": {}}


class InputRequired(Exception):
    """Raised by ``Questions.ask`` in the modern era: ``result`` is the ``input_required`` answer."""

    def __init__(self, result: JsonObject) -> None:
        super().__init__("input required")
        self.result = result


class Questions:
    """The questions of one request, asked in the request's era (module doc)."""

    def __init__(self, ctx: ToolContext, server: StdioServer) -> None:
        self.ctx, self.server = ctx, server
        self.name = str(ctx.params.get("name"))
        self.answers: JsonObject = self._earlier_answers() if ctx.era == "modern" else {}

    def declared(self) -> JsonObject:
        """The client's capabilities: this request's (modern) or the session's (legacy)."""
        if self.ctx.era == "legacy":
            return self.server.client_capabilities
        declared = self.ctx.meta.get(CLIENT_CAPABILITIES_KEY)
        return declared if isinstance(declared, dict) else {}

    def ask(self, requests: dict[str, JsonObject]) -> dict[str, JsonObject]:
        """The client's answer to each request, by key (legacy: asked now; modern: from the retry)."""
        if self.ctx.era == "legacy":
            return self._ask_in_call(requests)
        for key, request in requests.items():
            capability = CAPABILITY_OF.get(request["method"])
            if key not in self.answers and capability is not None and capability not in self.declared():
                message = f"{self.name} needs the client capability {capability!r}"
                raise RpcError(MISSING_CLIENT_CAPABILITY, message, {"requiredCapabilities": {capability: {}}})
        missing = {key: request for key, request in requests.items() if key not in self.answers}
        if missing:
            state = seal(self.name, self.answers)
            raise InputRequired({"resultType": "input_required", "inputRequests": missing, "requestState": state})
        return {key: self.answers[key] for key in requests}

    def _ask_in_call(self, requests: dict[str, JsonObject]) -> dict[str, JsonObject]:
        pairs = [(request["method"], request.get("params")) for request in requests.values()]
        answers: dict[str, JsonObject] = {}
        for key, outcome in zip(requests, self.ctx.send_requests(pairs, ASK_TIMEOUT), strict=True):
            if isinstance(outcome, Exception):
                raise outcome
            answers[key] = outcome
        return answers

    def _earlier_answers(self) -> JsonObject:
        """The answers of earlier rounds (the sealed state) and of this retry (objects only)."""
        params = self.ctx.params
        state = params.get("requestState")
        answers = unseal(self.name, state) if state is not None else {}
        if "inputResponses" in params:
            responses = params["inputResponses"]
            if not isinstance(responses, dict):
                raise RpcError(INVALID_PARAMS, "inputResponses must be an object of answers by key")
            answers.update({key: answer for key, answer in responses.items() if isinstance(answer, dict)})
        return answers


def seal(name: str, answers: JsonObject) -> str:
    """A ``requestState`` carrying ``answers`` for the tool or prompt ``name``, with its HMAC."""
    payload = base64.urlsafe_b64encode(json.dumps({"for": name, "answers": answers}, sort_keys=True).encode())
    return f"{payload.decode()}.{hmac.new(STATE_KEY, payload, hashlib.sha256).hexdigest()}"


def unseal(name: str, state: Any) -> JsonObject:
    """The answers a ``requestState`` carries; -32602 unless this server sealed it for ``name``."""
    payload, _, mac = state.rpartition(".") if isinstance(state, str) else ("", "", "")
    expected = hmac.new(STATE_KEY, payload.encode(), hashlib.sha256).hexdigest()
    if not payload or not hmac.compare_digest(mac, expected):
        raise RpcError(INVALID_PARAMS, "requestState integrity check failed")
    sealed = json.loads(base64.urlsafe_b64decode(payload))
    if sealed.get("for") != name:
        raise RpcError(INVALID_PARAMS, f"requestState was issued for {sealed.get('for')!r}, not {name!r}")
    answers: JsonObject = sealed["answers"]
    return answers


AskingHandler = Callable[[ToolContext, JsonObject, Questions], JsonObject]


def asking(server: StdioServer, handler: AskingHandler) -> Callable[[ToolContext, JsonObject], JsonObject]:
    """A tool (or request) handler that may ask: it gets the call's ``Questions``, and an
    ``InputRequired`` it raises becomes its (modern) answer."""

    def handle(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
        try:
            return handler(ctx, arguments, Questions(ctx, server))
        except InputRequired as asked:
            return asked.result

    return handle


def _accepted(answer: JsonObject, field: str) -> str:
    content = answer.get("content") if answer.get("action") == "accept" else None
    value = content.get(field) if isinstance(content, dict) else None
    return value if isinstance(value, str) else "unknown"


def _sampled(answer: JsonObject) -> str:
    content = answer.get("content")
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) else "no response"


def _roots(answer: JsonObject) -> list[Any]:
    roots = answer.get("roots")
    return roots if isinstance(roots, list) else []


def _elicited(answer: JsonObject) -> str:
    return f"action={answer.get('action')}, content={json.dumps(answer.get('content') or {})}"


# -- tools of the core scenarios ------------------------------------------------------------------


def add_content_tools(server: StdioServer) -> None:
    """The tools that return fixed content; ``test_simple_text`` is listed first, since
    ``http-header-validation`` calls the first listed tool with no arguments."""
    fixed = [
        ("test_simple_text", "tools-call-simple-text", _content(_text("This is a simple text response for testing."))),
        ("test_image_content", "tools-call-image", _content(IMAGE)),
        ("test_audio_content", "tools-call-audio", _content(AUDIO)),
        (
            "test_embedded_resource",
            "tools-call-embedded-resource",
            _content(_embedded("test://embedded-resource", "text/plain", "This is an embedded resource content.")),
        ),
        (
            "test_multiple_content_types",
            "tools-call-mixed-content",
            _content(
                _text("Multiple content types test:"),
                IMAGE,
                _embedded("test://mixed-content-resource", "application/json", '{"test":"data","value":123}'),
            ),
        ),
        (
            "test_error_handling",
            "tools-call-error",
            _content(_text("This tool intentionally returns an error for testing"), is_error=True),
        ),
    ]
    for name, scenario, result in fixed:
        server.add_tool(Tool(name, f"Returns fixed content ({scenario}).", object_schema(), _returning(result)))


def _returning(result: JsonObject) -> Callable[[ToolContext, JsonObject], JsonObject]:
    return lambda ctx, arguments: json.loads(json.dumps(result))  # a fresh copy: the framework decorates it


def add_behaviour_tools(server: StdioServer) -> None:
    """Tools that log, report progress, change lists or wait."""

    def log(ctx: ToolContext, level: str, data: str) -> None:
        """Send a log message if the client's level lets it through (modern: the request's
        ``logLevel``, nothing without one; legacy: the last ``logging/setLevel``)."""
        minimum = ctx.meta.get(LOG_LEVEL_KEY) if ctx.era == "modern" else server.log_level
        if ctx.era == "modern" and minimum is None:
            return
        if minimum in LOG_LEVELS and LOG_LEVELS.index(level) < LOG_LEVELS.index(minimum):
            return
        ctx.notify("notifications/message", {"level": level, "logger": "conformance-fixture", "data": data})

    def with_logging(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
        """tools-call-with-logging: three info messages, ~50 ms apart."""
        for step, data in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
            if step and ctx.cancelled.wait(0.05):
                break
            log(ctx, "info", data)
        return _content(_text("Tool with logging executed successfully"))

    def logging_tool(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
        """server-stateless (no log without logLevel): one info message, if the level allows it."""
        log(ctx, "info", "Diagnostic trace logging activated")
        return _content(_text("Logging evaluated"))

    def with_progress(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
        """tools-call-with-progress: progress 0, 50, 100 of 100, ~50 ms apart."""
        for step, progress in enumerate((0, 50, 100)):
            if step and ctx.cancelled.wait(0.05):
                break
            ctx.progress(progress, 100, f"Completed step {progress} of 100")
        return _content(_text(f"progress reported for token {ctx.meta.get('progressToken')!r}"))

    def trigger(method: str) -> Callable[[ToolContext, JsonObject], JsonObject]:
        """server-stateless (listen streams): change a list, tell the listeners."""

        def change(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
            ctx.notify(method)
            return _content(_text("Mutation triggered"))

        return change

    def reconnection(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
        """server-sse-polling (pending): answers after a moment; the gateway owns the stream."""
        ctx.cancelled.wait(0.1)
        return _content(_text("Reconnection test completed successfully."))

    tools = [
        ("test_tool_with_logging", "Sends three log messages (tools-call-with-logging).", with_logging),
        ("test_tool_with_progress", "Reports progress 0, 50, 100 (tools-call-with-progress).", with_progress),
        ("test_logging_tool", "Logs only when the request's logLevel allows it (server-stateless).", logging_tool),
        (
            "test_trigger_tool_change",
            "Sends tools/list_changed (server-stateless).",
            trigger("notifications/tools/list_changed"),
        ),
        (
            "test_trigger_prompt_change",
            "Sends prompts/list_changed (server-stateless).",
            trigger("notifications/prompts/list_changed"),
        ),
        ("test_reconnection", "Answers after 100 ms (server-sse-polling).", reconnection),
    ]
    for name, description, handler in tools:
        server.add_tool(Tool(name, description, object_schema(), handler))
    server.add_tool(
        Tool(
            "test_custom_header",
            "Echoes its region, mirrored in the Mcp-Param-Region header (http-custom-header-server-validation).",
            object_schema({"region": {"type": "string", "x-mcp-header": "Region"}}, ["region"]),
            lambda ctx, arguments: _content(_text(f"region: {str_arg(arguments, 'region')}")),
        )
    )
    server.add_tool(
        Tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features (json-schema-2020-12).",
            JSON_SCHEMA_2020_12,
            lambda ctx, arguments: _content(_text(f"called with {json.dumps(arguments, sort_keys=True)}")),
        )
    )


JSON_SCHEMA_2020_12: Final = {
    # The keywords json-schema-2020-12 looks for in tools/list: $schema, $defs (an "address"
    # with an $anchor), additionalProperties, allOf/anyOf and if/then/else.
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

SEP1034_FORM: Final = {
    "name": {"type": "string", "description": "User name", "default": "John Doe"},
    "age": {"type": "integer", "description": "User age", "default": 30},
    "score": {"type": "number", "description": "User score", "default": 95.5},
    "status": {
        "type": "string",
        "description": "User status",
        "enum": ["active", "inactive", "pending"],
        "default": "active",
    },
    "verified": {"type": "boolean", "description": "Verification status", "default": True},
}


def _titled(titles: list[str], prefix: str) -> list[JsonObject]:
    return [{"const": f"{prefix}{n}", "title": title} for n, title in enumerate(titles, 1)]


SEP1330_FORM: Final = {
    "untitledSingle": {"type": "string", "description": "Pick one", "enum": ["option1", "option2", "option3"]},
    "titledSingle": {
        "type": "string",
        "description": "Pick one, titled",
        "oneOf": _titled(["First Option", "Second Option", "Third Option"], "value"),
    },
    "legacyEnum": {
        "type": "string",
        "description": "Pick one (enumNames)",
        "enum": ["opt1", "opt2", "opt3"],
        "enumNames": ["Option One", "Option Two", "Option Three"],
    },
    "untitledMulti": {
        "type": "array",
        "description": "Pick several",
        "minItems": 1,
        "maxItems": 3,
        "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
    },
    "titledMulti": {
        "type": "array",
        "description": "Pick several, titled",
        "minItems": 1,
        "maxItems": 3,
        "items": {"anyOf": _titled(["First Choice", "Second Choice", "Third Choice"], "value")},
    },
}


def add_asking_tools(server: StdioServer) -> None:
    """The tools that ask their client something (module doc, "Questions")."""

    def sampling(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """tools-call-sampling: one completion of ``prompt``."""
        answer = questions.ask({"completion": sample(str_arg(arguments, "prompt"), 100)})["completion"]
        return _content(_text(f"LLM response: {_sampled(answer)}"))

    def elicitation(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """tools-call-elicitation: a username and an email, asked with ``message``."""
        form = {"username": _string("User's response"), "email": _string("User's email address")}
        answer = questions.ask({"user": elicit(str_arg(arguments, "message"), form, ["username", "email"])})["user"]
        return _content(_text(f"User response: {_elicited(answer)}"))

    def form(message: str, properties: JsonObject) -> AskingHandler:
        """elicitation-sep1034-defaults, elicitation-sep1330-enums: one form, answer echoed."""

        def ask(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
            answer = questions.ask({"form": elicit(message, properties, [])})["form"]
            return _content(_text(f"Elicitation completed: {_elicited(answer)}"))

        return ask

    def missing_capability(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """server-stateless: needs sampling, so a client that did not declare it gets -32021
        (modern: from here; legacy: from the gateway, which the question reaches)."""
        answer = questions.ask({"completion": sample("Say hello", 10)})["completion"]
        return _content(_text(f"Success: {_sampled(answer)}"))

    def streaming_elicitation(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """server-stateless (no requests on a response stream): progress, then a question."""
        ctx.progress(50, 100, "about to ask")
        answer = questions.ask({"confirm": elicit("Continue?", {"ok": {"type": "boolean"}}, ["ok"])})["confirm"]
        return _content(_text(f"Streaming complete: {_elicited(answer)}"))

    tools: list[tuple[str, str, JsonObject, AskingHandler]] = [
        (
            "test_sampling",
            "Asks the client for a completion of prompt (tools-call-sampling).",
            object_schema({"prompt": _string("The prompt to send to the LLM")}, ["prompt"]),
            sampling,
        ),
        (
            "test_elicitation",
            "Asks the user for a username and an email (tools-call-elicitation).",
            object_schema({"message": _string("The message to show the user")}, ["message"]),
            elicitation,
        ),
        (
            "test_elicitation_sep1034_defaults",
            "Asks a form whose fields have defaults (elicitation-sep1034-defaults).",
            object_schema(),
            form("Please review and update the form fields with defaults", SEP1034_FORM),
        ),
        (
            "test_elicitation_sep1330_enums",
            "Asks a form with the five kinds of enum (elicitation-sep1330-enums).",
            object_schema(),
            form("Please select options from the enum fields", SEP1330_FORM),
        ),
        ("test_missing_capability", "Needs sampling (server-stateless).", object_schema(), missing_capability),
        (
            "test_streaming_elicitation",
            "Reports progress, then asks (server-stateless).",
            object_schema(),
            streaming_elicitation,
        ),
    ]
    for name, description, schema, handler in tools:
        server.add_tool(Tool(name, description, schema, asking(server, handler)))


# -- tools of the input-required-result scenarios (SEP-2322) ---------------------------------------

ASK_NAME: Final = elicit("What is your name?", {"name": {"type": "string"}}, ["name"])
CONFIRM: Final = elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])


def add_input_required_tools(server: StdioServer) -> None:
    """The ``test_input_required_result_*`` tools, keyed as the scenarios describe them."""

    def elicitation(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """basic-elicitation, missing-input-response, result-type, ignore-extra-params,
        validate-input: ``user_name``, then a greeting."""
        answer = questions.ask({"user_name": ASK_NAME})["user_name"]
        return _content(_text(f"Hello, {_accepted(answer, 'name')}!"))

    def sampling(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """basic-sampling: ``capital_question``."""
        answer = questions.ask({"capital_question": sample("What is the capital of France?", 100)})
        return _content(_text(f"Sampling result: {_sampled(answer['capital_question'])}"))

    def list_roots(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """basic-list-roots: ``client_roots``."""
        roots = _roots(questions.ask({"client_roots": LIST_ROOTS})["client_roots"])
        return _content(_text(f"Found {len(roots)} root(s): {json.dumps(roots)}"))

    def request_state(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """request-state: ``confirm``; the answer comes with the state this server sealed."""
        answer = questions.ask({"confirm": CONFIRM})["confirm"]
        return _content(_text(f"state-ok: requestState validated, {_elicited(answer)}"))

    def multiple(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """multiple-input-requests: an elicitation, a sampling and roots in one round."""
        greeting = sample("Generate a greeting", 50)
        answers = questions.ask({"user_name": ASK_NAME, "greeting": greeting, "client_roots": LIST_ROOTS})
        name, said = _accepted(answers["user_name"], "name"), _sampled(answers["greeting"])
        return _content(_text(f"Name: {name}; Greeting: {said}; Roots: {len(_roots(answers['client_roots']))}"))

    def multi_round(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """multi-round: ``step1`` (a name), then ``step2`` (a colour), each a round of its own."""
        step1 = elicit("Step 1: What is your name?", {"name": {"type": "string"}}, ["name"])
        name = _accepted(questions.ask({"step1": step1})["step1"], "name")
        step2 = elicit("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])
        color = _accepted(questions.ask({"step2": step2})["step2"], "color")
        return _content(_text(f"Multi-round complete for {name} who likes {color}"))

    def tampered(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """tampered-state: ``confirm``; a retry whose requestState was changed gets -32602."""
        questions.ask({"confirm": CONFIRM})
        return _content(_text("integrity-ok: state verified"))

    def capabilities(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """capability-check: asks only what the client declared (elicitation, sampling)."""
        declared = questions.declared()
        wanted: dict[str, JsonObject] = {}
        if "elicitation" in declared:
            wanted["elicit_input"] = elicit("Elicitation input", {"value": {"type": "string"}}, ["value"])
        if "sampling" in declared:
            wanted["sample_input"] = sample("Sample request", 50)
        if not wanted:
            return _content(_text("No supported capabilities declared"))
        return _content(_text(f"capabilities-ok: received {','.join(questions.ask(wanted))}"))

    tools: list[tuple[str, AskingHandler]] = [
        ("test_input_required_result_elicitation", elicitation),
        ("test_input_required_result_sampling", sampling),
        ("test_input_required_result_list_roots", list_roots),
        ("test_input_required_result_request_state", request_state),
        ("test_input_required_result_multiple_inputs", multiple),
        ("test_input_required_result_multi_round", multi_round),
        ("test_input_required_result_tampered_state", tampered),
        ("test_input_required_result_capabilities", capabilities),
    ]
    for name, handler in tools:
        description = (handler.__doc__ or "").split(":")[0].strip()
        server.add_tool(Tool(name, f"Asks its client ({description}).", object_schema(), asking(server, handler)))


# -- tools of the Tasks extension scenarios (SEP-2663) ---------------------------------------------

OPTIONAL: Final = {"taskSupport": "optional"}
REQUIRED: Final = {"taskSupport": "required"}


def add_task_tools(server: StdioServer) -> None:
    """greet (never a task), slow_compute, failing_job, protocol_error_job, confirm_delete,
    multi_input and test_tool_with_task (the tasks-* scenarios)."""

    def greet(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
        """tasks-lifecycle and others: the synchronous tool."""
        return _content(_text(f"Hello, {str_arg(arguments, 'name')}!"))

    def slow_compute(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
        """tasks-*: waits ``seconds`` (cancellable), then answers."""
        seconds = arguments.get("seconds", 1)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= 600:
            return _content(_text(f"slow_compute: seconds must be 0..600, got {seconds!r}"), is_error=True)
        if ctx.cancelled.wait(seconds):
            return _content(_text("cancelled"))  # dropped by the framework
        return _content(_text(f"computed {arguments.get('label', '')!s} after {seconds} s"))

    def failing_job(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
        """tasks-lifecycle, tasks-required-task-error (marked required): a tool error after ~1 s."""
        ctx.cancelled.wait(1.0)
        return _content(_text("failing_job failed, on purpose"), is_error=True)

    def protocol_error_job(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
        """tasks-lifecycle: a JSON-RPC error, not a tool error."""
        raise RpcError(-32603, "protocol_error_job: internal failure, on purpose")

    def confirm_delete(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """tasks-mrtr-input, tasks-dispatch-and-envelope: one confirmation, then the answer."""
        filename = str_arg(arguments, "filename", default="file")
        answer = questions.ask({"confirm": elicit(f"Delete {filename}?", {"ok": {"type": "boolean"}}, ["ok"])})
        return _content(_text(f"delete {filename}: {_elicited(answer['confirm'])}"))

    def multi_input(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """tasks-mrtr-input (partial fulfillment): two questions in one round."""
        second = elicit("Your colour?", {"color": {"type": "string"}}, ["color"])
        answers = questions.ask({"name": ASK_NAME, "color": second})
        return _content(_text(f"{_accepted(answers['name'], 'name')} likes {_accepted(answers['color'], 'color')}"))

    def with_task(ctx: ToolContext, arguments: JsonObject, questions: Questions) -> JsonObject:
        """tasks-mrtr-composition (marked required): ``user_name``, then a greeting."""
        answer = questions.ask({"user_name": ASK_NAME})["user_name"]
        return _content(_text(f"Hello from the task, {_accepted(answer, 'name')}!"))

    seconds = {"type": "number", "minimum": 0, "description": "how long to work"}
    server.add_tool(
        Tool("greet", "Says hello to name (never a task).", object_schema({"name": _string("name")}), greet)
    )
    server.add_tool(
        Tool(
            "slow_compute",
            "Works for seconds, then answers (a task when the client opts in).",
            object_schema({"seconds": seconds, "label": _string("a label for the result")}),
            slow_compute,
            OPTIONAL,
        )
    )
    server.add_tool(Tool("failing_job", "Fails as a tool after ~1 s.", object_schema(), failing_job, REQUIRED))
    server.add_tool(Tool("protocol_error_job", "Fails with -32603.", object_schema(), protocol_error_job, OPTIONAL))
    schema = object_schema({"filename": _string("the file to delete")})
    server.add_tool(
        Tool("confirm_delete", "Asks to confirm, then deletes.", schema, asking(server, confirm_delete), OPTIONAL)
    )
    server.add_tool(
        Tool("multi_input", "Asks two things at once.", object_schema(), asking(server, multi_input), OPTIONAL)
    )
    server.add_tool(
        Tool("test_tool_with_task", "Asks a name, then greets.", object_schema(), asking(server, with_task), REQUIRED)
    )


# -- prompts, resources, completions ---------------------------------------------------------------


def _message(content: JsonObject) -> JsonObject:
    return {"role": "user", "content": content}


def _argument(name: str, description: str) -> JsonObject:
    return {"name": name, "description": description, "required": True}


PROMPTS: Final = [
    {"name": "test_simple_prompt", "description": "A prompt without arguments (prompts-get-simple)."},
    {
        "name": "test_prompt_with_arguments",
        "description": "A prompt with two arguments (prompts-get-with-args).",
        "arguments": [_argument("arg1", "First test argument"), _argument("arg2", "Second test argument")],
    },
    {
        "name": "test_prompt_with_embedded_resource",
        "description": "A prompt embedding a resource (prompts-get-embedded-resource).",
        "arguments": [_argument("resourceUri", "URI of the resource to embed")],
    },
    {"name": "test_prompt_with_image", "description": "A prompt with an image (prompts-get-with-image)."},
    {
        "name": "test_input_required_result_prompt",
        "description": "A prompt that asks for context first (input-required-result-non-tool-request).",
    },
]


def add_prompts(server: StdioServer) -> None:
    """``prompts/list`` and ``prompts/get`` (the prompts-* scenarios and the MRTR prompt)."""

    def get(ctx: ToolContext, params: JsonObject, questions: Questions) -> JsonObject:
        name = params.get("name")
        arguments = params.get("arguments") if isinstance(params.get("arguments"), dict) else {}
        if name == "test_simple_prompt":
            return {"messages": [_message(_text("This is a simple prompt for testing."))]}
        if name == "test_prompt_with_arguments":
            text = f"Prompt with arguments: arg1='{arguments.get('arg1')}', arg2='{arguments.get('arg2')}'"
            return {"messages": [_message(_text(text))]}
        if name == "test_prompt_with_embedded_resource":
            resource = _embedded(
                str(arguments.get("resourceUri")), "text/plain", "Embedded resource content for testing."
            )
            return {"messages": [_message(resource), _message(_text("Please process the embedded resource above."))]}
        if name == "test_prompt_with_image":
            return {"messages": [_message(IMAGE), _message(_text("Please analyze the image above."))]}
        if name == "test_input_required_result_prompt":
            question = elicit("What context should the prompt use?", {"context": {"type": "string"}}, ["context"])
            context = _accepted(questions.ask({"user_context": question})["user_context"], "context")
            return {"messages": [_message(_text(f"Prompt with context: {context}"))]}
        raise RpcError(INVALID_PARAMS, f"unknown prompt: {name!r}")

    server.request_handlers["prompts/list"] = lambda params: {"prompts": PROMPTS}
    server.add_call_handler("prompts/get", asking(server, get))


RESOURCES: Final = {
    "test://static-text": ("Static Text", "text/plain", {"text": "This is the content of the static text resource."}),
    "test://static-binary": ("Static Binary", "image/png", {"blob": IMAGE["data"]}),
    "test://watched-resource": ("Watched Resource", "text/plain", {"text": "Watched resource content"}),
}
TEMPLATE_PREFIX, TEMPLATE_SUFFIX = "test://template/", "/data"


def add_resources(server: StdioServer) -> None:
    """Three resources and the template ``test://template/{id}/data`` (the resources-* scenarios);
    an unknown URI is -32602 with the URI in ``data`` (sep-2164-resource-not-found)."""

    def listed(params: JsonObject) -> JsonObject:
        resources = [
            {"uri": uri, "name": name, "description": f"{name} (resources-list)", "mimeType": mime}
            for uri, (name, mime, _) in RESOURCES.items()
        ]
        return {"resources": resources}

    def templates(params: JsonObject) -> JsonObject:
        template = {
            "uriTemplate": f"{TEMPLATE_PREFIX}{{id}}{TEMPLATE_SUFFIX}",
            "name": "Template",
            "description": "Data for an id (resources-templates-read)",
            "mimeType": "application/json",
        }
        return {"resourceTemplates": [template]}

    def read(params: JsonObject) -> JsonObject:
        uri = params.get("uri")
        if isinstance(uri, str) and uri in RESOURCES:
            _, mime, body = RESOURCES[uri]
            return {"contents": [{"uri": uri, "mimeType": mime, **body}]}
        if isinstance(uri, str) and uri.startswith(TEMPLATE_PREFIX) and uri.endswith(TEMPLATE_SUFFIX):
            item = uri[len(TEMPLATE_PREFIX) : -len(TEMPLATE_SUFFIX)]
            data = json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"})
            return {"contents": [{"uri": uri, "mimeType": "application/json", "text": data}]}
        raise RpcError(INVALID_PARAMS, "Resource not found", {"uri": uri})

    server.request_handlers.update({"resources/list": listed, "resources/templates/list": templates})
    server.request_handlers["resources/read"] = read


COMPLETIONS: Final = ("paris", "park", "party", "hello", "world")


def complete(params: JsonObject) -> JsonObject:
    """completion-complete: the known words that start with the typed value."""
    argument = params.get("argument")
    typed = argument.get("value") if isinstance(argument, dict) else None
    values = [word for word in COMPLETIONS if isinstance(typed, str) and word.startswith(typed)]
    return {"completion": {"values": values, "total": len(values), "hasMore": False}}


# -- the server ----------------------------------------------------------------------------------


def build_server(era: str) -> StdioServer:
    server = StdioServer(
        "conformance-fixture",
        "1.0.0",
        eras=ERAS[era],
        instructions="The gateway's fixture for the MCP conformance suite.",
        capabilities={
            "tools": {"listChanged": True},
            "prompts": {"listChanged": True},
            "resources": {"subscribe": True, "listChanged": True},
            "logging": {},
            "completions": {},
        },
    )
    add_content_tools(server)
    add_behaviour_tools(server)
    add_asking_tools(server)
    add_input_required_tools(server)
    add_task_tools(server)
    add_prompts(server)
    add_resources(server)
    server.request_handlers["completion/complete"] = complete
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The stdio server the MCP conformance suite runs against.")
    parser.add_argument("--era", choices=sorted(ERAS), default="dual", help="which protocol eras to speak")
    build_server(parser.parse_args(argv).era).serve()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
