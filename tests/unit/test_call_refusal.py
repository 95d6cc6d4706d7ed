"""Which answers ``call`` reports as a refusal of the endpoint, and the 404's list of endpoints."""

from __future__ import annotations

from gateway.http.app import MAX_LISTED_ENDPOINTS, served_endpoints
from gateway.protocol.jsonrpc import ErrorReply, Result, error_object
from gateway.tools.call.connection import refusal, suggested_url

URL = "http://127.0.0.1:8000/"


def error(code: int, message: str = "no") -> ErrorReply:
    return ErrorReply(1, error_object(code, message))


def test_a_404_that_is_method_not_found_or_a_gone_session_is_not_a_wrong_path() -> None:
    assert refusal(URL, 404, error(-32601), "", method="server/discover") is None
    assert refusal(URL, 404, error(-32600, "unknown session"), "", method="tools/list", in_session=True) is None


def test_a_404_of_another_kind_names_the_path_and_suggests_mcp() -> None:
    said = refusal(URL, 404, None, "<h1>Not Found</h1>", method="server/discover")
    assert (
        said == f"nothing answers MCP at {URL} (HTTP 404: <h1>Not Found</h1>); did you mean http://127.0.0.1:8000/mcp?"
    )


def test_a_gateway_error_counts_only_for_the_handshake() -> None:
    assert refusal(URL, 200, error(-31000, "cannot start x"), "", method="server/discover") is not None
    assert refusal(URL, 200, error(-31001, "exited"), "", method="tools/call") is None
    assert refusal(URL, 200, Result(1, {}), "", method="server/discover") is None


def test_suggested_urls() -> None:
    assert suggested_url("http://h:1/mcp") is None
    assert suggested_url("http://h:1/servers/a/mcp/") is None
    assert suggested_url("http://h:1") == "http://h:1/mcp"
    assert suggested_url("http://h:1/servers/a?x=1") == "http://h:1/servers/a/mcp"


def test_the_suggestion_is_the_served_endpoint_closest_to_the_path_typed() -> None:
    one = "Not Found: nothing at /mpc; this gateway serves /mcp (also /servers/demo/mcp)"
    assert suggested_url("http://h:1/mpc", one) == "http://h:1/mcp"
    assert suggested_url("http://h:1/servers/dmeo/mcp", one) == "http://h:1/servers/demo/mcp"
    many = "Not Found: nothing at /servers/fils/mcp; this gateway serves /servers/{alpha,files,github}/mcp and 3 more"
    assert suggested_url("http://h:1/servers/fils/mcp", many) == "http://h:1/servers/files/mcp"
    served = " or ".join(f"http://h:1/servers/{n}/mcp" for n in ("alpha", "files", "github"))
    assert suggested_url("http://h:1/mcp", many) == served


def test_a_path_like_no_served_one_gets_the_endpoint_itself_not_the_nearest_letters() -> None:
    # /sse (an HTTP+SSE client's path) shares more letters with /servers/demo/mcp than with /mcp.
    one = "Not Found: nothing at /sse; this gateway serves /mcp (also /servers/demo/mcp)"
    assert suggested_url("http://h:1/sse", one) == "http://h:1/mcp"
    assert suggested_url("http://h:1/", one) == "http://h:1/mcp"
    two = "Not Found: nothing at /sse; this gateway serves /servers/{demo,files}/mcp"
    assert suggested_url("http://h:1/sse", two) == "http://h:1/servers/demo/mcp or http://h:1/servers/files/mcp"


def test_without_a_list_a_typo_of_mcp_is_replaced_not_appended_to() -> None:
    assert suggested_url("http://h:1/mpc") == "http://h:1/mcp"
    assert suggested_url("http://h:1/api/mcpp/") == "http://h:1/api/mcp"
    assert suggested_url("http://h:1/api") == "http://h:1/api/mcp"


def test_a_redirect_is_reported_with_where_it_points() -> None:
    said = refusal(URL, 307, None, "", method="tools/list", location="https://elsewhere.example/mcp")
    assert said == f"{URL} redirects to https://elsewhere.example/mcp (HTTP 307); call that URL instead"


def test_the_404_lists_the_served_endpoints_up_to_a_bound() -> None:
    assert served_endpoints(["only"]) == "/mcp (also /servers/only/mcp)"
    assert served_endpoints(["a", "b"]) == "/servers/{a,b}/mcp"
    names = [f"s{i}" for i in range(MAX_LISTED_ENDPOINTS + 3)]
    assert served_endpoints(names).endswith("/mcp and 3 more")
