"""The conformance scenario inside a user's workflow: the article's scenes, the 24 protected runs
and one witness per protection removed, each equal to ``memory://`` and to the independent oracle
- judged by the conformance suite's own judge.

The shared suite (``test_conformance.py``, the 864-run sweep) drives a backend from outside on a
logical clock. Inside the engine there is no outside driver: silence is a heartbeat timeout,
takeover is the ``Work`` driver's. So each story here is told by the world (the model, the feed,
the paused or crashed worker, the correction, the newsletter; ``temporal_story_app``) and every
field of the run that is not a tick is compared: model calls, posts, stale writes, each
acceptance (attempt, version, figure), refused candidates and late writes (attempt, error),
admissions (attempt, token, version), the steps each attempt restored and ran, the newsletter's
figure under each rule, every invariant. Ticks, and the runs with fencing off and a paused
worker, are the two things this shape does not reproduce; docs/engines/temporal.md
("Conformance inside the engine") says why.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from typing import Any

import pytest
import temporal_story_app as app
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from outlive import ledger as L
from outlive.hashing import short
from outlive.records import WorkState
from outlive_conformance.golden import GOLDEN, WITNESSES
from outlive_conformance.judge import Observations, judge
from outlive_conformance.oracle import observed, predict
from outlive_conformance.scenario import Scenario, Switches, q3_report
from outlive_conformance.suite import reference_run
from outlive_temporal import DevServer, OutlivePlugin, WorkHandle

#: A story is every switch but ``rule``: the rule is the newsletter's, it changes nothing the
#: work does (checked on memory:// for all 288 stories: runs that differ only in the rule differ
#: only in what the newsletter quotes), so one told story is judged under all three rules.
RULES = ("strict", "accepted", "finished")
STORY_SWITCHES = ("silent", "fencing", "progress", "change", "pins", "dies", "key")


def story_of(sw: Switches) -> dict[str, str]:
    return {k: getattr(sw, k) for k in STORY_SWITCHES}


def _label(story: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in story.items())


#: The 24 protected runs (fencing, pins, the operation key and the strict rule on) are 24
#: stories; the article's scenes and the witnesses need five more (fencing, pins or the key off).
_SC = q3_report()
PROTECTED = [story_of(_SC.defaults.set(silent=s, progress=p, change=c, dies=d))
             for s in ("paused", "crashed") for p in ("step", "end")
             for c in ("never", "during", "after") for d in ("yes", "no")]
SCENES = {g.scene: _SC.defaults.set(**g.switches) for g in GOLDEN}
WITNESS_RUNS = {name: _SC.defaults.set(**changes) for name, changes in WITNESSES}


#: Clients that start stories and wait for them, and how many stories each waits for at once.
STARTERS = 1
STORIES_PER_CLIENT = 64


def _fencing_off_paused(story: dict[str, str]) -> bool:
    return story["fencing"] == "off" and story["silent"] == "paused"


def _story(sc: Scenario, story: dict[str, str]) -> dict[str, Any]:
    c = sc.consumer
    return {"steps": list(sc.steps), "versions": sc.versions, "first_version": sc.first_version,
            "new_version": sc.new_version, "title": sc.title, "announce": sc.announce,
            "work_id": sc.work_id, "max_summary_chars": sc.max_summary_chars,
            "silent_step": sc.silent_step, "epoch_floor": sc.epoch_floor,
            "consumer": {"pattern": c.pattern, "quotes": c.quotes, "fail_open": c.fail_open},
            "figures": {v: sc.figure(v) for v in sc.versions}, **story}


@pytest.fixture(scope="module")
async def story_queue(temporal_server: DevServer) -> AsyncIterator[tuple[list[Client], str]]:
    """A worker for the stories, and clients of their own to start them and wait for them: one
    connection holds at most ~100 concurrent calls, and a story's wait for its result holds one
    for the whole story; the world's late writes, corrections and reads (made by the worker's
    activities) must not queue behind them."""
    worker_client = await Client.connect(temporal_server.address, plugins=[OutlivePlugin()])
    clients = [await Client.connect(temporal_server.address, plugins=[OutlivePlugin()])
               for _ in range(STARTERS)]
    name = f"story-{uuid.uuid4().hex[:8]}"
    # every story holds activity slots while its worker is silent (the paused step waits for its
    # successor's, which must get a slot): room for a sweep batch of stories, all at once
    async with Worker(worker_client, task_queue=name, workflows=app.WORKFLOWS,
                      activities=app.ACTIVITIES, max_concurrent_activities=1000,
                      graceful_shutdown_timeout=timedelta(seconds=0)):
        yield clients, name


async def tell(client: Client, queue: str, sc: Scenario,
               story: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Tell ``story`` inside the engine; rule -> the run, shaped as ``RunSummary.comparable()``
    with every tick None."""
    wid = f"story/{uuid.uuid4().hex[:10]}"
    world = app.WORLDS[wid] = app.World(story=_story(sc, story))
    steps: dict[str, dict[str, list[str]]] = {}
    try:
        res = await client.execute_workflow(app.StoryWork.run, world.story, id=wid, task_queue=queue)
        steps = res["steps"]
    except WorkflowFailureError as exc:
        world.failed = f"{type(exc.cause).__name__}: {exc.cause}"
    world.over.set()
    st = await WorkHandle.of(client, wid).ledger()
    del app.WORLDS[wid]
    assert st.current_version is not None

    def figure(content: Any) -> str | None:
        return app.consumer_figure(content, sc.consumer.pattern, sc.consumer.quotes)

    def announced(state: WorkState, digest: str) -> bool:
        return L.is_settled(state.effect(sc.announce.format(work_id=sc.work_id, digest=short(digest))))

    accepted = {acc.digest for acc in st.acceptances}
    late = () if world.late in (None, "applied") else ((None, world.silent_attempt, world.late),)
    ran = {n: list(v["ran"]) for n, v in steps.items()}
    if world.woken_ran:
        ran.setdefault(str(world.silent_attempt), []).extend(world.woken_ran)
    runs = {}
    for rule_name, rule in app.rules(world.story).items():
        seen = world.readings.get(rule_name) or app.read(world.story, st, rule) \
            or app.Reading(started=False, figure=None, required=None)
        verdict = judge(st, Observations(
            truth=dict(world.truth), pins={a.number: a.pinned_version for a in st.attempts},
            stale_landed=world.stale_landed, op_applied=dict(world.op_applied),
            consumer_started=seen.started, consumer_figure=seen.figure,
            consumer_required=seen.required), sc, announced=announced)
        runs[rule_name] = {
            "model_calls": world.calls, "posts": len(world.feed.applied),
            "stale_writes_applied": st.stale_writes_applied,
            "accepted": [{"tick": None, "attempt": acc.attempt, "recorded_version": acc.version,
                          "figure": figure(cand.content if (cand := st.candidate(acc.digest)) else None)}
                         for acc in st.acceptances],
            "refused": [(None, c.attempt, "VersionMismatch") for c in st.candidates
                        if c.digest not in accepted],
            "late_writes_rejected": list(late),
            "admissions": [(None, a.number, a.token, a.pinned_version) for a in st.attempts],
            "restored": {str(a.number): tuple(steps.get(str(a.number), {}).get("restored", ()))
                         for a in st.attempts},
            "redone": {str(a.number): tuple(ran.get(str(a.number), ())) for a in st.attempts},
            "first_acceptance_tick": None, "announcement_confirmed_at": None,
            "newsletter_start": None, "newsletter_figure": seen.figure,
            "required_figure": seen.required, "applied_after_retention": 0,
            # finished as the harness counts it: the work ended and every intent is settled
            "invariants": verdict,
            "finished": world.failed is None and all(L.is_settled(e) for e in st.effects),
            # what only these checks read
            "failed": world.failed, "late": world.late, "stale_landed": world.stale_landed,
        }
    return runs


def untimed(run: dict[str, Any]) -> dict[str, Any]:
    """A run (``RunSummary.comparable()`` shape) without its ticks, for memory://."""
    return {
        "model_calls": run["model_calls"], "posts": run["posts"],
        "stale_writes_applied": run["stale_writes_applied"],
        "accepted": [(a["attempt"], a["recorded_version"], a["figure"]) for a in run["accepted"]],
        "refused": [tuple(r[1:]) for r in run["refused"]],
        "late_writes_rejected": [tuple(r[1:]) for r in run["late_writes_rejected"]],
        "admissions": [tuple(a[1:]) for a in run["admissions"]],
        "restored": {k: tuple(v) for k, v in run["restored"].items()},
        "redone": {k: tuple(v) for k, v in run["redone"].items()},
        "newsletter_figure": run["newsletter_figure"], "required_figure": run["required_figure"],
        "applied_after_retention": run["applied_after_retention"],
        "invariants": dict(run["invariants"]), "finished": run["finished"],
    }


def untimed_oracle(view: dict[str, Any]) -> dict[str, Any]:
    """The oracle's fields (``Prediction.as_dict()`` / ``observed()``) without their ticks."""
    return {
        "model_calls": view["model_calls"], "posts": view["posts"],
        "stale_writes_applied": view["stale_writes_applied"],
        "accepted": [tuple(a[1:]) for a in view["accepted"]],
        "refused": [r[1] for r in view["refused"]],
        "late_writes_rejected": [r[1] for r in view["late_writes_rejected"]],
        "admissions": [tuple(a[1:]) for a in view["admissions"]],
        "restored": dict(view["restored"]),
        "newsletter_figure": view["newsletter_figure"], "required_figure": view["required_figure"],
        "applied_after_retention": view["applied_after_retention"],
        "invariants": dict(view["invariants"]), "finished": view["finished"],
    }


def _diff(what: str, got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    return [f"{k}: engine {got[k]!r} != {what} {want[k]!r}" for k in want if got[k] != want[k]]


async def differences(sc: Scenario, story: dict[str, str], run: dict[str, Any],
                      rule: str) -> list[str]:
    """How the engine's run of ``story`` judged under ``rule`` differs from memory:// and the
    oracle (every field but the ticks)."""
    sw = sc.defaults.set(rule=rule, **story)
    ref = (await reference_run(sc, sw)).comparable()
    if run["failed"] is not None:
        return [f"the work failed ({run['failed']})"]
    if _fencing_off_paused(story):
        # Temporal refused the paused worker's late completion (its heartbeat timed out) and the
        # driver cancelled the replaced attempt's coroutine: its orchestration cannot go on as
        # the harness's woken worker does, only its own late write (a fenced update) lands.
        ok = (not run["invariants"]["no_stale_write"] and not ref["invariants"]["no_stale_write"]
              and run["late"] == "applied" and run["stale_writes_applied"] == run["stale_landed"] > 0)
        return [] if ok else [f"fencing off, a paused worker: {untimed(run)} (memory:// {untimed(ref)})"]
    problems = _diff("memory://", untimed(run), untimed(ref))
    oracle = untimed_oracle(predict(sc, sw).as_dict())
    problems += _diff("the oracle", untimed_oracle(observed(run)), oracle)
    if story["silent"] == "paused" and story["fencing"] == "on" and run["late"] != "StaleOwner":
        problems.append(f"the woken worker's late write met {run['late']}")
    return problems


async def tell_all(clients: list[Client], queue: str,
                   stories: list[dict[str, str]]) -> list[dict[str, dict[str, Any]]]:
    """Tell every story at once (each client waits for at most ``STORIES_PER_CLIENT``)."""
    sc = q3_report()
    assert len(stories) <= STARTERS * STORIES_PER_CLIENT
    return list(await asyncio.gather(*(
        tell(clients[i // STORIES_PER_CLIENT], queue, sc, s) for i, s in enumerate(stories))))


async def compare(clients: list[Client], queue: str, stories: Iterable[dict[str, str]],
                  rules: Iterable[str] = RULES) -> tuple[int, list[str]]:
    """Tell every story at once, judge each under ``rules``: (runs compared, differences)."""
    sc = q3_report()
    stories = list(stories)
    told = await tell_all(clients, queue, stories)
    n, problems = 0, []
    for story, runs in zip(stories, told, strict=True):
        for rule in rules:
            n += 1
            problems += [f"{_label(story)},rule={rule}: {p}"
                         for p in await differences(sc, story, runs[rule], rule)]
    return n, problems


@pytest.fixture(scope="module")
async def told(story_queue: tuple[list[Client], str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Every story ``make test`` needs, told once and all at once (seconds): label -> rule -> run."""
    clients, queue = story_queue
    stories = {_label(s): s for s in PROTECTED}
    for sw in [*SCENES.values(), *WITNESS_RUNS.values()]:
        stories.setdefault(_label(story_of(sw)), story_of(sw))
    runs = await tell_all(clients, queue, list(stories.values()))
    return dict(zip(stories, runs, strict=True))


async def _check(told: dict[str, dict[str, dict[str, Any]]], sw: Switches) -> dict[str, Any]:
    story = story_of(sw)
    run = told[_label(story)][sw.rule]
    problems = await differences(q3_report(), story, run, sw.rule)
    assert not problems, "\n".join(problems)
    return run


@pytest.mark.parametrize("story", PROTECTED, ids=_label)
async def test_with_every_protection_on_the_story_ends_clean_inside_the_users_workflow(
        told: dict[str, dict[str, dict[str, Any]]], story: dict[str, str]) -> None:
    run = await _check(told, _SC.defaults.set(**story))
    assert run["finished"] and all(run["invariants"].values()), run["invariants"]


@pytest.mark.parametrize("scene", list(SCENES))
async def test_the_articles_scene_inside_the_users_workflow(
        told: dict[str, dict[str, dict[str, Any]]], scene: str) -> None:
    """Equal to memory:// (which passes the article's figures) in every field but the ticks;
    the two fencing-off scenes show the difference the docs name."""
    await _check(told, SCENES[scene])


@pytest.mark.parametrize("name", list(WITNESS_RUNS))
async def test_removing_one_protection_breaks_its_story_inside_the_users_workflow(
        told: dict[str, dict[str, dict[str, Any]]], name: str) -> None:
    run = await _check(told, WITNESS_RUNS[name])
    assert not all(run["invariants"].values()), f"{name}: removing this protection broke nothing"
