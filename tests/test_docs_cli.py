"""docs/cli.md against the command line itself: every command the group holds has a section, and
every option each command takes is named in it."""

from __future__ import annotations

import re
from pathlib import Path

import click

from outlive.cli import cli

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^### `outlive ([a-z-]+)`\s*$", text, flags=re.M)
    return {name: body for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_every_command_and_option_is_in_docs_cli() -> None:
    sections = _sections(PAGE.read_text(encoding="utf-8"))
    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert {"demo", "inspect", "list", "backends", "supervise", "worker", "run", "sweep",
            "explore"} <= set(names)
    missing: list[str] = []
    for name in names:
        command = cli.get_command(ctx, name)
        assert command is not None, name
        if name not in sections:
            missing.append(f"no section for `outlive {name}`")
            continue
        for param in command.params:
            for opt in (o for o in param.opts if o.startswith("--")):
                if opt not in sections[name]:
                    missing.append(f"`outlive {name}`: {opt} is not documented")
    assert not missing, "\n".join(missing)

