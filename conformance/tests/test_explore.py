"""The explorer without a browser: its answers, its drawing and its HTTP surface.

The page only shows what these answers hold, so the article's numbers are checked here: the main
run, fencing off, the necessity table from the sweep and a run's place in it.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

import outlive
from outlive_conformance.explore import ExploreError, Explorer, ExplorerServer, render_timeline
from outlive_conformance.harness import run_scenario
from outlive_conformance.scenario import parse_scenario, q3_report

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def explorer(tmp_path_factory: pytest.TempPathFactory) -> Explorer:
    db = tmp_path_factory.mktemp("explore") / "beside.db"
    return Explorer.create(backends=[f"sqlite:///{db}", "sqlite:////nonexistent/dir/x.db"])


def _marks(svg: str) -> list[tuple[str, str, str]]:
    root = ET.fromstring(svg)
    return [(g.get("data-tick", ""), g.get("data-lane", ""), g.get("class", ""))
            for g in root.iter(f"{SVG}g") if "item" in (g.get("class") or "").split()]


def test_main_run_answer_has_the_articles_numbers(explorer: Explorer) -> None:
    a = explorer.run({})
    assert a["is_main"] and a["runs"][0]["ok"] and a["runs"][0]["clean"]
    out = a["runs"][0]["outcome"]
    assert (out["model_calls"], out["posts"], out["stale_writes_applied"],
            out["final_acceptance_tick"], out["newsletter_figure"]) == (6, 1, 0, 10, "4.7")
    assert all(m["same"] for m in a["against_main"])
    assert all(a["invariants"].values())
    assert "one of the 24 protected runs" in a["necessity"]["place"]


def test_fencing_off_answer_counts_stale_writes_and_sits_in_the_fencing_row(
        explorer: Explorer) -> None:
    a = explorer.run({"switches": {"fencing": "off"}})
    changed = {m["measure"]: (m["this"], m["main"]) for m in a["against_main"] if not m["same"]}
    assert changed == {"model calls": (7, 6), "stale writes applied": (3, 0)}
    assert a["invariants"]["no_stale_write"] is False
    rows = {r["protection"]: r for r in a["necessity"]["rows"]}
    assert [(r["broken"], r["runs"]) for r in rows.values()] == [(12, 24), (16, 24), (24, 48),
                                                                 (16, 48)]
    assert all(r["claim"]["holds"] for r in rows.values())
    assert "silent in {paused}" in rows["fencing"]["described"]
    assert rows["fencing"]["here"] and rows["fencing"]["in_breaking_story"] is True
    assert not any(r["here"] for name, r in rows.items() if name != "fencing")
    back = [n for n in a["neighbours"] if n["switch"] == "fencing"]
    assert back == [{"switch": "fencing", "value": "on", "clean": True, "model_calls": 6,
                     "posts": 1, "stale_writes_applied": 0, "newsletter_figure": "4.7",
                     "broken": []}]
    (stale,) = [m for m in a["runs"][0]["trace"] if m["mark"] == "late-write"]
    assert stale["tick"] == 8


def test_two_protections_off_is_outside_the_table(explorer: Explorer) -> None:
    a = explorer.run({"switches": {"fencing": "off", "pins": "off"}})
    assert a["necessity"]["removed"] == ["fencing", "pins"]
    assert "outside the table" in a["necessity"]["place"]
    assert not any(r["here"] for r in a["necessity"]["rows"])


def test_same_run_beside_sqlite_is_identical(explorer: Explorer) -> None:
    url = explorer.backends[0]
    a = explorer.run({"backend": url, "switches": {"key": "attempt"}})
    assert [r["backend"] for r in a["runs"]] == ["memory://", url]
    assert a["agreement"] == {"identical": True, "differences": []}
    assert a["runs"][1]["svg"].replace(url, "memory://") == a["runs"][0]["svg"]


def test_backend_that_cannot_open_is_a_message_not_a_failure(explorer: Explorer) -> None:
    a = explorer.run({"backend": "sqlite:////nonexistent/dir/x.db"})
    assert a["runs"][0]["ok"]
    bad = a["runs"][1]
    assert not bad["ok"] and bad["error"]["type"] == "BackendUnavailable"
    assert "/nonexistent/dir" in bad["error"]["message"]
    assert a["agreement"] is None


@pytest.mark.parametrize(("request_", "kind", "words"), [
    ({"switches": {"fencing": "maybe"}}, "ScenarioError", "fencing='maybe'"),
    ({"switches": {"fenceing": "off"}}, "ScenarioError", "unknown switches"),
    ({"scenario": "nope"}, "ScenarioError", "no scenario 'nope'"),
    ({"toml": "format = 1\nname = 3"}, "ScenarioError", "scenario edited on the page"),
    ({"backend": "temporal://127.0.0.1:7233"}, "ConfigError", "is not configured"),
])
def test_invalid_requests_are_refused_with_a_message(
        explorer: Explorer, request_: dict[str, Any], kind: str, words: str) -> None:
    with pytest.raises(ExploreError) as err:
        explorer.run(request_)
    assert err.value.kind == kind and words in err.value.message


def test_edited_scenario_runs_with_its_own_sweep(explorer: Explorer) -> None:
    text = explorer.scenarios[0].text.replace("ready_at = 12", "ready_at = 11")
    a = explorer.run({"toml": text})
    assert a["runs"][0]["outcome"]["newsletter_start"] == 11
    assert a["necessity"]["total"] == 864


async def test_svg_draws_every_record_of_the_main_run() -> None:
    sc = q3_report()
    s = await run_scenario(await outlive.open_backend("memory://"), sc)
    marks = _marks(render_timeline(s, sc))
    assert len(marks) == len(s.trace) + 3          # + v1 at t0, + the feed's two answers
    assert ("8", "attempt:1", "item late-write late refused") in marks
    assert [t for t, lane, cls in marks if "restored" in cls] == ["5", "13"]
    assert [t for t, lane, cls in marks if "acceptance" in cls] == ["10"]
    assert [(t, lane) for t, lane, cls in marks if "receiver" in cls] == [
        ("10", "receiver"), ("14", "receiver")]
    assert [(t, lane) for t, lane, cls in marks if "consumer-start" in cls] == [
        ("12", "consumer:newsletter")]
    assert not [m for m in marks if "stale" in m[2].split()]


async def test_svg_marks_a_second_post_and_a_wrong_figure_as_bad() -> None:
    sc = q3_report()
    s = await run_scenario(await outlive.open_backend("memory://"), sc,
                           sc.defaults.set(key="none", pins="off"))
    marks = _marks(render_timeline(s, sc))
    assert any("duplicate-post" in cls and "bad" in cls for _, _, cls in marks)
    assert any("wrong-figure" in cls and "bad" in cls for _, _, cls in marks)


async def test_svg_escapes_what_a_scenario_says() -> None:
    text = q3_report().source and resources.files("outlive_conformance").joinpath(
        "scenarios/q3-report.toml").read_text(encoding="utf-8")
    hostile = text.replace('work_id = "digest/q3-report"', 'work_id = "a<script>&\\"b"') \
                  .replace('name = "newsletter"', 'name = "news<b>letter"')
    sc = parse_scenario(hostile, "hostile.toml")
    s = await run_scenario(await outlive.open_backend("memory://"), sc)
    svg = render_timeline(s, sc)
    root = ET.fromstring(svg)                    # well-formed
    assert "<script" not in svg and not list(root.iter(f"{SVG}script"))
    assert any(t.text == "a<script>&\"b on memory://" for t in root.iter(f"{SVG}text"))


# -- HTTP -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(explorer: Explorer) -> Iterator[ExplorerServer]:
    srv = ExplorerServer(explorer)
    srv.start_in_thread()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _http(url: str, data: Any = None, headers: dict[str, str] | None = None,
          method: str | None = None) -> tuple[int, bytes, str]:
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


def test_server_listens_on_loopback_and_serves_the_bundled_page(server: ExplorerServer) -> None:
    assert server.url.startswith("http://127.0.0.1:") and server.loopback_only
    status, page, ctype = _http(server.url)
    assert status == 200 and ctype.startswith("text/html") and b"/static/explore.js" in page
    for name in ("explore.js", "explore.css"):
        status, _, _ = _http(server.url + "static/" + name)
        assert status == 200
    assert _http(server.url + "static/../_service.py")[0] == 404
    assert _http(server.url + "static/timeline.py")[0] == 404


def test_page_files_load_nothing_from_elsewhere() -> None:
    static = Path(str(resources.files("outlive_conformance.explore"))) / "static"
    for f in static.iterdir():
        text = f.read_text(encoding="utf-8")
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, f.name


def test_server_answers_runs_and_refusals_as_json(server: ExplorerServer) -> None:
    json_headers = {"Content-Type": "application/json"}
    status, body, _ = _http(server.url + "api/run", {"switches": {"fencing": "off"}}, json_headers)
    assert status == 200 and json.loads(body)["runs"][0]["outcome"]["stale_writes_applied"] == 3
    status, body, _ = _http(server.url + "api/run", {"switches": {"fencing": "x"}}, json_headers)
    assert status == 422 and json.loads(body)["error"]["type"] == "ScenarioError"
    status, body, _ = _http(server.url + "api/run", {"switches": {}},
                            {"Content-Type": "text/plain"})
    assert status == 415                       # a plain cross-site form cannot start a run
    status, body, _ = _http(server.url + "api/config", headers={"Host": "attacker.example"})
    assert status == 403                       # DNS rebinding: only loopback host names
    status, body, _ = _http(server.url + "api/config")
    cfg = json.loads(body)
    assert cfg["backends"][0] == "memory://" and len(cfg["switches"]) == 8


def test_blocking_runs_do_not_block_the_page(server: ExplorerServer) -> None:
    """Two runs at once both answer (one thread per request)."""
    async def both() -> list[tuple[int, bytes, str]]:
        return await asyncio.gather(*(asyncio.to_thread(
            _http, server.url + "api/run", {"switches": {"dies": v}},
            {"Content-Type": "application/json"}) for v in ("yes", "no")))
    answers = asyncio.run(both())
    assert [a[0] for a in answers] == [200, 200]


async def test_the_docs_picture_of_the_main_run_is_current() -> None:
    """docs/conformance.md shows this drawing; redraw it when the harness or the drawing changes."""
    sc = q3_report()
    s = await run_scenario(await outlive.open_backend("memory://"), sc)
    path = Path(__file__).resolve().parents[2] / "docs" / "images" / "q3-report-main-run.svg"
    assert path.read_text(encoding="utf-8") == render_timeline(s, sc), (
        "docs/images/q3-report-main-run.svg is out of date: redraw it with "
        "`outlive run q3-report --svg docs/images/q3-report-main-run.svg`")


def test_explore_command_serves_on_loopback_and_stops_by_its_pid(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "outlive", "explore", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("outlive explore: serving http://127.0.0.1:"), line
        url = line.split()[3]
        status, body, _ = _http(url + "api/config")
        assert status == 200 and json.loads(body)["backends"] == ["memory://"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_explore_command_refuses_an_invalid_scenario_file_at_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "bad.toml"
    bad.write_text("format = 1\nname = 'x'\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "outlive", "explore", "--port", "0",
                           "--scenario", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "bad.toml" in done.stderr and "is missing" in done.stderr


def test_run_svg_writes_the_drawing_of_that_run(tmp_path: Path) -> None:
    from outlive.cli import main

    main_svg, off_svg = tmp_path / "main.svg", tmp_path / "off.svg"
    assert main(["run", "q3-report", "--svg", str(main_svg)]) == 0
    docs = Path(__file__).resolve().parents[2] / "docs" / "images" / "q3-report-main-run.svg"
    assert main_svg.read_text(encoding="utf-8") == docs.read_text(encoding="utf-8")
    assert main(["run", "q3-report", "--set", "fencing=off", "--svg", str(off_svg)]) == 1
    marks = _marks(off_svg.read_text(encoding="utf-8"))
    assert len([m for m in marks if "stale" in m[2].split()]) == 3


async def test_svg_draws_a_post_that_falls_silent_and_one_settled_meanwhile() -> None:
    text = resources.files("outlive_conformance").joinpath(
        "scenarios/q3-report.toml").read_text(encoding="utf-8")
    sc = parse_scenario(text.replace(
        'poster_dies = "first"',
        'silences = [{ attempt = 2, point = "after-intent", wake_at = 14 }]\nposter_dies = "first"'),
        "paused-poster.toml")
    s = await run_scenario(await outlive.open_backend("memory://"), sc,
                           sc.defaults.set(fencing="off", dies="no", key="attempt"))
    marks = _marks(render_timeline(s, sc))
    assert len(marks) == len(s.trace) + 2          # + v1 at t0, + the one post the feed applies
    # #2's post is applied at t14; #3, settling the same intent, finds it confirmed: no second
    # receiver mark although the keys differ
    assert [(t, lane) for t, lane, cls in marks if "receiver" in cls] == [("14", "receiver")]
