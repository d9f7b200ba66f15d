"""The controller: admits attempts, suspects silence, judges candidates, answers dependability.

It holds no authority in memory: the epoch, attempts, acceptances and intents live in the ledger,
so a restarted controller carries on from the backend (and the epoch keeps increasing).
"""

from __future__ import annotations

import inspect
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from . import _observe
from . import ledger as L
from ._check import argument, callable_argument, text_argument
from ._credential import default_credential
from .backend import Backend
from .errors import InvalidRecord, NotFound, OutliveError
from .hashing import content_hash
from .records import (
    Acceptance,
    Attempt,
    AttemptState,
    Candidate,
    Contract,
    InputVersion,
    Policy,
    WorkState,
)
from .rules import Dependable, Rule, dependable

__all__ = ["Assessor", "Controller", "default_credential", "wall_clock_ms"]

Verdict = tuple[bool, str]
Assessor = Callable[[Candidate, InputVersion | None], Verdict | Awaitable[Verdict]]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class Controller:
    """``missed_beats`` heartbeat intervals of silence make an attempt ``unknown``.

    ``start_grace`` (ms) replaces that limit for an attempt admitted but not yet heard from, so a
    process that takes a while to start is not suspected before it could say anything.
    ``wait_limit`` (ms): a wait longer than this is suspected too (None: never).

    ``credential`` is the controller's secret: a work this controller opens records its hash, and
    the ledger then refuses the controller's commands (publish, admit, mark unknown or stopped,
    judge) without it (:class:`~outlive.errors.NotController`). It defaults to this user's key
    (``OUTLIVE_CONTROLLER_KEY``, else a per-user key file; see :mod:`outlive._credential`), so
    every controller of one user (a restarted one, a supervisor, the CLI) is the same
    controller. It is never handed to a runner: an :class:`~outlive.supervisor.Assignment`
    carries the attempt's token and secret only.
    """

    def __init__(self, backend: Backend, *, clock: Callable[[], int] = wall_clock_ms,
                 heartbeat_interval: int = 10_000, missed_beats: int = 2,
                 start_grace: int | None = None, wait_limit: int | None = None,
                 credential: str | None = None) -> None:
        argument(backend, Backend, "backend", "Controller", "a started Backend (open_backend(url))")
        callable_argument(clock, "clock", "Controller")
        self.backend = backend
        self.clock = clock
        self.heartbeat_interval = heartbeat_interval
        self.missed_beats = missed_beats
        self.start_grace = start_grace
        self.wait_limit = wait_limit
        if credential is not None and (type(credential) is not str or not credential):
            raise InvalidRecord("credential must be a non-empty string", field="credential")
        self._credential = credential if credential is not None else default_credential()

    def __repr__(self) -> str:
        return f"Controller({self.backend!r})"

    @property
    def key_hash(self) -> str:
        """The hash a work opened by this controller records (``OpenWork.controller_key_hash``),
        for code that opens works with its own ``OpenWork``."""
        return L.key_hash(self._credential)

    async def open_work(self, work_id: str, policy: Policy | None = None, *,
                        epoch_floor: int = 0) -> None:
        """Open the work with this controller's key (idempotent for the same controller; a work
        opened by another controller is :class:`~outlive.errors.NotController`)."""
        await _observe.execute(self.backend,
            work_id, L.OpenWork(policy=policy or Policy(), epoch_floor=epoch_floor,
                                controller_key_hash=L.key_hash(self._credential)))

    async def publish(self, work_id: str, version: str, parts: Mapping[str, Any]) -> InputVersion:
        """Publish an immutable input version (part name -> content); it becomes current."""
        text_argument(work_id, "work_id", "Controller.publish")
        text_argument(version, "version", "Controller.publish")
        argument(parts, Mapping, "parts", "Controller.publish", "a mapping of part name to content")
        hashes = {name: content_hash(value) for name, value in parts.items()}
        out = await _observe.execute(self.backend,
            work_id, L.PublishInput(version=version, parts=hashes, at=self.clock(),
                                     credential=self._credential))
        rec: InputVersion = out.record
        return rec

    @_observe.traced("outlive.admit", lambda self, work_id, **kw: {"work_id": work_id, **kw},
                    lambda self, att, *a, **kw: {"attempt": att.number, "token": att.token,
                                                 "version": att.pinned_version})
    async def admit(self, work_id: str, *, pin: str | None = None,
                    request_id: str | None = None, keyed: bool = True,
                    runner: str | None = None, claimed: bool = False) -> Attempt:
        """Write the attempt record and publish its epoch; dispatch only after this returns.

        The returned attempt carries the secret part of its token (the ledger keeps only its
        hash): hand it to exactly one worker. Retrying with the same ``request_id`` from a
        restarted controller re-issues the secret while no worker has claimed the attempt, and
        is refused (:class:`~outlive.errors.AttemptActive`) once one has. ``keyed=False`` admits
        by the epoch alone, for a runner that cannot be handed the secret. ``runner`` names the
        process that will run it (``Attempt.runner``), so its death can be told from silence.
        ``claimed``: the caller runs the attempt itself (its worker starts with ``claim=False``).
        """
        att, _seq = await self._admit(work_id, pin=pin, request_id=request_id, keyed=keyed,
                                      runner=runner, claimed=claimed)
        return att

    async def _admit(self, work_id: str, *, pin: str | None, request_id: str | None,
                     keyed: bool, runner: str | None, claimed: bool) -> tuple[Attempt, int]:
        """:meth:`admit`, with the ledger's sequence number after the admission."""
        secret = secrets.token_hex(16) if keyed else None
        out = await _observe.execute(
            self.backend, work_id,
            L.Admit(at=self.clock(), pin=pin, request_id=request_id,
                    key_hash=L.key_hash(secret) if secret is not None else None,
                    credential=self._credential, runner=runner, claimed=claimed))
        rec: Attempt = replace(out.record, secret=secret)
        return rec, out.seq

    async def state(self, work_id: str) -> WorkState:
        st = await self.backend.load(work_id)
        if st is None:
            raise NotFound(f"work {work_id!r} is not open", work_id=work_id)
        return st

    async def observe(self, work_id: str, state: WorkState | None = None) -> list[Attempt]:
        """Mark silent attempts ``unknown`` (never failed, never finished); return them.

        Silence is measured on this controller's clock from the attempt's last sign of life,
        whose time the store never takes as later than its own clock. Each mark is a
        compare-and-set on the attempt's signs of life: an attempt that beat after ``state``
        was read is left alone.
        """
        st = state if state is not None else await self.state(work_id)
        now = self.clock()
        limit = self.heartbeat_interval * self.missed_beats
        marked: list[Attempt] = []
        for att in st.attempts:
            why = L.suspicion(att, now, timeout=limit, start_grace=self.start_grace,
                              wait_limit=self.wait_limit)
            if why is not None:
                # a beat while waiting does not end a wait: only silence is a compare-and-set
                out = await _observe.execute(self.backend, work_id, L.MarkUnknown(
                    attempt=att.number, at=now, signs=None if why == "wait limit" else att.signs,
                    waiting=att.state is AttemptState.WAITING, credential=self._credential))
                if out.kind == "unknown":
                    marked.append(out.record)
        return marked

    async def stop(self, work_id: str, attempt: int) -> Attempt:
        out = await _observe.execute(self.backend, work_id, L.MarkStopped(
            attempt=attempt, at=self.clock(), credential=self._credential))
        rec: Attempt = out.record
        return rec

    async def mark_unknown(self, work_id: str, attempt: int, *, waiting: bool = False) -> Attempt:
        """Mark ``attempt`` ``unknown`` now, unconditionally (its runner is known to be gone);
        ``waiting`` as :class:`~outlive.ledger.MarkUnknown` says."""
        out = await _observe.execute(self.backend, work_id, L.MarkUnknown(
            attempt=attempt, at=self.clock(), waiting=waiting, credential=self._credential))
        rec: Attempt = out.record
        return rec

    def stamp(self, cmd: L.Command) -> L.Command:
        """``cmd`` carrying this controller's credential if it is a controller's command, for
        code that builds its own commands (an engine's driver); other commands as they are."""
        if isinstance(cmd, L.CONTROLLER_COMMANDS):
            return replace(cmd, credential=self._credential)  # type: ignore[arg-type]
        return cmd

    @_observe.traced("outlive.acceptance",
                    lambda self, work_id, digest, contract, *a, **kw: {
                        "work_id": work_id, "digest": digest,
                        "contract": f"{contract.name}@{contract.version}"},
                    lambda self, acc, *a, **kw: {"version": acc.version, "attempt": acc.attempt})
    async def assess(self, work_id: str, digest: str, contract: Contract,
                     assessor: Assessor, state: WorkState | None = None) -> Acceptance:
        """Check owner, version and part hashes first, then run the assessor, then record.

        Idempotent: a digest already accepted under ``contract`` returns that acceptance without
        judging again (a retry after a crash, or after the work was taken over). A refusal is
        recorded (a :class:`~outlive.records.Refusal` with the assessor's reason) and raised as
        :class:`~outlive.errors.ContractFailed`; a digest refused before is refused again
        without judging.
        """
        text_argument(digest, "digest", "Controller.assess")
        argument(contract, Contract, "contract", "Controller.assess")
        callable_argument(assessor, "assessor", "Controller.assess")
        st = state if state is not None else await self.state(work_id)
        done = L.accepted(st, digest, contract)
        if done is not None:
            return done
        try:
            cand = L.check_acceptable(st, digest, contract)
        except OutliveError as exc:   # refused before the assessor runs: nothing is written
            _observe.rejected(work_id, "Accept", exc, digest=digest)
            raise
        version = st.version(cand.version) if cand.version else None
        return await self.judge(work_id, cand, version, contract, assessor)

    async def judge(self, work_id: str, cand: Candidate, version: InputVersion | None,
                    contract: Contract, assessor: Assessor) -> Acceptance:
        """Run ``assessor`` on a candidate in hand and record its verdict, without reading the
        work first: the ledger's checks on ``Accept`` decide (a stale owner, another version,
        a stopped attempt are refused there, after the assessor ran). For a judge that saw the
        candidate submitted a moment ago; :meth:`assess` checks before paying the assessor."""
        verdict = assessor(cand, version)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        ok, reason = verdict
        out = await _observe.execute(self.backend,
            work_id, L.Accept(digest=cand.digest, contract=contract, verdict=bool(ok), reason=reason,
                              at=self.clock(), credential=self._credential))
        if out.kind == "refused":   # recorded as a refusal; the caller hears it as an error
            raise L.contract_failed(out.record)
        rec: Acceptance = out.record
        return rec

    async def dependable(self, work_id: str, rule: Rule) -> Dependable | None:
        return dependable(await self.state(work_id), rule)
