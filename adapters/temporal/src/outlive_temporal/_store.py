"""Large payloads by reference: a payload codec over a content-addressed blob store.

Temporal refuses payloads over 2 MB and a history over 50 MB; a work of 1,000 steps of 20 KB
passes both if its results travel inline. With a store on the :class:`OutlivePlugin`, any payload
bigger than the threshold (a step result, an argument, the ledger carried across continue-as-new)
is written to the store under the SHA-256 of its bytes, and history keeps a 64-byte reference.
The codec runs in the worker and client, outside the workflow sandbox, so workflow code never
does I/O. Content addressing makes a rewrite of the same blob a no-op.

:class:`FileStore` is a directory every worker and client can read (one host, or a shared
volume); a deployment across hosts implements :class:`BlobStore` over its object store.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from collections.abc import Sequence
from typing import Protocol

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

__all__ = ["BlobStore", "FileStore", "StoreCodec"]

_ENCODING = b"outlive/ref"


class BlobStore(Protocol):
    """Where large payloads live. Keys are SHA-256 hex digests of the value."""

    async def put(self, key: str, data: bytes) -> None: ...

    async def get(self, key: str) -> bytes: ...


class FileStore:
    """A directory of blobs named by digest; writes are atomic (temp file + rename)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key)

    def _put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if os.path.exists(path):
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, key, data)

    async def get(self, key: str) -> bytes:
        def read() -> bytes:
            with open(self._path(key), "rb") as f:
                return f.read()

        return await asyncio.to_thread(read)


class StoreCodec(PayloadCodec):
    """Payloads over ``threshold`` bytes become references into ``store``."""

    def __init__(self, store: BlobStore, *, threshold: int = 16 * 1024) -> None:
        self.store = store
        self.threshold = threshold

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out: list[Payload] = []
        for p in payloads:
            if p.ByteSize() <= self.threshold:
                out.append(p)
                continue
            data = p.SerializeToString()
            key = hashlib.sha256(data).hexdigest()
            await self.store.put(key, data)
            out.append(Payload(metadata={"encoding": _ENCODING}, data=key.encode()))
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out: list[Payload] = []
        for p in payloads:
            if p.metadata.get("encoding") != _ENCODING:
                out.append(p)
                continue
            key = p.data.decode()
            data = await self.store.get(key)
            if hashlib.sha256(data).hexdigest() != key:
                raise ValueError(f"blob {key[:12]} in the store does not match its digest")
            out.append(Payload.FromString(data))
        return out
