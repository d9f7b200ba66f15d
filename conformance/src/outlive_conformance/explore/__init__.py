"""The explorer: the article's eight switches on a local page, run through the real harness.

``outlive explore`` serves it; ``outlive run --svg FILE`` writes the same timeline drawing. This
package lives in the conformance distribution because it drives the harness; the core knows
nothing of it.
"""

from ._service import SWITCH_INFO, ExploreError, Explorer, ScenarioSource
from .server import ExplorerServer, serve
from .timeline import render_timeline

__all__ = ["SWITCH_INFO", "ExploreError", "Explorer", "ExplorerServer", "ScenarioSource",
           "render_timeline", "serve"]
