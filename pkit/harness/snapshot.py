"""Move a worker's outputs and inputs to the evaluating process as plain data, and read them back safely.

A worker `encode`s a nested value (tensors, tuples, lists, dicts, scalars, other objects) into plain dicts
holding CPU tensors and saves it as a pickle of plain values only (tensors as dtype, shape and raw bytes; sparse
ones as indices and values); the parent `load`s it with an unpickler that refuses every global (no code runs
while unpickling), refuses files over a size cap, and `decode`s it into the same nesting with
plain CPU `torch.Tensor` leaves. Each tensor keeps the device it lived on and whether the worker saw a tensor
subclass; objects that are not containers or scalars become `Opaque` (type name and state), so a mutation
of any input, tensor or not, shows as a difference.

Example:
    >>> import torch, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.pt")
    >>> save(path, ([torch.ones(2)], 3.0, "a"))
    >>> got = load(path)
    >>> got.value[0][0].tolist(), got.value[1:], got.devices
    ([1.0, 1.0], (3.0, 'a'), {'out[0][0]': 'cpu'})
"""
from __future__ import annotations

import os
import pickle
import re
from dataclasses import dataclass, field

import torch

MAX_DEPTH = 8
SCALARS = (int, float, bool, str, type(None))
DIGEST_BYTES = 64 << 20
"""Input tensors larger than this travel as a digest (enough to see whether they changed), not as values."""
_CHUNK = 1 << 24


@dataclass(frozen=True)
class Digest:
    """A large input tensor by dtype, shape, layout and two position-weighted sums of its bytes."""

    dtype: str
    shape: tuple
    sums: tuple


def digest(t: torch.Tensor) -> Digest:
    """Digest of a dense tensor, computed on its own device in chunks (a few ms per GB on a GPU)."""
    words = t.detach().contiguous().view(-1).view(torch.uint8)
    plain = weighted = 0
    for start in range(0, words.numel(), _CHUNK):
        chunk = words[start:start + _CHUNK].to(torch.int64)
        position = torch.arange(start, start + chunk.numel(), device=chunk.device, dtype=torch.int64) % 65521 + 1
        plain += int(chunk.sum())
        weighted += int((chunk * position).sum())
    return Digest(str(t.dtype), tuple(t.shape), (plain, weighted))


@dataclass(frozen=True)
class Opaque:
    """An input or output value that is neither a container, a scalar nor a tensor: its type and state."""

    type: str
    state: object


class SnapshotError(Exception):
    """A snapshot file is missing, too large or not of the expected shape."""


def _plain(t: torch.Tensor) -> torch.Tensor:
    with torch._C.DisableTorchFunctionSubclass():
        if type(t) is not torch.Tensor:
            t = torch.Tensor.as_subclass(t, torch.Tensor)
        t = t.detach()
        return t.cpu() if t.device.type != "cpu" else t.clone()


def _repr(obj) -> str:
    """repr without memory addresses (they differ between the processes whose inputs are compared)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj))[:200]


def encode(obj, depth: int = 0, digest_over: int | None = None):
    """`obj` as nested plain dicts with CPU tensors (worker side); dense tensors over `digest_over` bytes
    become digests."""
    if (isinstance(obj, torch.Tensor) and digest_over is not None and obj.layout == torch.strided
            and obj.numel() * obj.element_size() > digest_over):
        d = digest(obj)
        return {"kind": "digest", "dtype": d.dtype, "shape": list(d.shape), "sums": list(d.sums),
                "device": str(obj.device)}
    if isinstance(obj, torch.Tensor):
        return {"kind": "tensor", "data": _plain(obj), "device": str(obj.device),
                "subclass": None if type(obj) is torch.Tensor else type(obj).__qualname__}
    if depth >= MAX_DEPTH:
        return {"kind": "object", "type": type(obj).__qualname__, "state": _repr(obj)}
    if isinstance(obj, (tuple, list)):
        return {"kind": "tuple" if isinstance(obj, tuple) else "list",
                "items": [encode(c, depth + 1, digest_over) for c in obj]}
    if isinstance(obj, dict):
        return {"kind": "dict", "keys": [k if isinstance(k, (str, int)) else repr(k) for k in obj],
                "items": [encode(v, depth + 1, digest_over) for v in obj.values()]}
    if isinstance(obj, SCALARS):
        return {"kind": "value", "value": obj}
    if isinstance(obj, (complex, torch.dtype, torch.device)):
        return {"kind": "object", "type": type(obj).__qualname__, "state": _repr(obj)}
    state = vars(obj) if hasattr(obj, "__dict__") and vars(obj) else None
    return {"kind": "object", "type": type(obj).__qualname__,
            "state": encode(state, depth + 1) if state is not None else _repr(obj)}


@dataclass
class Snapshot:
    """A decoded value; `devices` and `subclasses` map leaf paths ('out[0]') to the worker's device and to the
    tensor subclass the worker saw (absent for plain tensors)."""

    value: object
    devices: dict = field(default_factory=dict)
    subclasses: dict = field(default_factory=dict)


def decode(tree, path: str = "out", snap: Snapshot | None = None) -> Snapshot:
    """The nested value of an `encode`d tree (parent side); SnapshotError if it is not one."""
    top = snap is None
    snap = snap or Snapshot(None)
    value = _decode(tree, path, snap, 0)
    if top:
        snap.value = value
    return snap


def _decode(tree, path: str, snap: Snapshot, depth: int):
    if not isinstance(tree, dict) or depth > MAX_DEPTH + 1:
        raise SnapshotError(f"{path}: not a snapshot node")
    kind = tree.get("kind")
    if kind == "tensor":
        data = tree.get("data")
        if type(data) is not torch.Tensor:
            raise SnapshotError(f"{path}: tensor data of type {type(data).__name__}")
        snap.devices[path] = str(tree.get("device"))
        if tree.get("subclass"):
            snap.subclasses[path] = str(tree["subclass"])
        return data
    if kind == "digest":
        return Digest(str(tree.get("dtype")), tuple(int(v) for v in tree.get("shape", [])),
                      tuple(int(v) for v in tree.get("sums", [])))
    if kind in ("tuple", "list"):
        items = [_decode(c, f"{path}[{i}]", snap, depth + 1) for i, c in enumerate(tree.get("items", []))]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        keys, items = tree.get("keys", []), tree.get("items", [])
        return {k: _decode(v, f"{path}[{k!r}]", snap, depth + 1) for k, v in zip(keys, items)}
    if kind == "value":
        value = tree.get("value")
        if not isinstance(value, SCALARS):
            raise SnapshotError(f"{path}: value of type {type(value).__name__}")
        return value
    if kind == "object":
        state = tree.get("state")
        if isinstance(state, dict):
            state = _freeze(_decode(state, f"{path}.state", snap, depth + 1))
        return Opaque(str(tree.get("type")), state if isinstance(state, (str, tuple, type(None))) else repr(state))
    raise SnapshotError(f"{path}: unknown node kind {kind!r}")


def _freeze(value):
    """A hashable, comparable form of a decoded object state (tensors by their values)."""
    if isinstance(value, dict):
        return tuple((k, _freeze(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.flatten().tolist()[:64])
    return value


def _to_plain_data(tree):
    """Replace every tensor of an encoded tree by plain data: dtype, shape and bytes (sparse: its parts)."""
    if isinstance(tree, torch.Tensor):
        if tree.layout == torch.sparse_coo:
            t = tree.coalesce()
            return {"tensor": "sparse_coo", "shape": list(t.shape), "indices": _to_plain_data(t.indices()),
                    "values": _to_plain_data(t.values())}
        if tree.layout != torch.strided:
            return {"tensor": str(tree.layout), "dense": _to_plain_data(tree.to_dense())}
        flat = tree.contiguous().view(-1)
        raw = flat.view(torch.uint8)
        return {"tensor": "strided", "dtype": str(tree.dtype).removeprefix("torch."), "shape": list(tree.shape),
                "bytes": raw.numpy().tobytes()}
    if isinstance(tree, dict):
        return {k: _to_plain_data(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_to_plain_data(v) for v in tree]
    return tree


def _from_plain_data(tree):
    if isinstance(tree, dict) and "tensor" in tree:
        kind = tree["tensor"]
        if kind == "sparse_coo":
            return torch.sparse_coo_tensor(_from_plain_data(tree["indices"]), _from_plain_data(tree["values"]),
                                           tuple(tree["shape"])).coalesce()
        if kind == "strided":
            dtype = getattr(torch, str(tree["dtype"]), None)
            if not isinstance(dtype, torch.dtype):
                raise SnapshotError(f"unknown dtype {tree['dtype']!r}")
            raw = torch.frombuffer(bytearray(tree["bytes"]), dtype=torch.uint8) if tree["bytes"] else \
                torch.empty(0, dtype=torch.uint8)
            return raw.view(dtype).reshape(tuple(tree["shape"]))
        dense = _from_plain_data(tree["dense"])
        return dense.to_sparse_csr() if kind == "torch.sparse_csr" else dense.to_sparse()
    if isinstance(tree, dict):
        return {k: _from_plain_data(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_from_plain_data(v) for v in tree]
    return tree


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, tuples, strings, bytes and numbers only: any class or function is refused."""

    def find_class(self, module, name):
        raise SnapshotError(f"a snapshot may hold no objects, found {module}.{name}")


def save(path: str, obj, digest_over: int | None = None) -> None:
    """Write `encode(obj, digest_over=...)` to `path` atomically (worker side)."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(_to_plain_data(encode(obj, digest_over=digest_over)), f, protocol=4)
    os.replace(tmp, path)


def load(path: str, max_bytes: int | None = None, root: str = "out") -> Snapshot:
    """Read and decode a snapshot file (parent side), refusing files larger than `max_bytes`."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise SnapshotError(f"no snapshot at {path}: {e}") from None
    if max_bytes is not None and size > max_bytes:
        raise SnapshotError(f"{os.path.basename(path)} holds {size} bytes, over the cap of {max_bytes}")
    try:
        with open(path, "rb") as f:
            tree = _from_plain_data(_PlainUnpickler(f).load())
    except Exception as e:  # noqa: BLE001 - whatever a hostile file does to the unpickler is a bad snapshot
        raise SnapshotError(f"{os.path.basename(path)} is not a readable snapshot: {type(e).__name__}: {e}") from None
    return decode(tree, root)
