"""A step's journaled value in the handler shape: ``{"v": result, "t": ms}``, read back as written.

The adapter reads it with json's scanner directly (see ``_engine._SCAN``); these pin that it reads
what ``json.loads`` reads, and refuses, typed, what is not a step's value.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from outlive import codec
from outlive.errors import InvalidRecord
from outlive_restate._engine import _envelope


@pytest.mark.parametrize("result", [0, -7, "é\u2028\"\\", [1, {"a": None}], (1, "x"),
                                    {"nested": [[True, False], {"k": "v"}]}, None])
def test_a_steps_journaled_value_reads_back_as_json_loads_reads_it(result: Any) -> None:
    raw = b'{"v":%s,"t":%d}' % (codec.dumps(result).encode(), 1_764_547_200_123)
    assert _envelope(raw) == (codec.decode(json.loads(raw)["v"]), 1_764_547_200_123)


@pytest.mark.parametrize("raw", [b"", b"[1]", b'{"v":1}', b'{"v":1,"t":"5"}', b'{"v":1,"t":true}',
                                 b'{"v":1,"t":2} x', b'{"v":1,"t":2', b"\xff", b' {"v":1,"t":2}'])
def test_a_journaled_value_that_is_not_a_steps_is_refused_typed(raw: bytes) -> None:
    with pytest.raises(InvalidRecord, match="journaled value"):
        _envelope(raw)
