"""The controller's credential on Temporal: held by the work's workflow, never by an activity.

A :class:`~outlive_temporal.Work` workflow is its work's controller: it opens the work, admits,
marks silent attempts ``unknown``, judges and fails the work in workflow code. Its credential is
derived in workflow code from a secret the worker process holds (the :class:`OutlivePlugin`'s
``credential``, by default this user's controller key) and the work id, so every worker of the
task queue (and a replayer) derives the same one without it ever being written to Temporal's
history: no argument of an activity, no payload, no header carries it.

From outside the workflow (an operator's client publishing a corrected input, a controller's
``MarkUnknown``), the credential itself is never sent either, since an update's arguments are
kept in history where an activity could read them. The client sends a *proof* instead: an HMAC
of the exact command under the work's credential. A proof read back from history authorises
nothing new: it names one command, and applying that command again changes nothing (a version
already published, an attempt already unknown, a digest already judged).

An activity's own handle (:func:`~outlive_temporal.current_attempt`) signs nothing, so an
attempt's activity that tries a controller's command is refused
(:class:`~outlive.errors.NotController`). What it does not stop is the operating system's to
stop: code running as the user who can read the key file (see :mod:`outlive._credential`).
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["prove", "publish_text", "verify", "work_key"]

_WORK = b"outlive-temporal-work\x00"


def work_key(secret: str, work_id: str) -> str:
    """The credential of work ``work_id`` under the workers' ``secret`` (one per work: a
    work's credential says nothing about another's)."""
    return hmac.new(secret.encode(), _WORK + work_id.encode(), hashlib.sha256).hexdigest()


def publish_text(version: str) -> str:
    """What a publish proof signs: the version (its parts are fixed once it is published)."""
    return "publish\x00" + version


def prove(key: str, text: str) -> str:
    """The proof that the holder of ``key`` sent ``text``."""
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def verify(key: str | None, text: str, proof: str | None) -> bool:
    """Whether ``proof`` is ``text`` signed under ``key`` (never true without a key)."""
    if not key or not isinstance(proof, str) or not proof:
        return False
    return hmac.compare_digest(prove(key, text), proof)
