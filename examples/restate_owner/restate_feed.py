"""A receiver that is itself a Restate handler: a feed (a Virtual Object keyed by feed name).

Restate dedupes calls by idempotency key for ``idempotency_retention``: a worker sends the
effect's operation key as that key (:func:`outlive_restate.restate_sender`), so a resend
after a lost acknowledgement returns the first answer and posts nothing new. The effect id is
written with the post, in the same invocation, so the two never part.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import restate

__all__ = ["feed_object"]


def feed_object(name: str, *, retention: timedelta = timedelta(hours=24)) -> restate.VirtualObject:
    """A feed named ``name``: ``post`` (exclusive) applies a post, ``posts`` (shared) lists them."""
    feed = restate.VirtualObject(name, idempotency_retention=retention)

    @feed.handler()
    async def post(ctx: restate.ObjectContext, payload: Any) -> dict[str, Any]:
        """Apply the post; the effect id is written with the effect, atomically."""
        posts: list[Any] = await ctx.get("posts", type_hint=list) or []
        effect_id = f"P{len(posts) + 1}"
        posts.append({"effect_id": effect_id, "payload": payload})
        ctx.set("posts", posts)
        return {"effect_id": effect_id}

    @feed.handler(kind="shared")
    async def posts(ctx: restate.ObjectSharedContext) -> list[Any]:
        got: list[Any] = await ctx.get("posts", type_hint=list) or []
        return got

    return feed
