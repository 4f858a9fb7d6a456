"""Basic auth for the daemon's HTTP server, checked as Prometheus's web config does: bcrypt
(or, from older configs, an unsalted SHA-256), each verdict kept per header so a scraper pays
the check once, and the checks no verdict is kept for queued on the serving loop with guesses
paced (``AuthGate``): credentials that passed before (``Known``, kept across restarts) first,
then addresses with no wrong guess, then the rest, all but the first paced together."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import hmac
import json
import logging
import os
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from ..config.schema import PrometheusConfig

log = logging.getLogger(__name__)


class Waiting(Protocol):
    """A connection whose request waits on its credentials' check."""

    address: str
    closing: bool


AUTH_FAILURE_DELAY = 1.0  # seconds before a wrong password's 401 (then the connection closes)
AUTH_KEPT = 64  # verified credentials kept (a scraper sends the same header every scrape)
AUTH_BAD_KEPT = 1024  # wrong ones kept apart, so a guess sent again costs no check
AUTH_GUESSES_PER_SECOND = 16  # checks of addresses that guessed wrong lately, all of them together
AUTH_SUSPECT_SECONDS = 60.0  # an address that guessed wrong waits behind the others this long after
AUTH_ADDRESSES_KEPT = 4096
AUTH_CHECKS_PER_SECOND = 32  # checks of credentials never seen to pass, from every address together
KNOWN_FILE = "auth.json"


class Known:
    """Which credentials passed before, kept across restarts (``<state_dir>/auth.json``) so a
    scraper's first scrape after one is checked before any guess. Each is kept as a 32-bit mark
    (an HMAC under a key of the file's own): enough to put it first, never enough to test a
    password against offline (a mark matches one password in four billion)."""

    def __init__(self, path: Path | None):
        self.path = path
        self._key = os.urandom(16)
        self._marks: OrderedDict[int, None] = OrderedDict()
        if path is None:
            return
        from ..system import statefile

        try:
            data = statefile.read_json(path, 64 << 10)
            key = bytes.fromhex(data["key"])
            marks = [m for m in data["marks"][:AUTH_KEPT] if isinstance(m, int) and 0 <= m < 1 << 32]
            if len(key) != 16:
                raise ValueError("not a key")
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("%s cannot be read (%s): the scrapers' credentials are learnt afresh", path, e)
            return
        self._key = key
        self._marks = OrderedDict.fromkeys(marks)

    def mark(self, header: str) -> int:
        return int.from_bytes(hmac.new(self._key, header.encode(errors="replace"), hashlib.sha256).digest()[:4], "big")

    def __contains__(self, header: str) -> bool:
        return bool(self._marks) and self.mark(header) in self._marks

    def passed(self, header: str) -> None:
        """``header`` passed a check: marked, and the file written where the mark is new."""
        mark = self.mark(header)
        if mark in self._marks:
            self._marks.move_to_end(mark)
            return
        self._marks[mark] = None
        while len(self._marks) > AUTH_KEPT:
            self._marks.popitem(last=False)
        if self.path is None:
            return
        from ..system import statefile

        try:
            data = {"key": self._key.hex(), "marks": list(self._marks)}
            statefile.write_atomic(self.path, json.dumps(data).encode())
        except OSError as e:
            log.warning("cannot keep which credentials passed in %s: %s", self.path, e.strerror or e)


class BasicAuth:
    """Basic auth against a bcrypt hash (as Prometheus's exporter-toolkit) or, from older
    configs, an unsalted SHA-256. A bcrypt check takes tens of milliseconds: it runs off the
    serving loop (``AuthGate``), and its verdict is kept per header, so a scraper pays it once.
    Right and wrong verdicts are kept apart, each bounded: no number of wrong passwords can
    push a scraper's verified header out."""

    def __init__(
        self, username: str, sha256_hex: str | None = None, bcrypt_hash: str | None = None, known: Known | None = None
    ):
        self._user = username.encode()
        self.known = known if known is not None else Known(None)
        self._sha256 = sha256_hex.lower().encode() if sha256_hex else None
        self._bcrypt = bcrypt_hash.encode() if bcrypt_hash else None
        self._good: OrderedDict[str, None] = OrderedDict()  # verified headers, the most recent last
        self._bad: OrderedDict[str, None] = OrderedDict()
        self.slow = self._bcrypt is not None  # the check belongs off the loop

    def cached(self, header: str) -> bool | None:
        """The verdict without a check: None when one must be made (``verify``)."""
        if not header.startswith("Basic "):
            return False
        if header in self._good:
            return True
        if header in self._bad:
            return False
        return None

    def verify(self, header: str) -> bool:
        """The whole check (bcrypt's in a worker thread); its verdict kept."""
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).partition(b":")
        except ValueError:
            return False
        # bytes on both sides: a name in any script compares, never raises
        ok = hmac.compare_digest(user, self._user)
        if self._bcrypt is not None:
            import bcrypt

            try:
                ok = bcrypt.checkpw(password, self._bcrypt) & ok
            except ValueError:
                ok = False
        else:
            ok = hmac.compare_digest(hashlib.sha256(password).hexdigest().encode(), self._sha256) & ok
        kept = self._good if ok else self._bad
        if ok and header not in kept:
            self.known.passed(header)
        kept[header] = None
        if len(kept) > (AUTH_KEPT if ok else AUTH_BAD_KEPT):
            kept.popitem(last=False)
        return ok


class AuthGate:
    """Where the credentials no verdict is kept for wait to be checked, on the serving loop's
    thread: one check at a time (bcrypt in a worker thread), and an address that sent a wrong
    password lately waits its turn behind every other, at most one guess a second
    (AUTH_FAILURE_DELAY) for that address and AUTH_GUESSES_PER_SECOND for all such addresses
    together. A header verified before never comes here (``BasicAuth.cached``); an address with no
    recent wrong guess is checked first, so a flood of guesses delays no right password."""

    def __init__(self, loop: asyncio.AbstractEventLoop, auth: Callable[[], BasicAuth | None]):
        self.loop = loop
        self._auth = auth  # the server's, as it is now (a reload may change it)
        self._failed: OrderedDict[str, float] = OrderedDict()  # address -> when it last guessed wrong
        self._pending: dict[str, int] = {}  # address -> its checks waiting or under way
        self._known: deque = deque()  # (header, connection, done) of credentials that passed before
        self._clean: deque = deque()  # from addresses with no recent wrong guess
        self._suspect: deque = deque()
        self._next_check = 0.0  # the loop's time before which no check of unknown credentials starts
        self._busy = False
        self._timer: asyncio.TimerHandle | None = None
        self._next_guess = 0.0  # the loop's time before which no suspect's check starts
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.guesses = 0  # wrong passwords checked since start

    def suspect(self, address: str) -> bool:
        """It guessed wrong lately, or has a check under way already (many connections at once
        are no scraper's)."""
        if address in self._pending:
            return True
        when = self._failed.get(address)
        return when is not None and self.loop.time() - when < AUTH_SUSPECT_SECONDS

    def check(self, header: str, connection: Waiting, done) -> None:
        """``done(verdict)`` on the loop once ``header`` has been checked (not at all where the
        connection has closed by its turn)."""
        address = connection.address
        auth = self._auth()
        if auth is not None and header in auth.known:
            queue = self._known
        else:
            queue = self._suspect if self.suspect(address) else self._clean
        queue.append((header, connection, done))
        self._pending[address] = self._pending.get(address, 0) + 1
        self._next()

    def _next(self) -> None:
        if self._busy:
            return
        for queue in (self._known, self._clean, self._suspect):
            while queue and queue[0][1].closing:
                self._done_with(queue.popleft()[1].address)
        if self._timer is not None:
            if not self._known:
                return  # the next paced check is timed already
            self._timer.cancel()
            self._timer = None
        now = self.loop.time()
        if self._known:
            item = self._known.popleft()
        elif self._clean or self._suspect:
            # credentials never seen to pass, from every address together: AUTH_CHECKS_PER_SECOND,
            # and a suspect's at most AUTH_GUESSES_PER_SECOND and once a second for its address
            if self._clean:
                start = self._next_check
            else:
                address = self._suspect[0][1].address
                start = max(
                    self._next_check,
                    self._next_guess,
                    self._failed.get(address, -AUTH_FAILURE_DELAY) + AUTH_FAILURE_DELAY,
                )
            if start > now:  # its turn comes then (known credentials go first meanwhile)
                self._timer = self.loop.call_at(start, self._wake)
                return
            self._next_check = now + 1.0 / AUTH_CHECKS_PER_SECOND
            if self._clean:
                item = self._clean.popleft()
            else:
                item = self._suspect.popleft()
                self._next_guess = now + 1.0 / AUTH_GUESSES_PER_SECOND
        else:
            return
        self._busy = True
        header = item[0]
        auth = self._auth()
        if auth is None:  # taken away by a reload while this waited: nothing to pass
            self._checked(item, False)
            return
        if not auth.slow:
            self._checked(item, auth.verify(header))
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rigmon-auth")
        future = self.loop.run_in_executor(self._pool, auth.verify, header)
        future.add_done_callback(
            lambda f: self._checked(item, not f.cancelled() and f.exception() is None and f.result())
        )

    def _wake(self) -> None:
        self._timer = None
        self._next()

    def _done_with(self, address: str) -> None:
        left = self._pending.pop(address, 1) - 1
        if left > 0:
            self._pending[address] = left

    def _checked(self, item, ok: bool) -> None:
        header, connection, done = item
        address = connection.address
        self._done_with(address)
        if not ok:
            self.guesses += 1
            self._failed[address] = self.loop.time()
            self._failed.move_to_end(address)
            if len(self._failed) > AUTH_ADDRESSES_KEPT:
                self._failed.popitem(last=False)
        self._busy = False
        try:
            done(ok)
        finally:
            self.loop.call_soon(self._next)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def basic_auth(config: PrometheusConfig, state_dir: Path | None = None) -> BasicAuth | None:
    """The server's check, with which credentials passed before kept in ``state_dir``."""
    auth = config.basic_auth
    if auth is None:
        return None
    secret = auth.password_bcrypt or auth.password_sha256
    value = secret.get_secret_value()
    known = Known(state_dir / KNOWN_FILE if state_dir is not None else None)
    if auth.password_bcrypt:
        return BasicAuth(auth.username, bcrypt_hash=value, known=known)
    return BasicAuth(auth.username, value, known=known)
