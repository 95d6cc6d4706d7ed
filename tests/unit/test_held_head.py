"""``HeldHead``: a response's head leaves with its body in one write, in order, never lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gateway.http.heldhead import HeldHead


class Recorder(asyncio.Transport):
    """A transport that keeps what it is asked to do."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.calls: list[str] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.calls.append("close")
        self.closing = True

    def abort(self) -> None:
        self.calls.append("abort")
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7


class Turns:
    """The event loop's ``call_soon``, run by hand: one list of callbacks per loop turn."""

    def __init__(self) -> None:
        self.soon: list[Callable[[], Any]] = []

    def call_soon(self, callback: Callable[[], Any]) -> None:
        self.soon.append(callback)

    def end_turn(self) -> None:
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()


def held() -> tuple[HeldHead, Recorder, Turns]:
    recorder, turns = Recorder(), Turns()
    return HeldHead(recorder, turns), recorder, turns  # type: ignore[arg-type]


def test_a_head_followed_by_its_body_leaves_in_one_write() -> None:
    transport, recorder, turns = held()
    transport.hold_next()
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert recorder.writes == []
    transport.write(memoryview(b"{}"))
    assert recorder.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
    turns.end_turn()  # the turn's flush finds nothing left
    assert recorder.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]


def test_a_head_whose_body_comes_later_leaves_at_the_end_of_the_turn() -> None:
    transport, recorder, turns = held()
    transport.hold_next()
    transport.write(b"head")
    assert transport.get_write_buffer_size() == 7 + 4
    turns.end_turn()
    assert recorder.writes == [b"head"]
    transport.write(b"event")  # not held: only the write after hold_next is
    assert recorder.writes == [b"head", b"event"]
    assert turns.soon == []


def test_writes_without_hold_next_go_straight_through() -> None:
    transport, recorder, turns = held()
    transport.write(b"a")
    transport.writelines([b"b", b"c"])
    assert recorder.writes == [b"a", b"bc"]
    assert turns.soon == []


def test_close_writes_what_is_held_first_and_abort_drops_it() -> None:
    transport, recorder, turns = held()
    transport.hold_next()
    transport.write(b"refusal")
    transport.close()
    assert recorder.writes == [b"refusal"]
    assert recorder.calls == ["close"]
    turns.end_turn()
    assert recorder.writes == [b"refusal"]

    transport, recorder, turns = held()
    transport.hold_next()
    transport.write(b"head")
    transport.abort()
    turns.end_turn()
    assert recorder.writes == []
    assert recorder.calls == ["abort"]


def test_a_head_held_when_the_connection_is_closed_underneath_is_not_written() -> None:
    transport, recorder, turns = held()
    transport.hold_next()
    transport.write(b"head")
    recorder.closing = True  # the peer went away meanwhile
    turns.end_turn()
    assert recorder.writes == []
