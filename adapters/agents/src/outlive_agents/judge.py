"""A judge: another agent as the assessor, its version part of the contract.

A judge is a model call with its own instructions and version. The controller calls it after the
mechanical checks (owner, pinned version, part hashes); its verdict is recorded as the acceptance
(or the refusal), the reason in the acceptance's note. The judge's name and version are part of
the contract, so retuning the judge is a new contract: an answer accepted by the old judge is not
taken as accepted by the new one::

    judge = Judge(name="editor", version="3", ask=ask_chat_model(model),
                  instructions="PASS if the answer quotes the report's revenue figure.")
    WorkDefinition(..., contract=judge.contract("digest-posted", "1"), assessor=judge)

``ask`` is any ``prompt -> reply text`` call, sync or async: :func:`ask_chat_model` adapts a
LangChain chat model, :func:`ask_agent` a pydantic-ai ``Agent`` (their fake models included).
Framework-free: nothing to install beyond outlive.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from outlive import Candidate, Contract, InputVersion
from outlive.errors import ConfigError

from ._records import jsonable

__all__ = ["Judge", "ask_agent", "ask_chat_model", "parse_verdict"]

Ask = Callable[[str], Awaitable[str] | str]

_VERDICT = re.compile(r"^\s*(PASS|FAIL)\b[\s:.\-]*(.*)$", re.IGNORECASE | re.DOTALL)


def parse_verdict(reply: str) -> tuple[bool, str]:
    """``PASS: why`` / ``FAIL: why``, or JSON ``{"pass": bool, "reason": str}``.

    Anything else is a refusal that says so: a judge that does not answer the question has
    not accepted anything.
    """
    text = reply.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, Mapping) and isinstance(data.get("pass"), bool):
            return bool(data["pass"]), str(data.get("reason", ""))
    found = _VERDICT.match(text)
    if found is None:
        return False, f"the judge gave no verdict: {text[:200]!r}"
    return found.group(1).upper() == "PASS", found.group(2).strip()


@dataclass(frozen=True, kw_only=True)
class Judge:
    """An assessor that is a model call; ``version`` names its tuning (instructions, model)."""

    name: str
    version: str
    ask: Ask
    instructions: str
    #: ``inputs(version) -> {part: content}``: shown to the judge with the candidate (a judge
    #: that checks an answer against its ticket needs the ticket). None: the candidate alone.
    inputs: Callable[[str], Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.version:
            raise ConfigError("a judge needs a name and a version (the version is part of the "
                              "contract)", field="version")

    @property
    def assessor(self) -> str:
        """How the contract names this judge: ``judge:<name>@<version>``."""
        return f"judge:{self.name}@{self.version}"

    def contract(self, name: str, version: str) -> Contract:
        """The contract judged by this judge: its version carries the judge's."""
        return Contract(name=name, version=f"{version}+{self.assessor}", assessor=self.assessor)

    def prompt(self, cand: Candidate, version: InputVersion | None) -> str:
        """What the judge is asked: its instructions, the input version, the candidate."""
        shown: dict[str, Any] = {"answer": jsonable(cand.content)}
        if version is not None:
            shown["version"] = version.version
            if self.inputs is not None:
                shown["inputs"] = jsonable(dict(self.inputs(version.version)))
        return (f"{self.instructions}\n\nReply PASS or FAIL, a colon, and one sentence why.\n\n"
                f"{json.dumps(shown, sort_keys=True, ensure_ascii=False)}")

    async def __call__(self, cand: Candidate, version: InputVersion | None) -> tuple[bool, str]:
        reply = self.ask(self.prompt(cand, version))
        if inspect.isawaitable(reply):
            reply = await reply
        ok, reason = parse_verdict(str(reply))
        return ok, f"{self.assessor}: {reason}"


def ask_chat_model(model: Any) -> Ask:
    """``prompt -> reply`` through a LangChain chat model's ``ainvoke``."""
    async def ask(prompt: str) -> str:
        reply = await model.ainvoke(prompt)
        return str(getattr(reply, "content", reply))

    return ask


def ask_agent(agent: Any) -> Ask:
    """``prompt -> reply`` through a pydantic-ai ``Agent`` whose output is text."""
    async def ask(prompt: str) -> str:
        result = await agent.run(prompt)
        return str(result.output)

    return ask
