"""A child call's holdings (``gateway.relay.suspensions.Holdings``): entered in order, left last
first, moved whole to a parked call, and every one left even when one fails."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.relay.suspensions import Holdings

pytestmark = pytest.mark.anyio


class Held:
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    async def __aenter__(self) -> str:
        self.log.append(f"enter {self.name}")
        return self.name

    async def __aexit__(self, *exc_info: Any) -> None:
        self.log.append(f"leave {self.name}")
        if self.fail:
            raise RuntimeError(self.name)


async def test_holdings_are_left_last_first_when_the_block_ends() -> None:
    log: list[str] = []
    async with Holdings() as holdings:
        assert await holdings.enter(Held("lease", log)) == "lease"
        assert await holdings.enter(Held("exchange", log)) == "exchange"
    assert log == ["enter lease", "enter exchange", "leave exchange", "leave lease"]


async def test_popped_holdings_outlive_the_block_until_closed() -> None:
    log: list[str] = []
    async with Holdings() as holdings:
        await holdings.enter(Held("lease", log))
        await holdings.enter(Held("exchange", log))
        parked = holdings.pop_all()  # a parked MRTR call keeps both
    assert log == ["enter lease", "enter exchange"]
    await parked.aclose()
    assert log[2:] == ["leave exchange", "leave lease"]
    await parked.aclose()  # closed once only
    assert len(log) == 4


async def test_every_holding_is_left_even_when_one_fails_and_the_first_failure_is_raised() -> None:
    log: list[str] = []
    holdings = Holdings()
    await holdings.enter(Held("lease", log, fail=True))
    await holdings.enter(Held("exchange", log, fail=True))
    with pytest.raises(RuntimeError, match="exchange"):
        await holdings.aclose()
    assert log[2:] == ["leave exchange", "leave lease"]
