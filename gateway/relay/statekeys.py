"""The replicas' keys in force (issue #40): the keyring of ``--state-secret-file``, re-read
when the file changes and swapped whole.

``StateKeys.ring`` is the ``Keyring`` in force (``gateway.protocol.keyring``: one key per line,
the first current). A reader takes it once per token it signs or checks, so each is done with
one ring even when a reload lands meanwhile; the swap is one assignment, made between two
steps of the event loop.

``watching()``, entered by the app's lifespan, looks at the file every ``check_interval``
seconds (``KEYRING_CHECK_INTERVAL``: its inode, modification time and size, following
symlinks, so the swap of a Kubernetes Secret volume's ``..data`` link counts) and re-reads it
once a change has settled (the file the same at two looks in a row, so a file written in
place, truncated then written, is never taken half-written):

- a file that reads as a keyring replaces the ring at once, and the gateway logs the
  fingerprints (event ``state_keys``, INFO): what an operator watches for while rotating;
- a file that cannot be read, or does not read as a keyring (a short key, more than
  ``MAX_STATE_KEYS``, a key twice, no key), keeps the ring in force, logged at ERROR once per
  change of the file, and shown on ``/status`` until the file changes again. Not fail-closed
  like the token files: refusing every key would end every session, parked call and task of
  every replica, the outage a rotation is meant to avoid, and the keys in force were shared
  on purpose;
- a read that overlaps a write anyway (the file changed while it was read) is not trusted:
  the next looks read it again.

Without a file the ring is one random key: the process's own (``random``), or the one the
``--workers`` supervisor made for its workers (``fixed``, ``shared``). Neither is reloaded.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio

from gateway.protocol.keyring import Keyring, KeyringError, parse_keyring
from gateway.stdio.boundary import contained

log = logging.getLogger("gateway.keys")

KEYRING_CHECK_INTERVAL: Final = 1.0
"""Seconds between looks at the key file: a ``stat``, nothing more unless it changed. A
mounted Kubernetes Secret takes up to a minute or so to change in the pod (the kubelet's sync),
so a second adds nothing noticeable to a rotation step."""
RANDOM_KEY_BYTES: Final = 32

Signature = tuple[int, int, int]
MISSING: Final[Signature] = (-1, -1, -1)
"""The signature of a file that cannot be looked at."""


class _Torn(OSError):
    """The file changed while it was read."""


def _stat(path: str) -> Signature:
    st = os.stat(path)  # follows symlinks: Kubernetes swaps a ..data link on update
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _read(path: str) -> tuple[Keyring, Signature]:
    """The file's keyring and the signature it was read at; ``OSError`` or ``KeyringError``."""
    before = _stat(path)
    with open(path, "rb") as fh:
        data = fh.read()
    if _stat(path) != before:
        raise _Torn(f"{path} changed while it was read")
    return parse_keyring(data), before


class StateKeys:
    """The keyring in force, and where it comes from (the module docstring)."""

    def __init__(
        self,
        ring: Keyring,
        path: str | None = None,
        *,
        shared: bool = True,
        check_interval: float = KEYRING_CHECK_INTERVAL,
        signature: Signature | None = None,
    ) -> None:
        """Prefer the constructors: ``load`` (a file), ``fixed`` (a key given), ``random``."""
        self.path = path
        self.shared = shared  # other processes hold these keys (a file, or the workers' key)
        self.check_interval = check_interval
        self.reloads = 0  # rings swapped in after the first
        self.problem: str | None = None  # why the file as it is now was not taken
        self._ring = ring
        self._signature = signature  # the file's, as the ring in force was read from it
        self._refused: Signature | None = None  # the file's, as last refused (logged once)
        self._seen: Signature | None = None  # a change seen once: read if it is still so at the next look
        self._handled: anyio.Event | None = None  # made on demand, in the event loop

    @classmethod
    def load(cls, path: str, *, check_interval: float = KEYRING_CHECK_INTERVAL) -> StateKeys:
        """The keys of ``path``; ``OSError`` when it cannot be read, ``KeyringError`` when it is no keyring."""
        try:
            ring, signature = _read(path)
        except _Torn:  # written while read: once more, then whatever it says
            ring, signature = _read(path)
        return cls(ring, path, check_interval=check_interval, signature=signature)

    @classmethod
    def fixed(cls, *keys: bytes) -> StateKeys:
        """These keys (the current one first), shared with other processes, never reloaded."""
        return cls(Keyring(keys))

    @classmethod
    def random(cls) -> StateKeys:
        """A random key of this process's own (no ``--state-secret-file``)."""
        return cls(Keyring((secrets.token_bytes(RANDOM_KEY_BYTES),)), shared=False)

    @property
    def ring(self) -> Keyring:
        return self._ring

    def describe(self) -> dict[str, Any]:
        """For ``/status``: the keys by fingerprint, never the keys."""
        current, *previous = self._ring.fingerprints
        return {
            "current": current,
            "previous": previous,
            "file": self.path,
            "reloads": self.reloads,
            "problem": self.problem,
        }

    def next_change(self) -> anyio.Event:
        """Set once the file's next change has been handled: its keys swapped in, or refused
        (tests wait on it; call it before changing the file)."""
        if self._handled is None:
            self._handled = anyio.Event()
        return self._handled

    def reload_if_changed(self) -> bool:
        """Look at the file; once a change has settled (the same at two looks in a row), read
        it. True when a new ring was swapped in."""
        if self.path is None:
            return False
        try:
            signature = _stat(self.path)
            problem = None
        except OSError as exc:
            signature, problem = MISSING, f"cannot read it: {exc.strerror or exc}"
        if signature == self._signature:
            self._refused = self.problem = self._seen = None  # as it was read (a failed read before)
            return False
        if signature == self._refused:
            return False
        if signature != self._seen:
            self._seen = signature  # a change: read at the next look if it stays (no half-written file)
            return False
        if problem is not None:
            return self._refuse(signature, problem)
        try:
            ring, signature = _read(self.path)
        except _Torn:
            return False  # being written: the next looks read it whole
        except OSError as exc:
            return self._refuse(signature, f"cannot read it: {exc.strerror or exc}")
        except KeyringError as exc:
            return self._refuse(signature, exc.message)
        before = self._ring
        self._ring, self._signature, self._refused, self.problem = ring, signature, None, None
        self.reloads += 1
        self._announce("reloaded", before.fingerprints[0])
        if ring.current not in before.keys:
            log.warning(
                "the state secret file's current key %s was not among the keys in force before: a "
                "replica that does not hold it yet refuses what this one now signs (add a new key as "
                "the second line first, wait until every replica has it, then move it first: "
                'docs/deployment.md, "Rotating the state secret")',
                ring.fingerprints[0],
                extra={"event": "state_keys_unannounced"},
            )
        self._changed()
        return True

    def _refuse(self, signature: Signature, problem: str) -> bool:
        self._refused, self.problem = signature, problem
        log.error(
            "the state secret file %s changed but %s; keeping the keys in force (current %s)",
            self.path,
            problem,
            self._ring.fingerprints[0],
            extra={"event": "state_keys_refused"},
        )
        self._changed()
        return False

    def _changed(self) -> None:
        if self._handled is not None:
            self._handled.set()
            self._handled = None

    def _announce(self, how: str, was: str | None = None) -> None:
        current, *previous = self._ring.fingerprints
        changed = "" if was is None or was == current else f" (was {was})"
        log.info(
            "state keys %s from %s: current %s%s, previous %s",
            how,
            self.path,
            current,
            changed,
            ", ".join(previous) or "none",
            extra={"event": "state_keys", "current_key": current, "previous_keys": previous},
        )

    @asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Re-read the file when it changes while the block runs (nothing to do without one)."""
        if self.path is None:
            yield
            return
        self._announce("loaded")
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(self.check_interval)
            with contained(log, "the state secret file's check", "the keys in force stay; checking again"):
                self.reload_if_changed()
