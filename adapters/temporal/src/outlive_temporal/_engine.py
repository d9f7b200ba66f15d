"""Inside the user's workflow: the work's ledger lives in the user's own ``@workflow.defn``.

A workflow class that extends :class:`Work` *is* the work: its execution holds the work's ledger
state (the pure :mod:`outlive.ledger`, applied in workflow code, so every journal write, candidate
and effect intent is fenced without a client round trip), and :meth:`Work.drive` runs the user's
attempt body as a coroutine of that execution. A step (:meth:`Attempt.step`) restores its result
by input key or runs the user's own registered activity with ``workflow.execute_activity`` (data
arguments, no closures). Temporal drives takeover: a step's activity heartbeat timeout is the
attempt's lease, so when it fires the driver marks the attempt ``unknown``, admits a successor with
a larger token, cancels the predecessor's coroutine (and with it its activities) and starts the
successor — all in one workflow task, with no client anywhere.

Why one entity workflow with attempts as coroutines, not a child workflow per attempt: a journal
write must be fenced *against the current epoch* in the same atomic step that applies it. Inside
one execution that is a function call; across two executions it is a signal with no answer or an
update sent by an activity (a round trip per step, the cost this design removes).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import functools
import hashlib
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Literal, TypeVar

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.exceptions import TimeoutError as TemporalTimeout

with workflow.unsafe.imports_passed_through():
    from outlive import codec
    from outlive import ledger as L
    from outlive.errors import (
        GaveUp,
        InvalidRecord,
        NotController,
        OutliveError,
        PayloadTooLarge,
        VersionMismatch,
    )
    from outlive.hashing import canonical, check_json, content_hash, input_key
    from outlive.records import (
        Acceptance,
        AttemptError,
        Candidate,
        Contract,
        InputVersion,
        JournalEntry,
        JournalIndex,
        Part,
        Policy,
        Receipt,
        WorkState,
    )
    from outlive.records import (
        Attempt as AttemptRecord,
    )
    from outlive.rules import (
        LatestAccepted,
        LatestFinished,
        PinnedVersion,
        Requires,
        Rule,
        StrictCurrent,
        dependable,
    )

    from ._credential import publish_text, verify, work_key
    from ._errors import rejection

__all__ = ["CARRY_KEY", "COMMAND_UPDATE", "DEPENDABLE_QUERY", "PUBLISH_UPDATE", "STATE_QUERY", "engine_now",
           "Attempt", "Work", "activity_id", "parse_activity_id", "rule_from_text", "rule_to_text"]

T = TypeVar("T")

#: Handler names the :class:`Work` mixin adds to the user's workflow.
COMMAND_UPDATE = "outlive_command"
PUBLISH_UPDATE = "outlive_publish"
STATE_QUERY = "outlive_state"
DEPENDABLE_QUERY = "outlive_dependable"
#: Marks the argument that carries the ledger across continue-as-new (see ``_plugin``).
CARRY_KEY = "outlive_carry"
_ID_PREFIX = "outlive"
#: The patch that opens new works with the controller's credential (histories recorded before
#: it replay as the keyless works they were).
KEYED_PATCH = "outlive-controller-credential"
_REF = "outlive_ref"
#: Timeouts that mean silence, not an error: Temporal must not retry them (a retry would run the
#: step again under the same owner token); the driver admits a successor instead. Temporal
#: names a timeout in a retry policy's non-retryable types as ``TemporalTimeout:<type>``.
SILENCE = ("TemporalTimeout:Heartbeat", "TemporalTimeout:StartToClose")


def activity_id(attempt: int, token: int, n: int, step: str) -> str:
    """The activity id of a step: it names the attempt and its token, so the activity (and a
    late write it makes) carries the authority it was started with."""
    return f"{_ID_PREFIX}:{attempt}:{token}:{n}:{step}"


def parse_activity_id(text: str) -> tuple[int, int, str] | None:
    """``(attempt, token, step)`` from :func:`activity_id`, or None for another activity."""
    parts = text.split(":", 4)
    if len(parts) != 5 or parts[0] != _ID_PREFIX:
        return None
    try:
        return int(parts[1]), int(parts[2]), parts[4]
    except ValueError:
        return None


def engine_now() -> int:
    """Temporal's clock inside workflow code, in ms (the ledger's ``now``)."""
    return int(workflow.now().timestamp() * 1000)


def rule_from_text(text: str) -> Rule:
    """A consumer's rule from its text, as the ``outlive_dependable`` query takes it.

    ``strict`` | ``latest_accepted`` | ``latest_finished`` | ``pinned:<version>``, optionally
    followed by the contract the consumer requires: ``@<name>:<version>`` or
    ``@<name>:<version>:<assessor>`` (``strict@q3-digest:2``). An acceptance under another
    contract is then not dependable for this consumer, as with :func:`outlive.dependable`.
    Or the JSON form :func:`rule_to_text` writes for a rule object (any names, ``fail_open``, an
    exact :class:`~outlive.records.Contract`).
    """
    if type(text) is not str:
        raise InvalidRecord(f"a rule's text is a string, not {type(text).__name__}", field="rule")
    if text.startswith("{"):
        return _rule_from_json(text)
    base, at, required = text.partition("@")
    contract: Requires | None = None
    if at:
        fields = required.split(":")
        if len(fields) not in (2, 3) or not all(fields):
            raise InvalidRecord(f"rule {text!r}: a contract is @<name>:<version>[:<assessor>]",
                                field="rule")
        contract = Requires(name=fields[0], version=fields[1],
                            assessor=fields[2] if len(fields) == 3 else None)
    if base == "strict":
        return StrictCurrent(contract=contract)
    if base == "latest_accepted":
        return LatestAccepted(contract=contract)
    if base == "latest_finished":
        return LatestFinished(contract=contract)
    if base.startswith("pinned:") and len(base) > len("pinned:"):
        return PinnedVersion(version=base[len("pinned:"):], contract=contract)
    raise InvalidRecord(f"unknown rule {text!r}", field="rule")


_RULE_NAMES: dict[type, str] = {StrictCurrent: "strict", LatestAccepted: "latest_accepted",
                                LatestFinished: "latest_finished", PinnedVersion: "pinned"}


def rule_to_text(rule: str | Rule) -> str:
    """A rule object as the text :func:`rule_from_text` reads back to the same rule."""
    if isinstance(rule, str):
        return rule
    name = _RULE_NAMES.get(type(rule))
    if name is None:
        raise InvalidRecord(f"no Temporal query answers rule {type(rule).__name__}", field="rule")
    contract = rule.contract
    fail_open = isinstance(rule, StrictCurrent) and rule.fail_open
    if contract is None and not fail_open:
        return f"pinned:{rule.version}" if isinstance(rule, PinnedVersion) else name
    data: dict[str, Any] = {"rule": name}
    if isinstance(rule, PinnedVersion):
        data["version"] = rule.version
    if fail_open:
        data["fail_open"] = True
    if contract is not None:
        data["contract"] = {"name": contract.name, "version": contract.version,
                            "assessor": contract.assessor,
                            "exact": isinstance(contract, Contract)}
    return json.dumps(data, sort_keys=True)


def _rule_from_json(text: str) -> Rule:
    try:
        data = json.loads(text)
        name = data["rule"]
        raw = data.get("contract")
        contract: Requires | Contract | None = None
        if raw is not None:
            if not all(isinstance(raw.get(k), str) and raw[k] for k in ("name", "version")) \
                    or not isinstance(raw.get("assessor"), (str, type(None))):
                raise ValueError("a contract names a name and a version")
            if raw.get("exact"):
                if not raw.get("assessor"):
                    raise ValueError("an exact contract names its assessor")
                contract = Contract(name=raw["name"], version=raw["version"],
                                    assessor=raw["assessor"])
            else:
                contract = Requires(name=raw["name"], version=raw["version"],
                                    assessor=raw.get("assessor"))
        if name == "strict":
            return StrictCurrent(contract=contract, fail_open=bool(data.get("fail_open")))
        if name == "latest_accepted":
            return LatestAccepted(contract=contract)
        if name == "latest_finished":
            return LatestFinished(contract=contract)
        if name == "pinned" and isinstance(data.get("version"), str) and data["version"]:
            return PinnedVersion(version=data["version"], contract=contract)
        raise ValueError(f"unknown rule {name!r}")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidRecord(f"rule {text[:200]!r}: {exc}", field="rule") from None


class _Halt(Exception):
    """Why the driver stopped an attempt's coroutine: never seen by user code."""


@dataclass
class _Carry:
    """What crosses continue-as-new besides the user's own arguments."""

    state: str
    contents: dict[str, Any]
    generation: int
    blobs: list[str]
    #: The digests of ``blobs``, in order, and the state's size as the cap counts it: the next
    #: run takes them as they are instead of re-hashing every carried result in its first
    #: workflow task (absent in histories recorded before they existed: then recomputed).
    refs: list[str] | None = None
    bytes: int | None = None
    #: How many journal chunks follow the carry (before the blobs): with a store, the state is
    #: carried without its journal, and the journal in chunks that each travel by reference.
    chunks: int = 0
    journal: list[str] = dataclasses.field(default_factory=list)


class Attempt:
    """One attempt of the work, as the user's attempt body sees it (a coroutine of the workflow)."""

    def __init__(self, ledger: _WorkLedger, record: AttemptRecord) -> None:
        self._ledger = ledger
        self.record = record
        self.halt: str | None = None
        self._parts: dict[str, Part] = {}
        self._n = 0
        self._restored: list[str] = []
        self._ran: list[str] = []
        #: With ``outlive_progress = "end"``: step -> (input key, write, result), flushed with the
        #: candidate.
        self._pending: dict[str, tuple[str, L.StepWrite, Any]] = {}
        #: What :meth:`_declare` compares an argument with, computed when first needed.
        self._parts_of_version: dict[str, str] | None = None
        self._whole: str | None = None
        self._results: list[Any] = []
        self._derived: set[str] = set()
        self._hashed = 0

    @property
    def work_id(self) -> str:
        return self._ledger.work_id

    @property
    def number(self) -> int:
        return self.record.number

    @property
    def token(self) -> int:
        return self.record.token

    @property
    def version(self) -> str | None:
        return self.record.pinned_version

    @property
    def steps(self) -> dict[str, Part]:
        """The steps this attempt used so far (run or restored), in order."""
        return dict(self._parts)

    @property
    def restored(self) -> tuple[str, ...]:
        """The steps this attempt restored from the journal, in order (no activity ran)."""
        return tuple(self._restored)

    @property
    def ran(self) -> tuple[str, ...]:
        """The steps whose activity this attempt ran and got a result from, in order."""
        return tuple(self._ran)

    async def step(self, name: str, activity: Any, /, *args: Any, reads: Mapping[str, Any] | None = None,
                   external: Sequence[str] = (), **options: Any) -> Any:
        """Restore ``name`` from the journal by input key, or run ``activity(*args)`` and journal it.

        The input key is the hash of the declared inputs: ``reads`` if given, else the arguments
        (one argument is named after the step, so a step named like a part of the pinned version
        is checked against it; several are ``name[0]``, ``name[1]``, ...). ``options`` go to
        ``workflow.execute_activity``; the defaults are one try (outlive admits a successor
        instead of Temporal retrying) and the work's heartbeat timeout, which is this attempt's
        lease. Returns the activity's result, typed as ``execute_activity`` types it. Each
        declared input is a part of the pinned version (by name and hash, or by content) or named
        in ``external`` (a setting, a counter); the ledger refuses any other kind.
        """
        led = self._ledger
        led.check_live(self)
        declared = dict(reads) if reads is not None else (
            {name: args[0]} if len(args) == 1 else {f"{name}[{i}]": a for i, a in enumerate(args)})
        sources: dict[str, str] = {}
        derived: list[str] = []
        for k, v in declared.items():
            self._declare(k, v, external, sources, derived, 0)
        if derived:
            external = (*external, *derived)
        key = input_key(name, sources)
        hint = options.get("result_type") or _result_type(activity)
        held = self._pending.get(name)
        if held is not None and held[0] == key:
            self._results.append(held[2])
            return held[2]              # run earlier in this attempt, not flushed yet
        entry = led.lookup(name, key)
        if entry is not None:
            self._parts[name] = Part(step=name, input_key=key, sources=sources,
                                     result_id=entry.result_id)
            self._restored.append(name)
            value = led.restore(entry, hint)
            self._results.append(value)
            await led.after_restore()
            return value
        self._n += 1
        opts = led.activity_options(options)
        opts["activity_id"] = activity_id(self.number, self.token, self._n, name)
        try:
            result = await workflow.execute_activity(activity, args=list(args), **opts)
        except ActivityError as err:
            if isinstance(err.cause, TemporalTimeout):
                await led.silence(self, f"step {name!r}: {err.cause}")
            led.check_live(self)
            raise
        led.check_live(self)
        rid = L.result_id(self.work_id, name, key, self.number)
        write = L.StepWrite(step=name, sources=sources, input_key=key,
                            result=led.keep(result), result_id=rid,
                            external=tuple(sorted(external)))
        if led.owner.outlive_progress == "end":
            L.check_size(write.result, "result of step {!r}", name)
            self._pending[name] = (key, write, result)
        else:
            led.apply(L.RecordSteps(attempt=self.number, token=self.token, entries=(write,),
                                    at=led.now()))
        self._parts[name] = Part(step=name, input_key=key, sources=sources, result_id=rid)
        self._ran.append(name)
        self._results.append(result)
        led.after_step(self)
        return result

    def _declare(self, name: str, value: Any, external: Sequence[str], sources: dict[str, str],
                 derived: list[str], depth: int) -> None:
        """Declare ``value`` as input ``name``, as its data converter writes it. A part of the
        pinned version (by name or content), or anything named external, is declared as it is
        (the fast path). The work's whole input (the ``run`` argument itself) reads every part.
        A result of a step this attempt ran or restored is derived from inputs already checked:
        declared external. An object (a dataclass, a model, a mapping) of such values is
        declared field by field (``name.field``); anything else is left to the ledger's check."""
        h = value_hash(value)
        sources[name] = h
        if name in external:
            return
        parts = self._version_parts()
        if parts.get(name) == h or h in parts.values():
            return
        if h == self._whole_hash():
            del sources[name]
            sources.update(parts)
            return
        if h in self._derived_hashes():
            derived.append(name)
            return
        form = json_form(value)
        if isinstance(form, dict) and form and depth < 4:
            del sources[name]
            for field, sub in form.items():
                self._declare(f"{name}.{field}", sub, external, sources, derived, depth + 1)

    def _version_parts(self) -> dict[str, str]:
        if self._parts_of_version is None:
            v = self._ledger.state.version(self.version) if self.version else None
            self._parts_of_version = dict(v.parts) if v is not None else {}
        return self._parts_of_version

    def _whole_hash(self) -> str | None:
        if self._whole is None and self.version in self._ledger.contents:
            self._whole = content_hash(self._ledger.contents[self.version])
        return self._whole

    def _derived_hashes(self) -> set[str]:
        """Content hashes of the results this attempt used so far (computed only when an
        argument is neither a part nor the whole input)."""
        while self._hashed < len(self._results):
            self._derived.add(value_hash(self._results[self._hashed]))
            self._hashed += 1
        return self._derived

    async def accept(self, content: Any, steps: Sequence[str] | None = None) -> Acceptance:
        """Submit the candidate built from ``steps`` (default: every step so far) and judge it.

        The mechanical checks (owner, pinned version, part hashes) are the ledger's; the verdict
        is the workflow's :meth:`Work.assess`. If the input moved on while this attempt worked,
        the candidate is for an old version: the attempt ends and the driver admits a successor
        pinned to the current version (which restores every step whose inputs did not change).
        """
        led = self._ledger
        led.check_live(self)
        content = json_form(content)
        names = list(steps) if steps is not None else list(self._parts)
        missing = [n for n in names if n not in self._parts]
        if missing:
            raise InvalidRecord(f"candidate names steps this attempt did not use: {missing}")
        parts = tuple(self._parts[n] for n in names)
        version = self.version if led.state.policy.pins else None
        # with progress "end", the results run in this attempt are journaled here, in the same
        # fenced write as the candidate that uses them
        flush = tuple(write for _key, write, _result in self._pending.values())
        results = {e.result_id: e.result for e in led.state.journal}
        results.update((w.result_id, w.result) for w in flush)
        if all(p.result_id in results for p in parts) \
                and not L.is_bound(results, parts, content, led.state.policy.assembly):
            # content the workflow assembled from the steps: journaled as their assembly step
            # (in the same write), so the candidate's content is bound to the journal
            write, part = L.assembly_write(self.work_id, self.number, parts, content)
            entry = led.lookup(part.step, part.input_key)
            if entry is not None and canonical(entry.result) == canonical(content):
                part = dataclasses.replace(part, result_id=entry.result_id)   # restored
            else:
                flush = (*flush, write)
            parts = (*parts, part)
        digest = L.candidate_digest(self.work_id, version, parts, content)
        led.apply(L.SubmitCandidate(attempt=self.number, token=self.token, digest=digest,
                                    parts=parts, content=content, at=led.now(), flush=flush))
        self._pending.clear()
        cand = led.state.candidate(digest)
        assert cand is not None
        vrec = led.state.version(cand.version) if cand.version else None
        verdict = led.owner.assess(cand, vrec)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        led.check_live(self)
        ok, reason = verdict
        try:
            out = led.control(L.Accept(digest=digest, contract=led.owner.outlive_contract,
                                     verdict=bool(ok), reason=reason, at=led.now()))
            if out.kind == "refused":   # recorded; the attempt hears it as the error it was
                raise L.contract_failed(out.record)
        except VersionMismatch:
            if led.state.current_version != cand.version:
                self.halt = "rebuild"
                await workflow.wait_condition(lambda: False)
            raise
        acc: Acceptance = out.record
        return acc

    async def effect(self, op_key: str, activity: Any, /, *args: Any, **options: Any) -> str:
        """Record the intent, run ``activity(*args)`` (it must send ``op_key`` to the receiver),
        record the receiver's answer. A confirmed operation is not sent again: its receipt's id
        comes back. Temporal may retry the activity (the key makes that safe); a silent attempt
        leaves the intent ambiguous and its successor resends the same key."""
        led = self._ledger
        led.check_live(self)
        payload = [led.text(a) for a in args]   # kept with the intent: any successor can settle it
        out = led.apply(L.RecordIntent(attempt=self.number, token=self.token, op_key=op_key,
                                       payload_digest=content_hash(payload), payload=payload,
                                       sent_key=op_key, at=led.now()))
        if out.kind == "confirmed":
            assert out.record.receipt is not None
            return str(out.record.receipt.effect_id)
        self._n += 1
        opts = dict(options)
        if "start_to_close_timeout" not in opts and "schedule_to_close_timeout" not in opts:
            opts["start_to_close_timeout"] = led.owner.outlive_step_timeout
        opts["activity_id"] = activity_id(self.number, self.token, self._n, op_key[:200])
        try:
            result = await workflow.execute_activity(activity, args=list(args), **opts)
        except ActivityError as err:
            if isinstance(err.cause, TemporalTimeout) and "heartbeat_timeout" in opts:
                await led.silence(self, f"effect {op_key!r}: {err.cause}")
            raise
        led.check_live(self)
        receipt = Receipt(effect_id=str(result), duplicate=False, key=op_key)
        led.apply(L.ConfirmEffect(attempt=self.number, token=self.token, op_key=op_key,
                                  receipt=receipt, at=led.now()))
        return str(result)

    @asynccontextmanager
    async def waiting(self, reason: str) -> AsyncIterator[None]:
        """Wait on a person or an outside event (a signal, an update) as ``waiting``, not silence.

        ``async with a.waiting("approval by the editor"): await workflow.wait_condition(...)``.
        The ledger records ``waiting`` and the reason: the attempt still holds the work, nothing
        watches its lease, and a controller's ``MarkUnknown`` leaves it alone, however long the
        wait. Leaving the block records ``running`` again (a step would too). Temporal itself
        never suspects a workflow that waits: only a step's activity has a heartbeat timeout.
        """
        led = self._ledger
        led.check_live(self)
        led.apply(L.Wait(attempt=self.number, token=self.token, reason=reason, at=led.now()))
        yield
        led.check_live(self)
        led.apply(L.Resume(attempt=self.number, token=self.token, at=led.now()))


def _result_type(activity: Any) -> Any:
    if not callable(activity):
        return None
    try:
        from temporalio.activity import _Definition

        defn = _Definition.from_callable(activity)
    except Exception:
        return None
    return None if defn is None else defn.ret_type


class _WorkLedger:
    """The ledger of the work this workflow execution is: state, contents, blobs, the driver."""

    def __init__(self, owner: Work) -> None:
        self.owner = owner
        self.work_id = workflow.info().workflow_id
        carry: _Carry | None = owner.__dict__.get("_outlive_carry")
        self.state: WorkState = WorkState(work_id=self.work_id)
        self.opened = False
        self.contents: dict[str, Any] = {}
        self.blobs: dict[str, str] = {}
        self.generation = 0
        self.bytes = 0
        self.steps_this_run = 0
        self.restores_in_task = 0
        self.current: Attempt | None = None
        #: Every attempt this run drove, in order (what each restored and ran, for a report).
        self.attempts: list[Attempt] = []
        #: The type the workflow's ``run`` takes its input as (None: a plain mapping).
        self.input_type: type | None = None
        self.start_state: dict[str, Any] = {}
        #: Carried journal chunks not decoded yet, and the text of each full chunk decoded (the
        #: next continue-as-new carries it again as it is, instead of encoding it again).
        self.unloaded: list[str] = []
        self.chunk_texts: list[str] = []
        #: The store's threshold (0: no store): payloads longer than this travel by reference.
        self.threshold = int(owner.__dict__.get("_outlive_store") or 0)
        #: The controller's credential of this work, derived here from the workers' secret
        #: (:mod:`._credential`): only this workflow's own code stamps it on a command.
        secret = owner.__dict__.get("_outlive_secret")
        self.key: str | None = work_key(secret, self.work_id) if secret else None
        self.has_store = self.threshold > 0
        #: A restore is a dict look-up, not a scan of the journal (a run after continue-as-new
        #: restores every earlier step in its first workflow task).
        self._index = JournalIndex()
        #: id of a step's retry policy -> (that policy, the same never retrying a timeout).
        self._policies: dict[int, tuple[RetryPolicy, RetryPolicy]] = {}
        if carry is not None:
            st = codec.loads(carry.state)
            if not isinstance(st, WorkState):
                raise InvalidRecord("the carried ledger state is corrupt")
            # the journal's chunks are decoded by load(), one per workflow task: decoding a
            # long journal in one task could pass Temporal's 2 s deadlock timeout
            self.unloaded = list(carry.journal)
            self.state = st
            self.opened = True
            self.contents = dict(carry.contents)
            self.generation = carry.generation
            if carry.refs is not None and len(carry.refs) == len(carry.blobs):
                self.blobs = dict(zip(carry.refs, carry.blobs, strict=True))
            else:
                self.blobs = {_digest(text): text for text in carry.blobs}
            self.bytes = carry.bytes if carry.bytes is not None else (
                len(carry.state) + sum(len(self.text(v)) for v in self.contents.values()))
            self._index.feed(st.journal)

    # -- the ledger, applied in workflow code --------------------------------------------------
    def now(self) -> int:
        """The engine's clock (the workflow task's time, the same on replay), in ms: every
        command is applied with it, so a worker's timestamp never renews a lease past it."""
        return engine_now()

    def apply(self, cmd: L.Command) -> L.Outcome:
        """Apply ``cmd`` with the core ledger; refuse it if the state would pass the cap (with
        a store, the journal is carried by reference and does not count)."""
        grow = _growth(cmd, journal=not self.has_store)
        if grow and self.bytes + grow > self.owner.outlive_max_state_bytes:
            raise PayloadTooLarge(
                f"work {self.work_id!r}: its ledger state would pass "
                f"{self.owner.outlive_max_state_bytes} bytes (Temporal carries it as one payload "
                f"across continue-as-new, limit 2 MB); keep results by reference (a store on "
                f"the OutlivePlugin)", size=self.bytes + grow,
                limit=self.owner.outlive_max_state_bytes)
        self.state, out = L.apply(self.state if self.opened else None, cmd, work_id=self.work_id,
                                  now=self.now())
        self.opened = True
        self.bytes += grow
        self._index.feed(self.state.journal)
        return out

    def control(self, cmd: L.Command) -> L.Outcome:
        """A controller's command issued by this workflow: it carries the work's credential."""
        if self.key is not None:
            cmd = dataclasses.replace(cmd, credential=self.key)  # type: ignore[arg-type]
        return self.apply(cmd)

    def keyed(self) -> bool:
        """Whether the work was opened with the controller's credential."""
        return self.opened and self.state.controller_key_hash is not None

    def authorised(self, text: str, proof: str | None) -> L.Command:
        """The command an outside client sent as ``text``: a controller's command carries the
        work's credential only with a proof of it (:mod:`._credential`), else none (and the
        ledger refuses it, :class:`~outlive.errors.NotController`, on a keyed work)."""
        cmd = _command(text)
        if type(cmd) in _CONTROLLER and self.key is not None and verify(self.key, text, proof):
            cmd = dataclasses.replace(cmd, credential=self.key)  # type: ignore[arg-type]
        return cmd

    def check_publisher(self, version: str, proof: str | None) -> None:
        """A publish from outside a keyed work needs the controller's proof."""
        if self.keyed() and not verify(self.key, publish_text(version), proof):
            raise NotController(
                f"publishing {version!r} to {self.work_id} is the controller's command: the "
                "update carries no proof of the controller's credential (an attempt's "
                "activity cannot publish)", work_id=self.work_id, command="PublishInput")

    def lookup(self, step: str, key: str | None) -> JournalEntry | None:
        """``WorkState.lookup`` from the index."""
        return self._index.lookup(step, key, self.state.policy.pins)

    def text(self, value: Any) -> str:
        """A value as the workflow's payload converter writes it (JSON text for the default)."""
        payload = workflow.payload_converter().to_payloads([value])[0]
        enc = payload.metadata.get("encoding", b"")
        if enc == b"json/plain":
            return payload.data.decode()
        return "b64:" + enc.decode() + ":" + base64.b64encode(payload.data).decode()

    def keep(self, value: Any) -> Any:
        """The journal's copy of a result: its text inline, or a reference when a store exists."""
        text = self.text(value)
        if self.has_store and len(text) > max(self.owner.outlive_inline_bytes, self.threshold):
            ref = _digest(text)
            self.blobs[ref] = text
            return {_REF: ref, "bytes": len(text)}
        return text

    def restore(self, entry: JournalEntry, hint: Any) -> Any:
        value = entry.result
        if isinstance(value, dict) and _REF in value:
            text = self.blobs.get(value[_REF])
            if text is None:
                raise InvalidRecord(f"result {value[_REF][:12]} of step {entry.step!r} is missing")
        elif isinstance(value, str):
            text = value
        else:
            raise InvalidRecord(f"journal entry of step {entry.step!r} is not a workflow result")
        if text.startswith("b64:"):
            _, enc, data = text.split(":", 2)
            payload = Payload(metadata={"encoding": enc.encode()}, data=base64.b64decode(data))
        else:
            payload = Payload(metadata={"encoding": b"json/plain"}, data=text.encode())
        return workflow.payload_converter().from_payloads([payload], [hint] if hint else None)[0]

    def activity_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """A step's activity options: the work's retry policy (or the step's own), never
        retrying a timeout (silence is the driver's), and the lease as heartbeat timeout."""
        opts = dict(options)
        policy: RetryPolicy = opts.get("retry_policy") or self.owner.outlive_retry
        opts["retry_policy"] = self._silent_policy(policy)
        opts.setdefault("heartbeat_timeout", self.owner.outlive_heartbeat)
        if "start_to_close_timeout" not in opts and "schedule_to_close_timeout" not in opts:
            opts["start_to_close_timeout"] = self.owner.outlive_step_timeout
        return opts

    def _silent_policy(self, policy: RetryPolicy) -> RetryPolicy:
        """``policy`` never retrying a timeout, made once per policy (a step asks every time)."""
        done = self._policies.get(id(policy))
        if done is not None and done[0] is policy:
            return done[1]
        kept = list(policy.non_retryable_error_types or ())
        silent = dataclasses.replace(
            policy, non_retryable_error_types=[*kept, *(t for t in SILENCE if t not in kept)])
        self._policies[id(policy)] = (policy, silent)
        return silent

    # -- the driver ------------------------------------------------------------------------------
    def check_live(self, attempt: Attempt) -> None:
        if attempt.halt is not None or self.current is not attempt:
            raise _Halt(attempt.halt or "replaced")

    async def silence(self, attempt: Attempt, detail: str) -> None:
        """A step's lease ran out: the attempt is ``unknown``; the driver takes over."""
        if self.current is attempt and attempt.halt is None:
            self.control(L.MarkUnknown(attempt=attempt.number, at=self.now()))
            attempt.halt = "unknown"
            workflow.logger.info("outlive: attempt #%s is unknown (%s)", attempt.number, detail)
        await workflow.wait_condition(lambda: False)

    async def after_restore(self) -> None:
        """Every ``outlive_restore_chunk`` restores in a row, end the workflow task (a 1 ms
        durable timer). A run after continue-as-new restores every earlier step of the attempt
        before its first activity: without this, a long attempt would do all of it in one
        workflow task, and a loaded worker could pass Temporal's deadlock timeout (2 s)."""
        self.restores_in_task += 1
        if self.restores_in_task >= self.owner.outlive_restore_chunk:
            self.restores_in_task = 0
            await workflow.sleep(timedelta(milliseconds=1))

    def after_step(self, attempt: Attempt) -> None:
        self.restores_in_task = 0
        self.steps_this_run += 1
        if attempt._pending:
            return   # progress "end": results not journaled yet; continue as new after the flush
        every = self.owner.outlive_continue_after
        if (every is not None and self.steps_this_run >= every) \
                or workflow.info().is_continue_as_new_suggested():
            attempt.halt = "continue"

    async def load(self) -> None:
        """Decode the carried journal, one chunk per workflow task (a 1 ms timer between)."""
        every = self.owner.outlive_journal_chunk
        while self.unloaded:
            text = self.unloaded.pop(0)
            part = codec.loads(text)
            if not isinstance(part, tuple) or not all(isinstance(e, JournalEntry) for e in part):
                raise InvalidRecord("a carried journal chunk is corrupt")
            if len(part) == every and len(self.state.journal) == every * len(self.chunk_texts):
                self.chunk_texts.append(text)
            self.state = dataclasses.replace(self.state, journal=self.state.journal + part)
            self._index.feed(self.state.journal)
            if self.unloaded:
                await workflow.sleep(timedelta(milliseconds=1))

    async def loaded(self) -> None:
        """Wait until the carried journal is decoded (an update that writes waits for it)."""
        if self.unloaded:
            await workflow.wait_condition(lambda: not self.unloaded)

    async def drive(self, body: Callable[[Attempt, Any], Awaitable[T]], inputs: Any,
                    version: str) -> T:
        await self.load()
        if inputs is not None and not isinstance(inputs, Mapping):
            self.input_type = type(inputs)     # a dataclass or model: attempts get one too
        self.snapshot()
        if not self.opened:
            keyed = self.key is not None and workflow.patched(KEYED_PATCH)
            self.apply(L.OpenWork(policy=self.owner.outlive_policy,
                                  epoch_floor=self.owner.outlive_epoch_floor,
                                  controller_key_hash=L.key_hash(self.key)
                                  if keyed and self.key is not None else None))
            self.publish(version, inputs)
        errors = 0
        for _ in range(self.owner.outlive_max_attempts):
            cur = self.state.current_attempt
            if not L.is_live(cur):
                cur = self.control(L.Admit(at=self.now())).record
            assert cur is not None and cur.pinned_version is not None
            if self.current is not None:
                self.fresh_instance()
            attempt = Attempt(self, cur)
            self.current = attempt
            self.attempts.append(attempt)
            task = asyncio.ensure_future(body(attempt, self.attempt_input(cur.pinned_version)))
            await workflow.wait_condition(functools.partial(_settled, task, attempt))
            if not task.done():
                task.cancel()
            try:
                result = await task
            except BaseException as exc:
                halt = attempt.halt
                if halt == "continue":
                    await self.continue_as_new()
                if halt in ("unknown", "rebuild"):
                    if halt == "rebuild":
                        self.control(L.MarkStopped(attempt=cur.number, at=self.now()))
                    continue
                failed = _step_failure(exc)
                if failed is None:
                    self.control(L.MarkStopped(attempt=cur.number, at=self.now()))
                    if isinstance(exc, OutliveError):
                        raise rejection(exc) from None
                    raise
                step, cause, spent = failed
                errors += 1
                error = _attempt_error(step, cause, spent, self.now())
                # an error is an answer: recorded with the attempt, which ends failed
                self.apply(L.Fail(attempt=cur.number, token=cur.token, at=self.now(),
                                  error=error))
                if spent and errors < self.owner.outlive_error_attempts:
                    workflow.logger.info("outlive: attempt #%s: step %r failed after its "
                                         "retries (%s); admitting a successor", cur.number,
                                         step, cause)
                    continue
                self.control(L.FailWork(error=error, at=self.now()))
                raise self.failure(step, cause, spent, errors) from exc
            if attempt.halt == "continue" and self.state.current_attempt == cur:
                pass  # finished on the step that asked for continue-as-new: just finish
            self.apply(L.Finish(attempt=cur.number, token=cur.token, at=self.now()))
            return result
        raise ApplicationError(
            f"work {self.work_id!r}: {self.owner.outlive_max_attempts} attempts went silent or "
            f"were rebuilt; giving up", type="AttemptsExhausted", non_retryable=True)

    def failure(self, step: str, cause: BaseException, spent: bool, errors: int) \
            -> ApplicationError:
        """The error a failed step ends the work with: the step's own error type and message
        when no retry can mend it; ``GaveUp`` naming it when retries and successors are spent."""
        kind = cause.type if isinstance(cause, ApplicationError) and cause.type \
            else type(cause).__name__
        message = cause.message if isinstance(cause, ApplicationError) else str(cause)
        if not spent:
            return ApplicationError(f"work {self.work_id!r}: step {step!r} failed: {kind}: "
                                    f"{message}", type=kind, non_retryable=True)
        return rejection(GaveUp(
            f"work {self.work_id!r}: step {step!r} failed in {errors} attempt(s), each after "
            f"its retries; last error {kind}: {message}", work_id=self.work_id, step=step,
            last_error={"type": kind, "message": message}))

    async def continue_as_new(self) -> None:
        await workflow.wait_condition(workflow.all_handlers_finished)
        refs = {e.result[_REF] for e in self.state.journal
                if isinstance(e.result, dict) and _REF in e.result}
        kept = [r for r in sorted(refs) if r in self.blobs]
        chunks: list[str] = []
        if self.has_store:
            # the head inline; the journal in chunks, each its own payload, so the store codec
            # keeps each by reference (content-addressed: an unchanged chunk is not rewritten)
            journal = self.state.journal
            state = codec.dumps(dataclasses.replace(self.state, journal=()))
            every = self.owner.outlive_journal_chunk
            # full chunks carried in are carried out as they came; only the rest is encoded
            chunks = [self.chunk_texts[i // every] if i // every < len(self.chunk_texts)
                      else codec.dumps(journal[i:i + every])
                      for i in range(0, len(journal), every)]
            size = len(state) + sum(len(self.text(v)) for v in self.contents.values())
        else:
            state = codec.dumps(self.state)
            size = len(state) + sum(len(self.text(v)) for v in self.contents.values())
        carry = {CARRY_KEY: {**_Carry(state=state, contents=self.contents,
                                      generation=self.generation + 1, blobs=[], refs=kept,
                                      bytes=size, chunks=len(chunks)).__dict__, "journal": []}}
        blobs = [self.blobs[r] for r in kept]
        args = list(self.owner.__dict__.get("_outlive_args", ()))
        workflow.continue_as_new(args=[*args, carry, *chunks, *blobs])

    def publish(self, version: str, parts: Any) -> InputVersion:
        content = _input_parts(parts)
        hashes = {k: content_hash(v) for k, v in content.items()}
        out = self.control(L.PublishInput(version=version, parts=hashes, at=self.now()))
        if version not in self.contents:
            self.contents[version] = content
            self.bytes += len(self.text(content))
        rec: InputVersion = out.record
        return rec

    def attempt_input(self, version: str) -> Any:
        """The attempt's own copy of its pinned version, typed as the workflow's ``run`` takes
        it (decoded afresh by the payload converter, so no attempt sees another's changes)."""
        payload = Payload(metadata={"encoding": b"json/plain"},
                          data=json.dumps(self.contents[version]).encode())
        hint = [self.input_type] if self.input_type is not None else None
        return workflow.payload_converter().from_payloads([payload], hint)[0]

    def snapshot(self) -> None:
        """The workflow object's own state as the work's attempts start from it (after
        ``__init__``, the first signals and whatever ``run`` set before ``drive``)."""
        self.start_state = {}
        for name, value in self.owner.__dict__.items():
            if not name.startswith("_outlive"):
                try:
                    self.start_state[name] = copy.deepcopy(value)
                except Exception:   # not copyable (a lock, a client): __init__ makes it anew
                    pass

    def fresh_instance(self) -> None:
        """Isolate the next attempt: the workflow object's own state goes back to what it was
        when the work started (``__init__`` run afresh, then a copy of :meth:`snapshot`), so
        nothing a handler set during an earlier attempt (an approval, a counter) reaches this
        one. Only the records (kept by the ledger) pass between attempts."""
        owner = self.owner
        kept = {k: v for k, v in owner.__dict__.items() if k.startswith("_outlive")}
        owner.__dict__.clear()
        owner.__dict__.update(kept)
        init = type(owner).__init__
        if init is not object.__init__:
            takes = [p for p in list(inspect.signature(init).parameters.values())[1:]
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                     and p.default is p.empty]
            init(owner, *(kept.get("_outlive_args", ()) if takes else ()))
        owner.__dict__.update(copy.deepcopy(self.start_state))


def json_form(value: Any) -> Any:
    """``value`` as the workflow's payload converter writes it, read back as JSON (a dataclass,
    a pydantic model -> its JSON object); plain JSON values are returned as they are. Values
    the converter writes as binary become ``"b64:<encoding>:<data>"`` text."""
    try:
        check_json(value)
        return value
    except InvalidRecord:
        pass
    payload = workflow.payload_converter().to_payloads([value])[0]
    enc = payload.metadata.get("encoding", b"")
    if enc == b"json/plain":
        return json.loads(payload.data)
    return "b64:" + enc.decode() + ":" + base64.b64encode(payload.data).decode()


def value_hash(value: Any) -> str:
    """The content hash of a declared input, canonicalised through the data converter."""
    try:
        return content_hash(value)
    except InvalidRecord:
        return content_hash(json_form(value))


def _input_parts(parts: Any) -> dict[str, Any]:
    """A work's input (a mapping, or a dataclass / pydantic model the converter writes as a JSON
    object) as part name -> JSON content."""
    if isinstance(parts, Mapping):
        content = {str(k): json_form(v) for k, v in parts.items()}
    else:
        form = json_form(parts)
        if not isinstance(form, dict):
            raise InvalidRecord("a work's input is a mapping of part name -> content (or a "
                                "dataclass or model the data converter writes as an object), "
                                f"not {type(parts).__name__}")
        content = {str(k): v for k, v in form.items()}
    return content


def _attempt_error(step: str, cause: BaseException, spent: bool, at: int) -> AttemptError:
    """The ledger's record of a step's error (the activity's type, message and stack trace)."""
    if isinstance(cause, ApplicationError):
        kind, message = cause.type or type(cause).__name__, cause.message
    else:
        kind, message = type(cause).__name__, str(cause)
    trace = getattr(cause, "failure", None)
    stack = trace.stack_trace if trace is not None else ""
    return AttemptError(type=kind, message=f"step {step!r}: {message}", traceback=stack, at=at,
                        retryable=spent)


def _step_failure(exc: BaseException) -> tuple[str, BaseException, bool] | None:
    """``(step, cause, retries spent)`` for a step's activity that failed with an error (not a
    timeout: that is silence), else None. ``spent`` is False for a non-retryable error."""
    if not isinstance(exc, ActivityError) or isinstance(exc.cause, TemporalTimeout):
        return None
    parsed = parse_activity_id(exc.activity_id)
    step = parsed[2] if parsed is not None else exc.activity_type
    cause: BaseException = exc.cause if exc.cause is not None else exc
    non_retryable = (isinstance(cause, ApplicationError) and cause.non_retryable) \
        or exc.retry_state == RetryState.NON_RETRYABLE_FAILURE
    return step, cause, not non_retryable


def _settled(task: asyncio.Future[Any], attempt: Attempt) -> bool:
    return task.done() or attempt.halt is not None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _growth(cmd: L.Command, *, journal: bool = True) -> int:
    """Roughly how many bytes ``cmd`` adds to the carried state (the cap's measure); without
    ``journal``, journal entries are left out (they travel by reference)."""
    if isinstance(cmd, L.RecordSteps):
        if not journal:
            return 0
        return sum(len(canonical(w.result)) + 300 + len(w.step) for w in cmd.entries)
    if isinstance(cmd, L.SubmitCandidate):
        flushed = sum(len(canonical(w.result)) + 300 + len(w.step) for w in cmd.flush) \
            if journal else 0
        return len(canonical(cmd.content)) + 200 + 150 * len(cmd.parts) + flushed
    if isinstance(cmd, (L.RecordIntent, L.PublishInput, L.Admit)):
        return 300
    return 0


class Work:
    """Extend this in your ``@workflow.defn`` class: the execution becomes the work's ledger.

    Class attributes configure it; override :meth:`assess` to judge candidates. The mixin adds
    the ``outlive_command`` and ``outlive_publish`` updates (fenced writes from outside: a late
    activity, an operator publishing a corrected input) and the ``outlive_state`` and
    ``outlive_dependable`` queries. Register your workers with :class:`~outlive_temporal.OutlivePlugin`.
    """

    outlive_policy: ClassVar[Policy] = Policy()
    outlive_contract: ClassVar[Contract] = Contract(name="accepted", version="1",
                                                    assessor="workflow")
    #: A step activity's heartbeat timeout: the attempt's lease.
    outlive_heartbeat: ClassVar[timedelta] = timedelta(seconds=10)
    outlive_step_timeout: ClassVar[timedelta] = timedelta(hours=1)
    #: The ledger state this execution may carry (Temporal's payload limit is 2 MB).
    outlive_max_state_bytes: ClassVar[int] = 1_500_000
    #: With a store, results longer than this (and than the store's threshold) are kept as
    #: references; shorter ones stay in the journal, which is itself carried by reference.
    outlive_inline_bytes: ClassVar[int] = 2048
    #: With a store, journal entries per carried chunk across continue-as-new (a new run
    #: decodes one chunk per workflow task).
    outlive_journal_chunk: ClassVar[int] = 500
    #: Continue-as-new after this many steps in one run (besides when Temporal suggests it).
    outlive_continue_after: ClassVar[int | None] = None
    outlive_max_attempts: ClassVar[int] = 20
    #: A step's activity retries (Temporal's own policy) for transient errors; timeouts are
    #: never retried (silence: the driver admits a successor). A step may pass its own.
    outlive_retry: ClassVar[RetryPolicy] = RetryPolicy(
        initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30), maximum_attempts=3)
    #: Attempts that may end because a step spent its retries before the work gives up (the
    #: first such error admits a successor with a fresh token; the second ends the work).
    outlive_error_attempts: ClassVar[int] = 2
    #: Restores done in one workflow task at most (then a 1 ms timer ends the task).
    outlive_restore_chunk: ClassVar[int] = 200
    #: ``"step"``: each step is journaled when its activity returns. ``"end"``: an attempt's
    #: results are journaled with its candidate, in one fenced write (a successor restores
    #: nothing from an attempt that never submitted; the conformance ``progress`` switch).
    outlive_progress: ClassVar[Literal["step", "end"]] = "step"
    #: The first owner token is ``outlive_epoch_floor + 1`` (continue an epoch kept elsewhere).
    outlive_epoch_floor: ClassVar[int] = 0

    @property
    def outlive(self) -> _WorkLedger:
        led: _WorkLedger | None = self.__dict__.get("_outlive_ledger")
        if led is None:
            led = _WorkLedger(self)
            self.__dict__["_outlive_ledger"] = led
        return led

    def assess(self, candidate: Candidate, version: InputVersion | None) \
            -> tuple[bool, str] | Awaitable[tuple[bool, str]]:
        """The verdict on a candidate that passed the mechanical checks (default: accept)."""
        del candidate, version
        return True, "accepted"

    async def drive(self, body: Callable[[Attempt, Any], Awaitable[T]], inputs: Any, *,
                    version: str = "v1") -> T:
        """Run ``body(attempt, inputs)`` as attempts until one finishes; Temporal drives takeover.

        ``inputs`` (a mapping of part name -> content) is published as ``version`` when the work
        opens; later versions arrive through the ``outlive_publish`` update, and each attempt gets
        the content of the version it is pinned to.
        """
        return await self.outlive.drive(body, inputs, version)

    @workflow.update(name=COMMAND_UPDATE)
    async def outlive_command(self, text: str, proof: str = "") -> str:
        led = self.outlive
        await led.loaded()
        try:
            out = led.apply(led.authorised(text, proof))
        except Exception as exc:
            raise rejection(exc) from None
        return codec.dumps(out)

    @outlive_command.validator
    def _outlive_validate(self, text: str, proof: str = "") -> None:
        led = self.outlive
        try:
            L.apply(led.state if led.opened else None, led.authorised(text, proof),
                    work_id=led.work_id, now=led.now())
        except Exception as exc:
            raise rejection(exc) from None

    @workflow.update(name=PUBLISH_UPDATE)
    async def outlive_publish(self, version: str, parts: Any, proof: str = "") -> str:
        led = self.outlive
        await led.loaded()
        if not led.opened:  # sent with the start (start_work): wait until drive opens the work
            await workflow.wait_condition(lambda: led.opened)
        try:
            led.check_publisher(version, proof)
            rec = led.publish(version, parts)
        except Exception as exc:
            raise rejection(exc) from None
        return codec.dumps(rec)

    @outlive_publish.validator
    def _outlive_validate_publish(self, version: str, parts: Any, proof: str = "") -> None:
        led = self.outlive
        try:
            hashes = {k: content_hash(v) for k, v in _input_parts(parts).items()}
            if not led.opened:
                return      # the handler waits until the work opens, then the ledger decides
            led.check_publisher(version, proof)
            L.apply(led.state, L.PublishInput(version=version, parts=hashes, at=0,
                                              credential=led.key))
        except Exception as exc:
            raise rejection(exc) from None

    @workflow.query(name=STATE_QUERY)
    def outlive_state(self) -> str | None:
        led = self.outlive
        return codec.dumps(led.state) if led.opened else None

    @workflow.query(name=DEPENDABLE_QUERY)
    def outlive_dependable(self, rule: str) -> dict[str, Any] | None:
        led = self.outlive
        if not led.opened:
            return None
        dep = dependable(led.state, rule_from_text(rule))
        if dep is None:
            return None
        return {"digest": dep.digest, "version": dep.version, "content": dep.content,
                "acceptance": None if dep.acceptance is None else codec.dumps(dep.acceptance)}


#: What may arrive from outside the workflow: fenced writes of a (possibly late) attempt and the
#: controller's verdicts. Opening, publishing (with content) and admitting are the workflow's own.
_WRITES = (L.Heartbeat, L.MarkUnknown, L.MarkStopped, L.RecordSteps, L.SubmitCandidate,
           L.RecordIntent, L.ConfirmEffect, L.Accept, L.Finish, L.Wait, L.Resume)


_CONTROLLER = frozenset(L.CONTROLLER_COMMANDS)


def _command(text: str) -> L.Command:
    cmd = codec.loads(text)
    if not isinstance(cmd, _WRITES):
        raise InvalidRecord(f"not a command a client may send here: {type(cmd).__name__}")
    return cmd
