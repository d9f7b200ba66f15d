"""The ledger against an independent model of the article's rules, command by command.

Hypothesis drives random sequences — stale, foreign, forged and replayed tokens, admissions
racing live owners, takeovers at every point, lying candidates, reused operation keys — through
``outlive.ledger.apply`` and :class:`outlive_conformance.model.Model`, and compares every
outcome: the same refusal type, or the same resulting records.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from outlive import errors as E
from outlive import ledger as L
from outlive.hashing import content_hash, input_key
from outlive.records import Contract, Part, WorkState
from outlive.rules import StrictCurrent, dependable
from outlive_conformance.model import Model

TEXT = {"a": "Intro.", "b": "Revenue was 4.1 million.", "c": "Revenue was 4.7 million."}
VERSIONS = {"v1": {"s1": content_hash(TEXT["a"]), "s2": content_hash(TEXT["b"])},
            "v2": {"s1": content_hash(TEXT["a"]), "s2": content_hash(TEXT["c"])}}
CONTRACTS = {"form": Contract(name="form", version="1", assessor="t"),
             "strict": Contract(name="strict", version="1", assessor="t")}


#: The controller's credential; the callers the model tells apart.
CONTROLLER = "the-controllers-credential"
CALLERS = st.sampled_from(["controller"] * 6 + ["none", "worker", "guess"])


def _credential(caller: str, number: int = 1) -> str | None:
    return {"controller": CONTROLLER, "none": None, "worker": _secret(number),
            "guess": "not-the-credential"}[caller]


def _secret(number: int) -> str:
    return f"secret-of-attempt-{number}"


class LedgerAgainstModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state, _ = L.apply(None, L.OpenWork(controller_key_hash=L.key_hash(CONTROLLER)),
                                work_id="w")
        self.model = Model()
        self.last: tuple[Any, str, dict[str, Any]] | None = None

    # -- the comparison ---------------------------------------------------------------------
    def _project(self, st_: WorkState) -> dict[str, Any]:
        latest: dict[str, int] = {}
        for c in st_.candidates:
            latest[c.digest] = c.attempt
        return {
            "epoch": st_.epoch,
            "current": st_.current_version,
            "attempts": [(a.number, a.token, a.state.value, a.signs) for a in st_.attempts],
            "journal": sorted((e.step, e.input_key, e.attempt) for e in st_.journal),
            "candidates": sorted(latest.items()),
            "accepted": sorted(((a.digest, a.contract.name), a.version) for a in st_.acceptances),
            "refused": sorted((r.digest, r.contract.name) for r in st_.refusals),
            "effects": sorted((e.op_key, (e.payload_digest, e.state.value)) for e in st_.effects),
        }

    def both(self, cmd: Any, name: str, **args: Any) -> None:
        try:
            new, out = L.apply(self.state, cmd, work_id="w")
            mine: tuple[str, Any] = ("ok", self._project(new))
        except E.OutliveError as exc:
            new, out, mine = self.state, None, ("error", type(exc).__name__)
        theirs = self.model.run(name, **args)
        if theirs[0] == "ok":
            answer, snap = theirs[1]
            theirs = ("ok", snap)
            if name == "heartbeat":
                assert out is not None and out.kind == answer, (cmd, out, answer)
        event(f"{name}: {mine[0] if mine[0] == 'ok' else mine[1]}")
        assert mine == theirs, (cmd, mine, theirs)
        self.state = new
        self.last = (cmd, name, args)

    # -- who writes ---------------------------------------------------------------------------
    def _writer(self, data: st.DataObject) -> tuple[int, int, str | None]:
        n = len(self.state.attempts)
        # mostly the current owner; sometimes a replaced one, or one never admitted
        number = data.draw(st.sampled_from([max(n, 1)] * 5 + list(range(1, n + 2))),
                           label="attempt")
        att = self.state.attempt(number)
        own = att.token if att is not None else number
        # mostly the real token: refusals come often enough, and so do real writes
        token = data.draw(st.sampled_from(["own"] * 4 + ["plus", "epoch", "zero"]), label="token")
        tok = {"own": own, "plus": own + 1, "epoch": self.state.epoch, "zero": 0}[token]
        which = data.draw(st.sampled_from(["own"] * 4 + ["none", "foreign", "sibling"]),
                          label="secret")
        secret = {"own": _secret(number), "none": None, "foreign": "another-works-secret",
                  "sibling": _secret(number + 1)}[which]
        return number, max(tok, 0), secret

    # -- rules ------------------------------------------------------------------------------
    @initialize()
    def first_attempt(self) -> None:
        """Report v1 published and attempt #1 admitted: where every story starts."""
        self.publish("v1")
        self.admit(True)

    @rule(version=st.sampled_from(sorted(VERSIONS)), caller=CALLERS)
    def publish(self, version: str, caller: str = "controller") -> None:
        parts = VERSIONS[version]
        self.both(L.PublishInput(version=version, parts=parts, at=0,
                                 credential=_credential(caller)),
                  "publish", version=version, parts=parts, caller=caller)

    @rule(keyed=st.booleans(), caller=CALLERS)
    def admit(self, keyed: bool, caller: str = "controller") -> None:
        number = len(self.state.attempts) + 1
        h = L.key_hash(_secret(number)) if keyed else None
        self.both(L.Admit(at=0, key_hash=h, credential=_credential(caller, number - 1)),
                  "admit", secret_hash=h, caller=caller)

    @rule(data=st.data(), claim=st.booleans())
    def heartbeat(self, data: st.DataObject, claim: bool) -> None:
        number, tok, secret = self._writer(data)
        self.both(L.Heartbeat(attempt=number, token=tok, at=1, secret=secret, claim=claim),
                  "heartbeat", attempt=number, token=tok, secret=secret, claim=claim)

    @rule(data=st.data(), fresh=st.sampled_from(["now", "old", "none"]), caller=CALLERS)
    def mark_unknown(self, data: st.DataObject, fresh: str, caller: str) -> None:
        number = data.draw(st.integers(1, len(self.state.attempts) + 1), label="attempt")
        att = self.state.attempt(number)
        signs = None if fresh == "none" else (att.signs if att else 0) - (fresh == "old")
        self.both(L.MarkUnknown(attempt=number, at=2, signs=signs,
                                credential=_credential(caller, number)), "mark_unknown",
                  attempt=number, signs=signs, caller=caller)

    @rule(data=st.data(), caller=CALLERS)
    def mark_stopped(self, data: st.DataObject, caller: str) -> None:
        number = data.draw(st.integers(1, len(self.state.attempts) + 1), label="attempt")
        self.both(L.MarkStopped(attempt=number, at=2, credential=_credential(caller, number)),
                  "mark_stopped", attempt=number, caller=caller)

    @rule(data=st.data(), step=st.sampled_from(["s1", "s2"]),
          source=st.sampled_from(["named-b", "named-c", "named-a", "text-b", "text-c",
                                  "text-z", "text-z-external"]),
          rid_kind=st.sampled_from(["derived"] * 6 + ["chosen", "other-step"]),
          value=st.sampled_from(["first"] * 3 + ["second"]))
    def record(self, data: st.DataObject, step: str, source: str, rid_kind: str,
               value: str) -> None:
        number, tok, secret = self._writer(data)
        name, content, *ext = source.split("-")
        name = step if name == "named" else "text"
        sources = {name: content_hash(TEXT.get(content, "zzz"))}
        external = (name,) if ext else ()
        key = input_key(step, sources)
        rid = {"derived": L.result_id("w", step, key, number), "chosen": "x",
               "other-step": L.result_id("w", "s3", key, number)}[rid_kind]
        w = L.StepWrite(step=step, sources=sources, input_key=key, result={"r": value},
                        result_id=rid, external=external)
        self.both(L.RecordSteps(attempt=number, token=tok, secret=secret, entries=(w,), at=1),
                  "record", attempt=number, token=tok, secret=secret, step=step,
                  sources=sources, external=external, rid=rid,
                  chosen_id=rid_kind != "derived", value={"r": value})

    @precondition(lambda self: len(self.state.journal) > 0)
    @rule(data=st.data(), lie=st.booleans(),
          made=st.sampled_from(["parts", "parts", "last part", "first part", "own", "figure"]))
    def submit(self, data: st.DataObject, lie: bool, made: str) -> None:
        number, tok, secret = self._writer(data)
        entries = data.draw(st.lists(st.sampled_from(self.state.journal), min_size=1, max_size=2,
                                     unique_by=lambda e: e.result_id), label="parts")
        parts = []
        for e in entries:
            sources = dict(e.sources)
            if lie and e.step == "s2":   # claim the other report's figure for this result
                sources = {"s2": VERSIONS["v2"]["s2"] if sources.get("s2") != VERSIONS["v2"]["s2"]
                           else VERSIONS["v1"]["s2"]}
            parts.append(Part(step=e.step, input_key=input_key(e.step, sources), sources=sources,
                              result_id=e.result_id))
        att = self.state.attempt(number)
        version = att.pinned_version if att is not None else None
        # the content: the parts' results by step, one part's result (an assembly step's), or
        # the worker's own (a count; another version's figure under honest parts)
        content: Any = {
            "parts": {e.step: e.result for e in entries}, "last part": entries[-1].result,
            "first part": entries[0].result, "own": {"n": len(parts)},
            "figure": {e.step: {"r": "4.1"} for e in entries}}[made]
        digest = L.candidate_digest("w", version, tuple(parts), content)
        self.both(L.SubmitCandidate(attempt=number, token=tok, secret=secret, digest=digest,
                                    parts=tuple(parts), content=content, at=3),
                  "submit", attempt=number, token=tok, secret=secret, digest=digest,
                  parts=[(p.step, p.input_key, p.sources, p.result_id) for p in parts],
                  content=content)

    @rule(data=st.data(), contract=st.sampled_from(sorted(CONTRACTS)), verdict=st.booleans(),
          caller=CALLERS)
    def accept(self, data: st.DataObject, contract: str, verdict: bool, caller: str) -> None:
        known = sorted({c.digest for c in self.state.candidates}) or ["0" * 64]
        digest = data.draw(st.sampled_from([*known, "f" * 64]), label="digest")
        cur = len(self.state.attempts)
        self.both(L.Accept(digest=digest, contract=CONTRACTS[contract], verdict=verdict, at=4,
                           credential=_credential(caller, cur)),
                  "accept", digest=digest, contract=contract, verdict=verdict, caller=caller)

    @rule(data=st.data(), op=st.sampled_from(["op1", "op2"]), payload=st.sampled_from(["p", "q"]))
    def intend(self, data: st.DataObject, op: str, payload: str) -> None:
        number, tok, secret = self._writer(data)
        self.both(L.RecordIntent(attempt=number, token=tok, secret=secret, op_key=op,
                                 payload=payload, payload_digest=content_hash(payload),
                                 sent_key=op, at=5),
                  "intend", attempt=number, token=tok, secret=secret, op=op,
                  payload=content_hash(payload))

    @rule(data=st.data(), op=st.sampled_from(["op1", "op2"]))
    def confirm(self, data: st.DataObject, op: str) -> None:
        from outlive.records import Receipt
        number, tok, secret = self._writer(data)
        self.both(L.ConfirmEffect(attempt=number, token=tok, secret=secret, op_key=op, at=6,
                                  receipt=Receipt(effect_id="P1", duplicate=False, key=op)),
                  "confirm", attempt=number, token=tok, secret=secret, op=op)

    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        number, tok, secret = self._writer(data)
        self.both(L.Finish(attempt=number, token=tok, secret=secret, at=7), "finish",
                  attempt=number, token=tok, secret=secret)

    @precondition(lambda self: len(self.state.attempts) > 0)
    @rule(step=st.sampled_from(["s1", "s2"]))
    def honest_step(self, step: str) -> None:
        """The current owner journals a step from its pinned version (the story going on)."""
        cur = self.state.attempts[-1]
        v = self.state.version(cur.pinned_version or "v1")
        assert v is not None
        sources = {step: v.parts[step]}
        key = input_key(step, sources)
        rid = L.result_id("w", step, key, cur.number)
        w = L.StepWrite(step=step, sources=sources, input_key=key, result={"r": "first"},
                        result_id=rid)
        self.both(L.RecordSteps(attempt=cur.number, token=cur.token, secret=_secret(cur.number),
                                entries=(w,), at=1),
                  "record", attempt=cur.number, token=cur.token, secret=_secret(cur.number),
                  step=step, sources=sources, external=(), rid=rid, value={"r": "first"})

    @precondition(lambda self: len(self.state.journal) > 0 and len(self.state.attempts) > 0)
    @rule(data=st.data(), unknown=st.sampled_from([False] * 5 + [True]))
    def derived_step(self, data: st.DataObject, unknown: bool) -> None:
        """The current owner journals a step over other steps' results (a headline from the
        summaries): its sources are result ids, its provenance the sources' roots."""
        cur = self.state.attempts[-1]
        picked = data.draw(st.lists(st.sampled_from(self.state.journal), min_size=1, max_size=2,
                                    unique_by=lambda e: e.result_id), label="sources")
        sources = {f"from{i}": e.result_id for i, e in enumerate(picked)}
        if unknown:
            sources["from0"] = "0" * 64
        derived = tuple(sorted(sources))
        key = input_key("h", sources)
        rid = L.result_id("w", "h", key, cur.number)
        w = L.StepWrite(step="h", sources=sources, input_key=key, result={"r": "first"},
                        result_id=rid, derived=derived)
        self.both(L.RecordSteps(attempt=cur.number, token=cur.token, secret=_secret(cur.number),
                                entries=(w,), at=1),
                  "record", attempt=cur.number, token=cur.token, secret=_secret(cur.number),
                  step="h", sources=sources, external=(), rid=rid, value={"r": "first"},
                  derived=derived)

    @precondition(lambda self: len(self.state.journal) > 0 and len(self.state.attempts) > 0)
    @rule()
    def honest_candidate(self) -> None:
        """The current owner submits what its version restores from the journal."""
        cur = self.state.attempts[-1]
        parts = []
        for step in ("s1", "s2"):
            v = self.state.version(cur.pinned_version or "v1")
            assert v is not None
            e = self.state.lookup(step, input_key(step, {step: v.parts[step]}))
            if e is not None:
                parts.append(Part(step=e.step, input_key=e.input_key, sources=dict(e.sources),
                                  result_id=e.result_id))
        if not parts:
            return
        results = {e.result_id: e.result for e in self.state.journal}
        content = {p.step: results[p.result_id] for p in parts}
        digest = L.candidate_digest("w", cur.pinned_version, tuple(parts), content)
        self.both(L.SubmitCandidate(attempt=cur.number, token=cur.token, secret=_secret(cur.number),
                                    digest=digest, parts=tuple(parts), content=content, at=3),
                  "submit", attempt=cur.number, token=cur.token, secret=_secret(cur.number),
                  digest=digest, parts=[(p.step, p.input_key, p.sources, p.result_id)
                                        for p in parts], content=content)

    @precondition(lambda self: len(self.state.attempts) > 0)
    @rule()
    def takeover(self) -> None:
        """Silence the current owner and admit a successor: a takeover at this point."""
        cur = self.state.attempts[-1]
        self.both(L.MarkUnknown(attempt=cur.number, at=8, credential=CONTROLLER), "mark_unknown",
                  attempt=cur.number, signs=None)
        self.admit(True)

    @precondition(lambda self: len(self.state.candidates) > 0 and len(self.state.attempts) > 0)
    @rule()
    def rebuild(self) -> None:
        """The current owner submits the newest candidate's parts again (all steps restored)."""
        cur = self.state.attempts[-1]
        cand = self.state.candidates[-1]
        parts = tuple(Part(step=p.step, input_key=p.input_key, sources=dict(p.sources),
                           result_id=p.result_id) for p in cand.parts)
        digest = L.candidate_digest("w", cur.pinned_version, parts, cand.content)
        self.both(L.SubmitCandidate(attempt=cur.number, token=cur.token, secret=_secret(cur.number),
                                    digest=digest, parts=parts, content=cand.content, at=9),
                  "submit", attempt=cur.number, token=cur.token, secret=_secret(cur.number),
                  digest=digest, parts=[(p.step, p.input_key, p.sources, p.result_id)
                                        for p in parts], content=cand.content)

    @precondition(lambda self: self.last is not None)
    @rule()
    def replay(self) -> None:
        """The last command again, as a retry or a replaying attacker would send it."""
        assert self.last is not None
        cmd, name, args = self.last
        self.both(cmd, name, **args)

    @invariant()
    def a_consumer_relies_only_on_its_own_contract(self) -> None:
        for name, contract in CONTRACTS.items():
            got = dependable(self.state, StrictCurrent(contract=contract))
            assert (got.digest if got else None) == self.model.dependable(name), name

    @invariant()
    def the_epoch_is_the_newest_token(self) -> None:
        assert self.state.epoch == (self.state.attempts[-1].token if self.state.attempts else 0)


LedgerAgainstModel.TestCase.settings = settings(max_examples=200, stateful_step_count=30,
                                                deadline=None)
TestLedgerAgainstModel = LedgerAgainstModel.TestCase
