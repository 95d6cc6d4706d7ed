"""Newline framing of a child's stdout: chunk-independent, bounded, linear, and id-sniffing."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.framing import DEFAULT_MAX_LINE_BYTES, SNIFF_BYTES, LineFramer, OversizedLine, sniff_id

MiB = 1024 * 1024

# A line's content: any bytes but the line breaks, with something that is not whitespace.
contents = (
    st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")).filter(bytes.strip)
)
terminators = st.sampled_from([b"\n", b"\r\n"])
blank_lines = st.sampled_from([b"\n", b"\r\n", b" \n", b"\t \r\n"])
ids = st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.text(st.characters(codec="utf-8"), max_size=40)


def feed_all(framer: LineFramer, chunks: Iterable[bytes]) -> list[bytes | OversizedLine]:
    out: list[bytes | OversizedLine] = []
    for chunk in chunks:
        out += framer.feed(chunk)
    return out


def chunked(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    bounds = [0, *sorted(cut % (len(data) + 1) for cut in cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def pattern(size: int) -> bytes:
    """Bytes with no newline whose every 512-byte window differs from its neighbours."""
    return bytes(ord("a") + (i * i + i // 7) % 26 for i in range(size))


# --- complete lines ---------------------------------------------------------------------


@given(
    st.lists(st.tuples(contents, terminators, st.lists(blank_lines, max_size=2)), max_size=12),
    st.lists(st.integers(min_value=0), max_size=30),
)
def test_lines_come_out_whole_and_in_order_however_the_bytes_are_chunked(
    lines: list[tuple[bytes, bytes, list[bytes]]], cuts: list[int]
) -> None:
    stream = b"".join(content + end + b"".join(blanks) for content, end, blanks in lines)
    framer = LineFramer()

    out = feed_all(framer, chunked(stream, cuts))

    assert out == [content for content, _, _ in lines]
    assert framer.buffered == 0


@given(
    st.lists(st.tuples(contents | blank_lines.map(lambda b: b.rstrip(b"\r\n")), terminators), min_size=1, max_size=8),
    st.integers(min_value=1, max_value=48),
)
def test_a_chunk_of_one_whole_line_is_framed_as_the_same_bytes_split_in_two(
    lines: list[tuple[bytes, bytes]], limit: int
) -> None:
    # One line per read takes the framer's shortcut; the same bytes with the first held back a
    # read go through its buffer. Both give the same lines, oversized ones (small limits) too.
    whole, split = LineFramer(limit), LineFramer(limit)
    for content, end in lines:
        line = content + end
        assert whole.feed(line) == feed_all(split, [line[:1], line[1:]])
    assert whole.buffered == split.buffered == 0


def test_a_partial_line_is_held_until_its_newline_arrives() -> None:
    framer = LineFramer()

    assert framer.feed(b'{"jsonrpc":"2.0",') == []
    assert framer.buffered == len(b'{"jsonrpc":"2.0",')
    assert framer.feed(b'"method":"x"}\n{"ne') == [b'{"jsonrpc":"2.0","method":"x"}']
    assert framer.buffered == len(b'{"ne')
    assert framer.feed(b'xt":1}\n') == [b'{"next":1}']
    assert framer.buffered == 0


def test_a_crlf_line_loses_its_carriage_return_even_when_the_newline_comes_in_the_next_chunk() -> None:
    framer = LineFramer()

    assert framer.feed(b"one\r\ntwo\r") == [b"one"]
    assert framer.feed(b"\n") == [b"two"]


def test_a_carriage_return_inside_a_line_and_surrounding_spaces_are_kept() -> None:
    assert LineFramer().feed(b"  a\rb  \n") == [b"  a\rb  "]


def test_blank_and_whitespace_only_lines_are_skipped() -> None:
    assert LineFramer().feed(b"\n\r\n   \n\t\r\nx\n\n") == [b"x"]


def test_an_empty_chunk_yields_nothing() -> None:
    framer = LineFramer()

    assert framer.feed(b"") == []
    assert framer.buffered == 0


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_byte_is_refused(limit: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        LineFramer(limit)


def test_the_default_limit_is_sixteen_mebibytes() -> None:
    assert LineFramer().max_line_bytes == DEFAULT_MAX_LINE_BYTES == 16 * MiB


# --- the limit --------------------------------------------------------------------------


@pytest.mark.parametrize("split", [None, 1, 999, 1000], ids=["one-chunk", "cut-at-1", "cut-at-999", "cut-at-1000"])
def test_a_line_of_exactly_the_limit_passes_whole(split: int | None) -> None:
    line = pattern(1000)
    data = line + b"\nnext\n"
    chunks = [data] if split is None else [data[:split], data[split:]]

    assert feed_all(LineFramer(1000), chunks) == [line, b"next"]


def test_a_line_one_byte_over_the_limit_in_one_chunk_is_reported_oversized_and_the_next_line_is_intact() -> None:
    line = pattern(1001)

    out = LineFramer(1000).feed(line + b"\nnext\n")

    assert out == [OversizedLine(1001, line[:SNIFF_BYTES], line[-SNIFF_BYTES:]), b"next"]


def test_a_line_one_byte_over_the_limit_whose_newline_comes_later_is_reported_oversized() -> None:
    line = pattern(1001)
    framer = LineFramer(1000)

    assert framer.feed(line) == []
    assert framer.buffered == 0  # over the limit with no newline yet: discarding
    assert framer.feed(b"\nnext\n") == [OversizedLine(1001, line[:SNIFF_BYTES], line[-SNIFF_BYTES:]), b"next"]


def test_an_oversized_line_whose_newline_comes_many_chunks_later_has_its_full_size_head_and_tail() -> None:
    line = pattern(250_000)
    framer = LineFramer(1024)

    out = feed_all(framer, chunked(line, range(0, len(line), 997)))
    assert out == []
    assert framer.buffered == 0

    out = framer.feed(b'\n{"after":true}\n')
    assert out == [OversizedLine(len(line), line[:SNIFF_BYTES], line[-SNIFF_BYTES:]), b'{"after":true}']


def test_the_newline_ending_an_oversized_line_may_be_the_first_byte_of_a_chunk() -> None:
    line = pattern(5000)
    framer = LineFramer(1024)

    assert framer.feed(line) == []
    assert framer.feed(b"\n") == [OversizedLine(5000, line[:SNIFF_BYTES], line[-SNIFF_BYTES:])]
    assert framer.feed(b"ok\n") == [b"ok"]


def test_two_oversized_lines_in_a_row_are_reported_separately() -> None:
    first, second = pattern(3000), pattern(4000)[::-1]
    framer = LineFramer(1024)

    out = feed_all(framer, [first[:2000], first[2000:] + b"\n" + second[:10], second[10:] + b"\nend\n"])

    assert [item.size if isinstance(item, OversizedLine) else item for item in out] == [3000, 4000, b"end"]


@given(
    st.integers(min_value=1025, max_value=6000),
    st.lists(st.integers(min_value=0), max_size=12),
)
def test_an_oversized_line_between_two_short_ones_is_reported_the_same_however_it_is_chunked(
    size: int, cuts: list[int]
) -> None:
    line = pattern(size)
    stream = b"before\n" + line + b"\nafter\n"

    out = feed_all(LineFramer(1024), chunked(stream, cuts))

    assert out == [b"before", OversizedLine(size, line[:SNIFF_BYTES], line[-SNIFF_BYTES:]), b"after"]


def test_a_64_mib_line_fed_in_1_mib_chunks_is_never_buffered_whole() -> None:
    limit, chunk = 16 * MiB, b"x" * MiB
    framer = LineFramer(limit)
    peak = 0

    framer.feed(b'{"jsonrpc":"2.0","id":42,"result":{"blob":"')
    for _ in range(64):
        assert framer.feed(chunk) == []
        peak = max(peak, framer.buffered)
    out = framer.feed(b'"}}\n{"jsonrpc":"2.0","id":43,"result":{}}\n')

    assert peak <= limit + len(chunk)
    assert framer.buffered == 0
    assert len(out) == 2
    oversized, after = out
    assert isinstance(oversized, OversizedLine)
    assert oversized.size == len(b'{"jsonrpc":"2.0","id":42,"result":{"blob":"') + 64 * MiB + len(b'"}}')
    assert len(oversized.head) == len(oversized.tail) == SNIFF_BYTES
    assert sniff_id(oversized) == 42
    assert after == b'{"jsonrpc":"2.0","id":43,"result":{}}'


class CountingBuffer(bytearray):
    """The framer's buffer, counting the bytes its newline searches examine."""

    examined = 0

    def find(self, sub: object, start: object = 0, *args: object) -> int:
        assert sub == b"\n"
        assert isinstance(start, int)
        assert not args
        found = super().find(b"\n", start)
        self.examined += (len(self) if found < 0 else found + 1) - start
        return found


def bytes_examined(size: int, chunk: bytes = b"x" * 4096) -> int:
    """Bytes the newline search examines while one SIZE-byte line arrives in CHUNK pieces."""
    framer = LineFramer(16 * MiB)
    framer._buffer = buffer = CountingBuffer()
    for _ in range(size // len(chunk)):
        framer.feed(chunk)
    assert framer._buffer is buffer
    assert framer.buffered == size
    assert framer.feed(b"\n") == [b"x" * size]
    return buffer.examined


@pytest.mark.parametrize("size", [1 * MiB, 4 * MiB])
def test_a_long_line_is_searched_once_not_rescanned_per_chunk(size: int) -> None:
    # Every byte is examined once, plus the newline: linear in the line. Rescanning the
    # buffer on every 4 KiB chunk examines size**2 / 8 KiB bytes (128x the line at 1 MiB,
    # 512x at 4 MiB). Counted, not timed: no clock, so a busy machine cannot move it.
    assert bytes_examined(size) == size + 1


# --- sniff_id ---------------------------------------------------------------------------


def oversized(line: bytes, limit: int = 1024) -> OversizedLine:
    (item,) = LineFramer(limit).feed(line + b"\n")
    assert isinstance(item, OversizedLine)
    return item


FILLER = b'"result":{"content":[{"type":"text","text":"' + b"x" * 3000 + b'"}]}'


@given(ids)
def test_sniff_id_finds_an_id_written_last_with_its_exact_type(id: int | str) -> None:
    line = oversized(b'{"jsonrpc":"2.0",' + FILLER + b',"id":' + orjson.dumps(id) + b"}")

    found = sniff_id(line)

    assert found == id
    assert type(found) is type(id)


@given(ids)
def test_sniff_id_finds_an_id_written_first_after_jsonrpc_with_its_exact_type(id: int | str) -> None:
    line = oversized(b'{"jsonrpc":"2.0","id":' + orjson.dumps(id) + b"," + FILLER + b"}")

    found = sniff_id(line)

    assert found == id
    assert type(found) is type(id)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"jsonrpc":"2.0",' + FILLER + b',"id":7}', 7),
        (b'{"jsonrpc":"2.0",' + FILLER + b',"id":"7"}', "7"),
        (b'{"jsonrpc": "2.0", ' + FILLER + b', "id" : -3 } ', -3),
        (b'{"jsonrpc":"2.0",' + FILLER + b',"id":7}\r', 7),
        (b'{"jsonrpc":"2.0","id":"a",' + FILLER + b"}", "a"),
        (b'{"id":"a","jsonrpc":"2.0",' + FILLER + b"}", "a"),
        (b' { "jsonrpc" : "2.0" , "id" : 12 , ' + FILLER + b"}", 12),
        (b'{"jsonrpc":"2.0","id":"a\\"b\\u00e9",' + FILLER + b"}", 'a"bé'),
    ],
    ids=["int-last", "str-last", "spaced-last", "crlf-last", "str-first", "first-key", "spaced-first", "escaped"],
)
def test_sniff_id_reads_the_id_of_an_oversized_line(line: bytes, expected: int | str) -> None:
    found = sniff_id(oversized(line))

    assert found == expected
    assert type(found) is type(expected)


def test_sniff_id_prefers_the_last_key_to_the_first() -> None:
    assert sniff_id(oversized(b'{"jsonrpc":"2.0","id":1,' + FILLER + b',"id":2}')) == 2


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{' + FILLER + b"}}",
        b'{"jsonrpc":"2.0",' + FILLER + b',"id":null}',
        b'{"jsonrpc":"2.0",' + FILLER + b',"id":1.5}',
        b'{"jsonrpc":"2.0",' + FILLER + b',"id":true}',
        b'{"jsonrpc":"2.0",' + FILLER + b',"id":1e3}',
        b'{"jsonrpc":"2.0","id":null,' + FILLER + b"}",
        b'{"jsonrpc":"2.0","id":[1],' + FILLER + b"}",
        b'{"jsonrpc":"2.0","result":{' + FILLER + b',"id":7}}',
        b'{"jsonrpc":"2.0","result":{"id":7,' + FILLER + b"}}",
        b'{"jsonrpc":"2.0",' + FILLER + b',"id":"\\q"}',
        b'{"jsonrpc":"2.0",' + FILLER + b',"note":"the id is \\"id\\":7}"}',
        b"x" * 5000,
    ],
    ids=[
        "no-id",
        "null-last",
        "float-last",
        "bool-last",
        "exponent-last",
        "null-first",
        "array-first",
        "nested-last",
        "nested-first",
        "bad-escape",
        "id-inside-a-string",
        "not-json",
    ],
)
def test_sniff_id_returns_none_when_no_top_level_id_is_readable(line: bytes) -> None:
    assert sniff_id(oversized(line)) is None


def test_sniff_id_returns_none_for_a_string_id_cut_off_by_the_head() -> None:
    line = OversizedLine(10_000, b'{"jsonrpc":"2.0","id":"' + b"a" * 600, b"x" * SNIFF_BYTES)

    assert sniff_id(line) is None
