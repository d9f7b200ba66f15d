"""An executable model of the article's rules, written from the article, not from the ledger.

The ledger (:mod:`outlive.ledger`) is the code under test; this model is its oracle. It keeps one
work in plain mutable dictionaries and states each rule once, in the words the article uses:

* the controller, not the worker, decides: publishing a version, admitting, suspecting,
  stopping and judging need the controller's credential, and an attempt's token is not it;
* an attempt is written before dispatch; each admission publishes the next epoch; a successor is
  admitted only when the current attempt is silent (``unknown``), stopped or finished;
* every protected write names its attempt and presents that attempt's token (epoch and secret):
  a token never issued to that attempt of this work is refused as unknown, a token older than
  the epoch as stale, and an attempt that was stopped or finished has no write authority left;
* a journal entry is stored under the hash of its declared inputs; an input named like a part
  of the attempt's pinned version carries that part's hash, any other input carries the content
  of one of its parts or is declared external (no third kind);
* a candidate's parts are the journal's results, with the inputs the journal recorded; every
  part must fit the candidate's version, and no part is named twice; its content is what the
  journal holds (one part's result, or every part's result by step); a candidate is accepted
  only if it comes from the current owner, was built for the current version, and the assessor
  said yes; a digest already
  accepted under the contract is the same acceptance again; a no is a judgement recorded too,
  and a refused digest, or one from a stopped attempt, is never accepted afterwards;
* an effect's intent is recorded before sending and keyed by operation; one key, one payload;
* silence is a compare-and-set on the attempt's signs of life; an attempt marked unknown that
  speaks again while it still holds the epoch is running again.

It answers every command with ``("ok", snapshot)`` or ``("error", error type name)`` so a test
can compare it with the ledger outcome for outcome (``tests/test_model.py``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Model", "ModelAttempt"]

LIVE = ("admitted", "running")
ENDED = ("finished", "stopped")


def _h(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()


class Refused(Exception):
    """The model refuses a command; ``kind`` is the error type the ledger must raise."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass
class ModelAttempt:
    number: int
    token: int
    secret_hash: str | None
    version: str
    state: str = "admitted"
    signs: int = 0


@dataclass
class Model:
    """One work under fencing and version pins (the protections all on)."""

    epoch: int = 0
    versions: dict[str, dict[str, str]] = field(default_factory=dict)
    current: str | None = None
    attempts: list[ModelAttempt] = field(default_factory=list)
    #: result id -> (step, input key, sources, external, attempt)
    journal: dict[str, tuple[str, str, dict[str, str], tuple[str, ...], int]] = \
        field(default_factory=dict)
    #: result id -> the value journaled under it (the step's result)
    values: dict[str, Any] = field(default_factory=dict)
    #: result id -> the version parts its provenance chains back to (input name -> hash)
    roots: dict[str, dict[str, str]] = field(default_factory=dict)
    #: digest -> list of (attempt, token, version) submissions (a successor may resubmit)
    candidates: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)
    #: (digest, contract) -> version accepted for
    accepted: dict[tuple[str, str], str] = field(default_factory=dict)
    #: (digest, contract) judged no
    refused: set[tuple[str, str]] = field(default_factory=set)
    #: whether the controller's commands need its credential (the work was opened with a key)
    keyed: bool = True
    #: op key -> (payload hash, state)
    effects: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: op key -> the attempt that last intended or confirmed it
    effect_owner: dict[str, int] = field(default_factory=dict)
    #: op key -> how many times it was intended (each intent may have been sent)
    effect_sends: dict[str, int] = field(default_factory=dict)

    # -- answers ----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """What both sides must agree on after every command."""
        return {
            "epoch": self.epoch,
            "current": self.current,
            "attempts": [(a.number, a.token, a.state, a.signs) for a in self.attempts],
            "journal": sorted((step, key, att) for step, key, _s, _e, att in self.journal.values()),
            "candidates": sorted((d, sub[-1][0]) for d, sub in self.candidates.items()),
            "accepted": sorted(self.accepted.items()),
            "refused": sorted(self.refused),
            "effects": sorted(self.effects.items()),
        }

    def run(self, name: str, **args: Any) -> tuple[str, Any]:
        """``("ok", (answer, snapshot))`` or ``("error", error type name)``."""
        try:
            answer = getattr(self, name)(**args)
        except Refused as r:
            return "error", r.kind
        return "ok", (answer, self.snapshot())

    # -- the owner's token --------------------------------------------------------------------
    def _attempt(self, number: int) -> ModelAttempt | None:
        return next((a for a in self.attempts if a.number == number), None)

    def _authentic(self, number: int, token: int, secret: str | None) -> ModelAttempt:
        a = self._attempt(number)
        if a is None or a.token != token:
            raise Refused("UnknownToken")
        if a.secret_hash is not None and (
                secret is None or hashlib.sha256(secret.encode()).hexdigest() != a.secret_hash):
            raise Refused("UnknownToken")
        return a

    def _owner(self, number: int, token: int, secret: str | None) -> ModelAttempt:
        a = self._authentic(number, token, secret)
        if token < self.epoch:
            raise Refused("StaleOwner")
        if a.state in ENDED:
            raise Refused("AttemptEnded")
        return a

    def _sign_of_life(self, a: ModelAttempt) -> None:
        a.state = "running"
        a.signs += 1

    def _controller(self, caller: str) -> None:
        """Only the controller issues the controller's commands (``caller`` says who sent it)."""
        if self.keyed and caller != "controller":
            raise Refused("NotController")

    # -- commands -------------------------------------------------------------------------
    def publish(self, version: str, parts: dict[str, str], caller: str = "controller") -> None:
        self._controller(caller)
        if version in self.versions:
            if self.versions[version] != parts or version != self.current:
                raise Refused("InputConflict")   # changed content, or an older version again
            return
        self.versions[version] = dict(parts)
        self.current = version

    def admit(self, secret_hash: str | None, caller: str = "controller") -> None:
        self._controller(caller)
        if self.attempts and self.attempts[-1].state in LIVE:
            raise Refused("AttemptActive")
        if self.current is None:
            raise Refused("NotFound")
        self.epoch += 1
        self.attempts.append(ModelAttempt(number=len(self.attempts) + 1, token=self.epoch,
                                          secret_hash=secret_hash, version=self.current))

    def heartbeat(self, attempt: int, token: int, secret: str | None, claim: bool = False) -> str:
        a = self._authentic(attempt, token, secret)
        if a.state in ENDED:
            return "ended"
        if token < self.epoch:
            return "superseded"
        if claim:
            if a.signs == 0 and a.state == "unknown":
                raise Refused("AttemptSilent")    # silent before anyone claimed it
            if a.signs > 0 or a.state != "admitted":
                raise Refused("AttemptClaimed")
            self._sign_of_life(a)
            return "claimed"
        was = a.state
        self._sign_of_life(a)
        return "revived" if was == "unknown" else "beat"

    def mark_unknown(self, attempt: int, signs: int | None, caller: str = "controller") -> None:
        self._controller(caller)
        a = self._attempt(attempt)
        if a is None:
            raise Refused("NotFound")
        if a.state not in LIVE or (signs is not None and signs != a.signs):
            return
        a.state = "unknown"
        self.effects = {k: (p, "ambiguous" if s == "intended" and self.effect_owner[k] == a.number
                            else s) for k, (p, s) in self.effects.items()}

    def mark_stopped(self, attempt: int, caller: str = "controller") -> None:
        self._controller(caller)
        a = self._attempt(attempt)
        if a is None:
            raise Refused("NotFound")
        if a.state not in ENDED:
            a.state = "stopped"

    def _fits(self, version: str, sources: dict[str, str], external: tuple[str, ...]) -> None:
        # The article: the input key covers the declared inputs, and under version pins each one
        # is a part of the pinned version (named like it: then with its hash; or with its
        # content under another name) or declared external. A silent third kind is refused.
        parts = self.versions[version]
        for name, h in sources.items():
            if name in external:
                continue
            if name in parts:
                if parts[name] != h:
                    raise Refused("VersionMismatch")
            elif h not in parts.values():
                raise Refused("UndeclaredInput")

    def record(self, attempt: int, token: int, secret: str | None, step: str,
               sources: dict[str, str], external: tuple[str, ...], rid: str,
               chosen_id: bool = False, value: Any = "", derived: tuple[str, ...] = ()) -> None:
        a = self._owner(attempt, token, secret)
        key = _h({"step": step, "sources": dict(sorted(sources.items()))})
        # provenance is a graph: an input may be another step's result, named by its id; the
        # step's roots are its own part inputs and every source's roots, and those must fit
        roots = {k: h for k, h in sources.items() if k not in external and k not in derived}
        for name in derived:
            if sources[name] not in self.journal:
                raise Refused("InvalidRecord")          # names no journal entry
            src_step = self.journal[sources[name]][0]
            for k, h in self.roots[sources[name]].items():
                if roots.setdefault(k, h) == h:
                    continue
                if k in self.versions[a.version]:
                    raise Refused("VersionMismatch")    # chains back to two versions of a part
                # a part read by content under a name of its own ("text"): two sources may
                # read two parts so; both are kept, each checked against the version
                if roots.setdefault(f"{k}@{src_step}", h) != h:
                    roots[f"{k}@{sources[name]}"] = h
        if derived:
            self._fits(a.version, roots, ())
        else:
            self._fits(a.version, sources, external)
        if chosen_id:                # a result's id is the store's, derived; never the writer's
            raise Refused("InvalidRecord")
        if rid in self.journal:
            if self.values.get(rid, value) != value:
                raise Refused("ResultConflict")   # one id, one value: never merged
        else:
            self.journal[rid] = (step, key, dict(sources), external, a.number)
            self.values[rid] = value
            self.roots[rid] = roots
        self._sign_of_life(a)

    def submit(self, attempt: int, token: int, secret: str | None, digest: str,
               parts: list[tuple[str, str, dict[str, str], str]], content: Any = None) -> None:
        a = self._owner(attempt, token, secret)
        steps = [step for step, _k, _s, _r in parts]
        if len(set(steps)) != len(steps) or len({r for *_x, r in parts}) != len(parts):
            raise Refused("InvalidRecord")     # a part named twice: refused mechanically
        for step, key, sources, rid in parts:
            entry = self.journal.get(rid)
            if entry is None:
                raise Refused("InvalidRecord")
            if (entry[0], entry[1], entry[2]) != (step, key, sources):
                raise Refused("VersionMismatch")
            self._fits(a.version, self.roots[rid], ())
        # the content is what the journal holds: one part's result (the assembly step's), or
        # every part's result by step; anything else could quote another version's figure
        told = _h(content)
        if all(_h(self.values[rid]) != told for *_x, rid in parts) \
                and _h({step: self.values[rid] for step, _k, _s, rid in parts}) != told:
            raise Refused("InvalidRecord")
        subs = self.candidates.setdefault(digest, [])
        if subs and (subs[-1][1] == token or any(d == digest for d, _c in self.accepted)):
            return                       # the same submission again, or already accepted
        subs.append((a.number, token, a.version))   # a successor's rebuild is its own candidate
        self._sign_of_life(a)

    def accept(self, digest: str, contract: str, verdict: bool,
               caller: str = "controller") -> None:
        self._controller(caller)
        subs = self.candidates.get(digest)
        if not subs:
            raise Refused("NotFound")
        if (digest, contract) in self.accepted:
            return
        if (digest, contract) in self.refused:
            if not verdict:
                return                   # the same refusal again
            raise Refused("ContractFailed")
        number, token, version = subs[-1]
        made_by = self._attempt(number)
        if made_by is not None and made_by.state == "stopped":
            raise Refused("AttemptStopped")
        if token != self.epoch:
            raise Refused("StaleOwner")
        if version != self.current:
            raise Refused("VersionMismatch")
        if not verdict:
            self.refused.add((digest, contract))   # a judgement, recorded
            return
        self.accepted[(digest, contract)] = version

    def dependable(self, contract: str) -> str | None:
        """What a strict consumer that requires ``contract`` may rely on: the newest digest
        accepted under that contract for the current version (another contract's does not do)."""
        for (digest, judged_under), version in reversed(self.accepted.items()):
            if judged_under == contract and version == self.current:
                return digest
        return None

    def intend(self, attempt: int, token: int, secret: str | None, op: str, payload: str) -> None:
        a = self._owner(attempt, token, secret)
        old = self.effects.get(op)
        if old is not None:
            if old[0] != payload:
                raise Refused("EffectConflict")
            if old[1] in ("confirmed", "possibly_duplicated"):
                return
        self.effect_sends[op] = self.effect_sends.get(op, 0) + 1
        self.effects[op] = (payload, "intended")
        self.effect_owner[op] = a.number
        self._sign_of_life(a)

    def confirm(self, attempt: int, token: int, secret: str | None, op: str) -> None:
        a = self._owner(attempt, token, secret)
        old = self.effects.get(op)
        if old is None:
            raise Refused("NotFound")
        if old[1] in ("confirmed", "possibly_duplicated"):
            return
        # answered "new" (the test's receiver always does) after more than one send: it may
        # have happened twice, and the ledger says so
        self.effects[op] = (old[0], "possibly_duplicated" if self.effect_sends[op] > 1
                            else "confirmed")
        self.effect_owner[op] = a.number
        self._sign_of_life(a)

    def finish(self, attempt: int, token: int, secret: str | None) -> None:
        a = self._authentic(attempt, token, secret)
        if a.state == "finished":
            return
        a = self._owner(attempt, token, secret)
        a.state = "finished"
