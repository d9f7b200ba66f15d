"""docs/tutorial.md, followed as a newcomer would: from a fresh clone, only its own steps.

The test reads the page and does what it says, in order:

- each ```sh block runs in bash, from the directory the previous block left (``cd`` carries
  over); ``source .venv/bin/activate`` carries over as the venv's ``bin`` first on ``PATH``;
- the ```python block titled ``tutorial.py`` is saved under that name;
- in each ```console block, a ``$ command`` runs and the lines under it are what it must print,
  in order (hashes differ per run). The reader's own program must print exactly those lines;
  another command's lines may be shortened or left out (each is a prefix of a printed line).
  ``^C`` means Ctrl-C once the lines above it have been printed.

Two substitutions, both for this machine and neither a step the page leaves out: the clone is
``git clone`` of this repository's committed HEAD, and ``pip install`` goes through uv with the
pinned constraints (its cache, no network). The time from the clone to the last step is printed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
HEX = re.compile(r"\b[0-9a-f]{8,}\b")


def _uv() -> str:
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.exists() else shutil.which("uv")
    assert found, "uv is not installed (make install puts it in the venv)"
    return found


class Shell:
    """The reader's terminal: a working directory and an environment that carry over."""

    def __init__(self, cwd: Path, home: Path) -> None:
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        self.env["HOME"] = str(home)
        self.env["PATH"] = os.pathsep.join(
            p for p in self.env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))

    def sh(self, script: str) -> None:
        for line in script.splitlines():
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            m = re.fullmatch(r"source (\S+)/bin/activate", line)
            if m:
                venv = (self.cwd / m.group(1)).resolve()
                self.env["VIRTUAL_ENV"] = str(venv)
                self.env["PATH"] = f"{venv / 'bin'}{os.pathsep}{self.env['PATH']}"
                continue
            m = re.fullmatch(r"(\S+) -m pip install (.+)", line)
            if m:       # the one substitution: uv, pinned, from its cache
                line = (f"{_uv()} pip install -q --python {m.group(1)} -c {ROOT}/constraints.txt "
                        f"--build-constraint {ROOT}/constraints.txt {m.group(2)}")
            out = subprocess.run(["bash", "-c", f"{line}\npwd"], cwd=self.cwd, env=self.env,
                                 capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, f"$ {line}\n{out.stdout}\n{out.stderr}"
            self.cwd = Path(out.stdout.strip().splitlines()[-1])

    def console(self, block: str) -> None:
        runs: list[tuple[str, list[str]]] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                runs.append((line[2:], []))
            elif runs:
                runs[-1][1].append(line)
        for command, expected in runs:
            self.expect(command, expected)

    def expect(self, command: str, expected: list[str]) -> None:
        proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.cwd, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert proc.stdout is not None
        printed: list[str] = []
        try:
            want = [e for e in expected if e.strip()]
            if "^C" in want:
                before = want[:want.index("^C")]
                while not _follows(printed, before):
                    line = proc.stdout.readline()
                    assert line, f"$ {command} ended before printing {before}:\n{printed}"
                    printed.append(line.rstrip("\n"))
                proc.send_signal(signal.SIGINT)
                want = [w for w in want if w != "^C"]
            rest, _ = proc.communicate(timeout=300)
            printed += rest.splitlines()
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, f"$ {command} exited {proc.returncode}:\n" + "\n".join(printed)
        # the reader's own program prints exactly what the page shows; other commands' lines
        # may be left out (the page shortens them)
        exact = command.startswith("python ")
        assert _follows(printed, want) and (not exact or len(printed) == len(want)), (
            f"$ {command} printed:\n" + "\n".join(printed)
            + "\n\nthe tutorial shows:\n" + "\n".join(want))


def _norm(line: str) -> str:
    return HEX.sub("#", line.rstrip())


def _follows(printed: list[str], want: list[str]) -> bool:
    """Each wanted line is a prefix of a printed line, in order."""
    i = 0
    for line in printed:
        if i < len(want) and _norm(line).startswith(_norm(want[i])):
            i += 1
    return i == len(want)


def test_the_tutorial_from_a_fresh_clone(tmp_path: Path) -> None:
    started = time.monotonic()
    clone = tmp_path / "outlive"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    home = tmp_path / "home"
    home.mkdir()
    shell = Shell(clone, home)
    text = (clone / "docs" / "tutorial.md").read_text(encoding="utf-8")
    steps = 0
    for kind, info, body in BLOCK.findall(text):
        if kind == "sh":
            shell.sh(body)
        elif kind == "python":
            m = re.search(r'title="([^"]+)"', info)
            assert m, "every Python block of the tutorial names its file"
            (shell.cwd / m.group(1)).write_text(body, encoding="utf-8")
        elif kind == "console":
            shell.console(body)
        steps += 1
    assert steps >= 6
    assert (home / "first-work" / "tutorial.db").exists()
    print(f"\nthe tutorial, from the clone to its last step: {time.monotonic() - started:.1f} s")


def test_the_checker_catches_a_wrong_line() -> None:
    assert _follows(["#1  token 1  pinned v1  running  admitted 2026"], ["#1  token 1  pinned v1"])
    assert not _follows(["summarised intro"], ["summarised revenue"])
    assert _follows(["accepted 9ca26a514f98 for v1"], ["accepted 0123abcd4567 for v1"])
