"""``x-mcp-header``: annotation constraints, tool filtering, and Mcp-Param-* validation."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.protocol.headers import encode_header_value
from gateway.protocol.jsonrpc import HEADER_MISMATCH
from gateway.protocol.outcome import Rejection
from gateway.protocol.xmcpheader import (
    MAX_SAFE_INTEGER,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_NODES,
    HeaderParam,
    InvalidToolAnnotation,
    check_param_headers,
    filter_tools,
    tool_header_params,
)
from tests.schemas import validate


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def annotated(header: str, type_: Any = "string") -> dict[str, Any]:
    return {"type": type_, "x-mcp-header": header}


# --- tool_header_params: the five constraints -----------------------------------------------


def test_annotated_properties_become_header_params_in_schema_order() -> None:
    schema = obj(region=annotated("Region"), count=annotated("Count", "integer"), query={"type": "string"})
    assert tool_header_params(schema) == (
        HeaderParam("Region", ("region",), "string"),
        HeaderParam("Count", ("count",), "integer"),
    )


def test_nesting_through_properties_is_statically_reachable() -> None:
    schema = obj(config=obj(flags=obj(dry=annotated("Dry-Run", "boolean"))))
    (param,) = tool_header_params(schema)
    assert param == HeaderParam("Dry-Run", ("config", "flags", "dry"), "boolean")
    assert param.header_name == "mcp-param-dry-run"


def test_a_schema_without_annotations_has_no_header_params() -> None:
    assert tool_header_params(obj(a={"type": "string"})) == ()
    assert tool_header_params(None) == ()
    assert tool_header_params(True) == ()


@pytest.mark.parametrize("header", ["", 7, None, ["Region"]])
def test_an_empty_or_non_string_annotation_invalidates_the_tool(header: Any) -> None:
    with pytest.raises(InvalidToolAnnotation, match="non-empty string"):
        tool_header_params(obj(a={"type": "string", "x-mcp-header": header}))


@pytest.mark.parametrize("header", ["Has Space", "Colon:", "Line\nBreak", "Café", "a/b", "(x)"])
def test_an_annotation_that_is_not_an_http_token_invalidates_the_tool(header: str) -> None:
    with pytest.raises(InvalidToolAnnotation, match="HTTP token"):
        tool_header_params(obj(a=annotated(header)))


@pytest.mark.parametrize("header", ["Method", "X-Trace_id", "a.b", "!#$%&'*+-.^_`|~09"])
def test_any_rfc9110_token_is_a_valid_annotation(header: str) -> None:
    assert tool_header_params(obj(a=annotated(header)))[0].header == header


def test_annotations_must_be_unique_case_insensitively() -> None:
    schema = obj(a=annotated("Region"), b=obj(c=annotated("REGION")))
    with pytest.raises(InvalidToolAnnotation, match="repeats"):
        tool_header_params(schema)


@pytest.mark.parametrize("type_", ["number", "object", "array", "null", None, ["number", "null"]])
def test_an_annotation_on_a_property_that_is_not_string_integer_or_boolean_invalidates_the_tool(
    type_: Any,
) -> None:
    schema = obj(a={"x-mcp-header": "A"} if type_ is None else annotated("A", type_))
    with pytest.raises(InvalidToolAnnotation, match="string, integer or boolean"):
        tool_header_params(schema)


def test_an_annotation_on_enum_or_const_without_a_type_invalidates_the_tool() -> None:
    with pytest.raises(InvalidToolAnnotation, match="declares no type"):
        tool_header_params(obj(a={"enum": ["x", "y"], "x-mcp-header": "A"}))


@pytest.mark.parametrize(
    ("type_", "expected"),
    [(["string", "null"], "string"), (["null", "integer"], "integer"), (["boolean"], "boolean")],
)
def test_a_type_array_of_one_header_type_plus_optional_null_is_accepted(type_: Any, expected: str) -> None:
    assert tool_header_params(obj(a=annotated("A", type_)))[0].type == expected


@pytest.mark.parametrize("type_", [["string", "integer"], ["null"], [], ["string", "string"], [1, "null"]])
def test_any_other_type_array_invalidates_the_tool(type_: Any) -> None:
    with pytest.raises(InvalidToolAnnotation):
        tool_header_params(obj(a=annotated("A", type_)))


UNREACHABLE = [
    {"type": "object", "x-mcp-header": "Root"},
    obj(list={"type": "array", "items": annotated("A")}),
    obj(list={"type": "array", "items": [annotated("A")]}),
    obj(tuple={"type": "array", "prefixItems": [annotated("A")]}),
    obj(list={"type": "array", "contains": annotated("A")}),
    obj(map={"type": "object", "additionalProperties": annotated("A")}),
    obj(map={"type": "object", "patternProperties": {"^x": annotated("A")}}),
    obj(map={"type": "object", "propertyNames": annotated("A")}),
    {"type": "object", "oneOf": [obj(a=annotated("A"))]},
    {"type": "object", "anyOf": [obj(a=annotated("A"))]},
    {"type": "object", "allOf": [obj(a=annotated("A"))]},
    {"type": "object", "not": obj(a=annotated("A"))},
    {"type": "object", "if": obj(a=annotated("A")), "then": {}},
    {"type": "object", "then": obj(a=annotated("A"))},
    {"type": "object", "else": obj(a=annotated("A"))},
    {"type": "object", "$defs": {"Thing": annotated("A")}, "properties": {"t": {"$ref": "#/$defs/Thing"}}},
    {"type": "object", "definitions": {"Thing": annotated("A")}},
    {"type": "object", "dependentSchemas": {"a": obj(b=annotated("A"))}},
    obj(a={"anyOf": [annotated("A"), {"type": "null"}]}),
]


@pytest.mark.parametrize("schema", UNREACHABLE)
def test_an_annotation_off_the_properties_chain_invalidates_the_tool(schema: dict[str, Any]) -> None:
    with pytest.raises(InvalidToolAnnotation, match="not reachable through properties alone"):
        tool_header_params(schema)


def test_a_property_named_x_mcp_header_is_not_an_annotation() -> None:
    schema = obj(**{"x-mcp-header": {"type": "string"}})
    assert tool_header_params(schema) == ()


def test_data_keywords_are_not_walked() -> None:
    schema = obj(a={"type": "object", "default": {"x-mcp-header": "A"}, "examples": [{"x-mcp-header": "B"}]})
    assert tool_header_params(schema) == ()


def test_ref_is_never_dereferenced() -> None:
    schema = obj(a={"$ref": "https://example.invalid/schema.json"})
    assert tool_header_params(schema) == ()


def test_a_schema_deeper_than_the_cap_invalidates_the_tool() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH + 1):
        schema = obj(n=schema)
    with pytest.raises(InvalidToolAnnotation, match="deeper"):
        tool_header_params(schema)


def test_a_schema_with_more_nodes_than_the_cap_invalidates_the_tool() -> None:
    schema = obj(**{f"p{i}": {"type": "string"} for i in range(MAX_SCHEMA_NODES)})
    with pytest.raises(InvalidToolAnnotation, match="subschemas"):
        tool_header_params(schema)


# --- filter_tools ---------------------------------------------------------------------------


def test_invalid_tools_are_dropped_with_their_name_and_reason_and_the_rest_kept() -> None:
    good = {"name": "weather", "inputSchema": obj(region=annotated("Region"))}
    bad = {"name": "sum", "inputSchema": obj(x=annotated("X", "number"))}
    plain = {"name": "echo", "inputSchema": obj(text={"type": "string"})}
    kept, dropped = filter_tools([good, bad, plain])
    assert kept == [good, plain]
    assert [name for name, _ in dropped] == ["sum"]
    assert "number" in dropped[0][1]


def test_a_tool_entry_that_is_not_an_object_is_dropped() -> None:
    kept, dropped = filter_tools(["weather", {"name": "echo"}])  # type: ignore[list-item]
    assert kept == [{"name": "echo"}]
    assert dropped == [('"weather"', "a tool must be a JSON object")]


# --- check_param_headers --------------------------------------------------------------------

REGION = HeaderParam("Region", ("region",), "string")
COUNT = HeaderParam("Count", ("count",), "integer")
DRY = HeaderParam("Dry", ("opts", "dry"), "boolean")


def mismatch(result: Rejection | None) -> str:
    assert result is not None
    assert result.status == 400
    assert result.error is not None
    assert result.error["code"] == HEADER_MISMATCH
    body = result.body()
    assert body is not None
    validate(body, "HeaderMismatchError")
    message: str = result.error["message"]
    return message


def test_matching_headers_pass() -> None:
    args = {"region": "us-west1", "count": 42, "opts": {"dry": True}}
    hdrs = {"mcp-param-region": "us-west1", "mcp-param-count": "42", "mcp-param-dry": "true"}
    assert check_param_headers((REGION, COUNT, DRY), args, hdrs) is None


def test_a_sentinel_encoded_header_is_decoded_before_comparing() -> None:
    args = {"region": "Zürich"}
    assert check_param_headers((REGION,), args, {"mcp-param-region": encode_header_value("Zürich")}) is None


def test_a_missing_header_for_a_present_argument_is_a_mismatch() -> None:
    assert "missing Mcp-Param-Region" in mismatch(check_param_headers((REGION,), {"region": "eu"}, {}))


def test_a_header_that_differs_from_the_argument_is_a_mismatch_naming_both() -> None:
    message = mismatch(check_param_headers((REGION,), {"region": "eu"}, {"mcp-param-region": "us"}))
    assert "Mcp-Param-Region" in message
    assert '"us"' in message
    assert '"eu"' in message


def test_string_values_compare_case_sensitively() -> None:
    mismatch(check_param_headers((REGION,), {"region": "EU"}, {"mcp-param-region": "eu"}))


@pytest.mark.parametrize("args", [{}, {"region": None}, None])
def test_an_absent_or_null_argument_needs_the_header_absent(args: dict[str, Any] | None) -> None:
    assert check_param_headers((REGION,), args, {}) is None
    assert "is present" in mismatch(check_param_headers((REGION,), args, {"mcp-param-region": "eu"}))


def test_a_path_through_a_non_object_reads_as_absent() -> None:
    assert check_param_headers((DRY,), {"opts": "yes"}, {}) is None


@pytest.mark.parametrize(("header", "value"), [("42", 42), ("42", 42.0), ("42.0", 42), ("-7", -7), ("007", 7)])
def test_integers_compare_numerically(header: str, value: Any) -> None:
    assert check_param_headers((COUNT,), {"count": value}, {"mcp-param-count": header}) is None


@pytest.mark.parametrize("header", ["42.5", "4.2e1", "+42", "forty-two", "", "1" * 30])
def test_an_integer_header_that_is_not_the_same_integer_is_a_mismatch(header: str) -> None:
    mismatch(check_param_headers((COUNT,), {"count": 42}, {"mcp-param-count": header}))


@pytest.mark.parametrize("header", ["True", "1", "yes"])
def test_booleans_must_be_exactly_true_or_false(header: str) -> None:
    mismatch(check_param_headers((DRY,), {"opts": {"dry": True}}, {"mcp-param-dry": header}))
    assert check_param_headers((DRY,), {"opts": {"dry": False}}, {"mcp-param-dry": "false"}) is None


@pytest.mark.parametrize(
    ("param", "value"),
    [(REGION, 5), (COUNT, "42"), (COUNT, True), (COUNT, 42.5), (DRY, "true"), (DRY, 1)],
)
def test_a_body_value_of_the_wrong_type_is_refused(param: HeaderParam, value: Any) -> None:
    args: dict[str, Any] = {"opts": {"dry": value}} if param is DRY else {param.path[0]: value}
    message = mismatch(check_param_headers((param,), args, {param.header_name: "x"}))
    assert "cannot be mirrored" in message


def test_an_integer_outside_the_safe_range_is_refused() -> None:
    ok = {"count": MAX_SAFE_INTEGER}
    assert check_param_headers((COUNT,), ok, {"mcp-param-count": str(MAX_SAFE_INTEGER)}) is None
    too_big = {"count": MAX_SAFE_INTEGER + 1}
    message = mismatch(check_param_headers((COUNT,), too_big, {"mcp-param-count": str(MAX_SAFE_INTEGER + 1)}))
    assert "2^53" in message


def test_a_header_with_invalid_characters_is_a_mismatch() -> None:
    message = mismatch(check_param_headers((REGION,), {"region": "é"}, {"mcp-param-region": "\xc3\xa9"}))
    assert "characters" in message


def test_a_bad_base64_header_is_a_mismatch() -> None:
    message = mismatch(check_param_headers((REGION,), {"region": "Hi"}, {"mcp-param-region": "=?base64?SGk?=?="}))
    assert "base64" in message


def test_undeclared_param_headers_are_ignored() -> None:
    hdrs = {"mcp-param-region": "eu", "mcp-param-other": "\x00junk"}
    assert check_param_headers((REGION,), {"region": "eu"}, hdrs) is None


def test_the_rejection_carries_the_request_id() -> None:
    result = check_param_headers((REGION,), {"region": "eu"}, {}, request_id="call-1")
    assert result is not None
    assert result.body() == {"jsonrpc": "2.0", "id": "call-1", "error": result.error}
