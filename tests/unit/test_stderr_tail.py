"""The stderr tail kept for error messages, and how a child's exit is described."""

from __future__ import annotations

import itertools
import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.childexit import describe_exit
from gateway.stdio.process import StderrTail


def tail_of(*chunks: bytes, lines: int = 3, line_chars: int = 20) -> list[str]:
    tail = StderrTail(lines, line_chars)
    for chunk in chunks:
        tail.feed(chunk)
    return tail.lines


# --- StderrTail -------------------------------------------------------------------------


def test_only_the_last_n_non_empty_lines_are_kept() -> None:
    assert tail_of(b"one\ntwo\n\n   \nthree\n\r\nfour\n") == ["two", "three", "four"]


def test_each_line_is_cut_to_the_character_bound() -> None:
    assert tail_of(b"x" * 50 + b"\nshort\n") == ["x" * 20, "short"]


def test_the_bound_counts_characters_not_bytes() -> None:
    assert tail_of(("é" * 30 + "\n").encode()) == ["é" * 20]


def test_lines_split_across_chunks_are_joined() -> None:
    chunks = (b"Trace", b"back (most recent", b" call last):\nValueErr", b"or: x\n")

    assert tail_of(*chunks, line_chars=40) == ["Traceback (most recent call last):", "ValueError: x"]


def test_a_character_split_across_chunks_is_decoded_whole() -> None:
    encoded = "naïve €\n".encode()
    cut = encoded.index("€".encode()) + 1

    assert tail_of(encoded[:cut], encoded[cut:]) == ["naïve €"]


def test_crlf_and_surrounding_whitespace_are_stripped() -> None:
    assert tail_of(b"  warning: x  \r\n\terror\r\n") == ["warning: x", "error"]


def test_invalid_utf8_is_decoded_with_replacement_characters() -> None:
    assert tail_of(b"bad \xff\xfe byte\n") == ["bad \ufffd\ufffd byte"]


def test_an_unterminated_last_line_is_kept_on_close_and_only_once() -> None:
    tail = StderrTail(3, 20)
    tail.feed(b"first\nfatal: no newline")

    assert tail.lines == ["first"]
    tail.close()
    assert tail.lines == ["first", "fatal: no newline"]
    tail.close()
    assert tail.lines == ["first", "fatal: no newline"]


def test_closing_after_a_complete_line_adds_nothing() -> None:
    tail = StderrTail(3, 20)
    tail.feed(b"done\n")
    tail.close()

    assert tail.lines == ["done"]


def test_an_endless_partial_line_keeps_bounded_memory_and_its_beginning() -> None:
    tail = StderrTail(3, 20)
    tail.feed(b"START")
    chunk = b"y" * 1024 * 1024
    for _ in range(32):
        tail.feed(chunk)
        # The only observable bound: what is held for the unfinished line.
        assert len(tail._partial) <= 20 * 4
    tail.feed(b"\nnext\n")

    assert tail.lines == ["START" + "y" * 15, "next"]


def test_the_lines_property_is_a_copy() -> None:
    tail = StderrTail(3, 20)
    tail.feed(b"a\n")
    tail.lines.append("mutated")

    assert tail.lines == ["a"]


def test_indentation_longer_than_the_bound_does_not_hide_the_text_of_a_line_that_arrives_in_pieces() -> None:
    assert tail_of(b" " * 100 + b"error: boom", b"\n") == ["error: boom"]
    assert tail_of(b"\t" * 100, b" " * 100 + b"at main (index.js:1)", b"\n", line_chars=40) == ["at main (index.js:1)"]


words = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp")), min_size=1, max_size=12
)
stderr_lines = st.tuples(st.text(" \t", max_size=120), st.lists(words, max_size=5).map(" ".join)).map("".join)


@given(st.lists(stderr_lines, max_size=8), st.lists(st.integers(min_value=0), max_size=10))
def test_the_tail_is_the_same_however_stderr_is_chunked(lines: list[str], cuts: list[int]) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    bounds = [0, *sorted(cut % (len(data) + 1) for cut in cuts), len(data)]

    tail = StderrTail(4, 10)
    for start, end in itertools.pairwise(bounds):
        tail.feed(data[start:end])

    # A line cut inside a run of spaces may lose the spaces it ends with; the text is the same.
    expected = [line.strip()[:10].rstrip() for line in lines if line.strip()][-4:]
    assert [line.rstrip() for line in tail.lines] == expected


# --- describe_exit ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returncode", "described"),
    [
        (None, ("closed its stdout", None, None)),
        (0, ("exited with code 0", 0, None)),
        (3, ("exited with code 3", 3, None)),
        (-signal.SIGKILL, ("was killed by SIGKILL", None, "SIGKILL")),
        (-signal.SIGTERM, ("was killed by SIGTERM", None, "SIGTERM")),
        (-signal.SIGSEGV, ("was killed by SIGSEGV", None, "SIGSEGV")),
        (-250, ("was killed by signal 250", None, "signal 250")),
    ],
)
def test_an_exit_is_described_by_its_code_or_its_signal(
    returncode: int | None, described: tuple[str, int | None, str | None]
) -> None:
    assert describe_exit(returncode) == described
