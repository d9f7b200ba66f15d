"""The controller's credential: the secret that lets a process issue the controller's commands.

A work opened by a :class:`~outlive.controller.Controller` records the hash of this secret; the
ledger then refuses ``PublishInput``, ``Admit``, ``MarkUnknown``, ``MarkStopped`` and ``Accept``
(the judge's verdict, yes or no) that do not carry it (:class:`~outlive.errors.NotController`).
Runners get their attempt's token and its secret, never this one.

Where the default comes from: the environment variable ``OUTLIVE_CONTROLLER_KEY`` if set, else a
per-user key file (``$XDG_CONFIG_HOME/outlive/controller.key``, ``~/.config`` by default; the
variable ``OUTLIVE_CONTROLLER_KEY_FILE`` names another path) created with mode 0600 on first use.

What it stops, honestly: a runner's code path (a buggy step, a fenced-out worker, an activity
handed only an :class:`~outlive.supervisor.Assignment`) acting as the controller — admitting
itself, marking its successor unknown, accepting its own candidate, publishing a version. What it
does not stop: an attacker running as the same operating-system user, who can read the key file
or the environment like any other process of that user. Isolation between users is the
operating system's; put runners under another user (or give them no access to the file) for more.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .errors import ConfigError

__all__ = ["ENV_KEY", "ENV_KEY_FILE", "default_credential", "key_file"]

ENV_KEY = "OUTLIVE_CONTROLLER_KEY"
ENV_KEY_FILE = "OUTLIVE_CONTROLLER_KEY_FILE"

_CACHE: dict[str, str] = {}


def key_file() -> Path:
    """Where the per-user key lives (it may not exist yet)."""
    named = os.environ.get(ENV_KEY_FILE)
    if named:
        return Path(named)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "outlive" / "controller.key"


def default_credential() -> str:
    """This user's controller credential: ``OUTLIVE_CONTROLLER_KEY``, else the key file's.

    The file is created on first use (mode 0600, exclusively: two processes starting together
    read the same key). An unreadable or empty file is a :class:`~outlive.errors.ConfigError`.
    """
    env = os.environ.get(ENV_KEY)
    if env:
        return env
    path = key_file()
    cached = _CACHE.get(str(path))
    if cached is not None:
        return cached
    try:
        if not path.exists():
            _create(path)
        key = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read or create the controller key file {path}: {exc}; set "
                          f"{ENV_KEY} instead", path=str(path)) from exc
    if not key:
        raise ConfigError(f"the controller key file {path} is empty; delete it or set {ENV_KEY}",
                          path=str(path))
    _CACHE[str(path)] = key
    return key


def _create(path: Path) -> None:
    """Write a new key beside ``path`` and link it into place: the file appears whole or not at
    all, and of two processes creating it together one key wins and both read it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_hex(32) + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
