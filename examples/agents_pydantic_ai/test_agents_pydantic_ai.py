"""pydantic-ai's dice-game sample and its port: both answer; the port journals the roll and is
accepted for the published version; the port changes at most 30 of the sample's lines."""

from __future__ import annotations

import difflib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def changed_lines(before: Path, after: Path) -> int:
    """Lines added or removed (docstrings aside), as a diff counts them."""
    def code(p: Path) -> list[str]:
        text = p.read_text()
        return text[text.index('"""', 3) + 3:].splitlines()   # past the module docstring

    diff = difflib.unified_diff(code(before), code(after), lineterm="", n=0)
    return sum(1 for d in diff if d[:1] in "+-" and not d.startswith(("+++", "---")))


async def test_the_sample_answers() -> None:
    from . import before

    assert "roll_dice" in await before.main()


async def test_the_port_is_accepted_with_the_roll_journaled(tmp_path: Path) -> None:
    from . import after

    done, state = await after.main(f"sqlite:///{tmp_path / 'd.db'}")
    assert done.acceptance.version == "v1"
    steps = {e.step: e.result for e in state.journal}
    order = list(steps)
    # pydantic-ai runs the model's two tool calls side by side: journaled as each ends
    assert order[0] == "model:0" and order[3:] == ["model:1", "assembly"], order
    assert set(order[1:3]) == {"tool:1:pyd_ai_tool_call_id__roll_dice",
                               "tool:1:pyd_ai_tool_call_id__get_player_name"}, order
    roll = steps["tool:1:pyd_ai_tool_call_id__roll_dice"]
    answer = state.candidate(done.acceptance.digest).content["answer"]
    assert f'"roll_dice":"{roll}"' in answer and '"get_player_name":"Anne"' in answer


def test_the_port_changes_at_most_30_lines() -> None:
    assert changed_lines(HERE / "before.py", HERE / "after.py") <= 30
