"""`HandoverAdoption`: what a `ServerSession` handed over by the previous process image says first.

A router kept through a re-execution (``kill -USR2``) still holds the data of the old process.
When this process continued the old one's session ids and serial (its first content was the
same, `snapshot.Continuation`), a router holding that session and a serial still in the diff
log is simply one of ours (`confirm_kept`): nothing is resent. Any other holds data under a
session id this process does not use. It must be brought to a Reset Query without waiting for
a timer of its own, and what makes each router ask differs:

* BIRD (2.0 and 2.17) resets at once on a Cache Reset that comes while it is established, but
  answers a Cache Reset to its own Serial Query only after its retry interval (600 s by
  default, or the Retry Interval we sent).
* GoBGP sends a Reset Query on any Cache Reset; OpenBGPD on one while idle, after its random
  wait of up to 9 s.
* RTRlib (FRR, rtrclient) ignores a Cache Reset it did not ask for, and asks on a Serial
  Notify.

So at the first data the session sends a Cache Reset unasked (`handover_reset`); a router that
sends nothing within a short wait (the I/O layer's) gets a Serial Notify. That Notify carries
the new session id: a router that took the Cache Reset holds no id, and OpenBGPD 8 takes the
id of a Notify then and checks our Cache Response against it (with the old id it refused the
table of a Reset Query it had sent meanwhile, in CI). Without that Cache Reset, a Notify
carries the router's own id and another serial (OpenBGPD checks an id it holds; BIRD 2.0 and
GoBGP skip an equal serial). Until a response here, any Serial Query gets Cache Reset, whatever
id it names: the router holds the old process's data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rtr_protocol.encoder import encode_cache_reset, encode_serial_notify
from rtr_protocol.session_state import SessionState

if TYPE_CHECKING:
    from snapshot import PublishedState, Serial

__all__ = ["HandoverAdoption"]


class HandoverAdoption:
    """The handover part of `ServerSession` (its attributes live in the session's slots)."""

    #: ``_adopt_reset``: None; "sent" with the unasked Cache Reset; "asked" at the next PDU.
    #: ``_session_id`` and ``_last_serial`` are the session's (what the router holds of ours).
    __slots__ = ("_adopt_reset", "_adopted", "_last_serial", "_session_id")

    _adopted: tuple[int, Serial] | None
    _adopt_reset: str | None
    _state: SessionState
    _version: int | None
    _last_serial: Serial | None
    _session_id: int | None
    _no_data_sent: bool

    @property
    def kept_unconfirmed(self) -> bool:
        """True for a router kept with data that has had no response here and no confirmation."""
        return self._adopted is not None and self._last_serial is None

    def confirm_kept(self, state: PublishedState) -> bool:
        """True once a kept router holds a serial of ``state``'s session (nothing to resend).

        This image continued the previous one's session ids and serial (same content,
        `snapshot.Continuation`): a router that holds that session id and a serial still in the
        diff log is one of ours from now on, as if it had had that response here (also while
        its query is held; not after No Data Available, which a router may flush on).
        """
        known = self._adopted
        if known is None or self._last_serial is not None or self._adopt_reset is not None:
            return False
        version = self._version
        if version is None or self._state not in (SessionState.IDLE, SessionState.HELD):
            return False
        if self._no_data_sent:  # told No Data Available here: it may have dropped its table
            return False
        session_id, serial = known
        if session_id != state.session_ids.for_version(version):
            return False
        if state.delta_since(serial) is None:
            return False
        self._session_id, self._last_serial = known
        self._adopted = None
        return True

    def handover_reset(self) -> bytes | None:
        """The unasked Cache Reset for a router kept with data, once; None for any other.

        Only between responses, and before any PDU or response here.
        """
        if self._adopted is None or self._adopt_reset is not None or self._last_serial is not None:
            return None
        if self._state is not SessionState.IDLE or self._version is None:
            return None
        self._adopt_reset = "sent"
        return encode_cache_reset(self._version)

    @property
    def awaits_reset_query(self) -> bool:
        """True after `handover_reset` until the router's next PDU."""
        return self._adopt_reset == "sent"

    def _adopted_notify(self, version: int, state: PublishedState) -> bytes:
        """A Serial Notify before any response here.

        After the unasked Cache Reset: in the new id. Else: in the router's old id, with a
        serial other than its own.
        """
        assert self._adopted is not None
        if self._adopt_reset is not None:
            return encode_serial_notify(
                version, state.session_ids.for_version(version), state.serial
            )
        old_id, old_serial = self._adopted
        serial = state.serial if state.serial != old_serial else old_serial.add(1)
        return encode_serial_notify(version, old_id, serial)
