"""The AI/ML event tree of pydftracer: ``from dftracer.python import ai``.

Every node is a :class:`dftracer._core.dft_fn` (the calls, ``with`` blocks and
loops run in C) with a category and an event name, e.g. ``ai.compute.forward``
writes events named ``forward`` in category ``compute``.  A node is a decorator
(``@ai.data.item``, ``@ai.compute.forward(args={...})``), a context manager, a
loop wrapper (``.iter``), a hook pair (``.start()``/``.stop()``); ``update``,
``enable`` and ``disable`` apply to its whole subtree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, Optional, TypeVar, Union

from dftracer._core import dft_fn, get_time

__all__ = [
    "ai",
    "DFTracerAI",
    "AI",
    "comm",
    "compute",
    "data",
    "dataloader",
    "device",
    "checkpoint",
    "pipeline",
]

F = TypeVar("F", bound=Callable[..., Any])
Number = Union[int, float]


class DFTracerAI(dft_fn):
    """One node of the tree: events named ``name`` in category ``cat``."""

    def __init__(
        self,
        cat: str,
        name: Optional[str] = None,
        *,
        epoch: Optional[int] = None,
        step: Optional[int] = None,
        image_idx: Optional[int] = None,
        image_size: Optional[Number] = None,
        enable: bool = True,
    ) -> None:
        super().__init__(cat, cat if name is None else name, epoch, step, image_idx, image_size,
                         enable)
        self._children: Dict[str, DFTracerAI] = {}

    if TYPE_CHECKING:
        # Children are set per instance (ai.compute.forward, ai.data.io.read, ...).
        def __getattr__(self, name: str) -> "DFTracerAI": ...

    # -- tree ---------------------------------------------------------------
    def _child(self, key: str, name: str, node: Optional["DFTracerAI"] = None) -> "DFTracerAI":
        """Creates (or adopts) the child `key`, inheriting values and enable."""
        if node is None:
            node = DFTracerAI(self.cat, name, enable=self.enabled, **self._values)
        else:
            node.update(**self._values)
            node._set_enabled(self.enabled)
        self._children[key] = node
        return node

    def _add(self, **names: str) -> None:
        for attr, name in names.items():
            setattr(self, attr, self._child(attr, name))

    def derive(self, name: str) -> "DFTracerAI":
        """The child ``<self.name>.<name>`` in the same category (cached)."""
        key = "derived:" + name
        node = self._children.get(key)
        return node if node is not None else self._child(key, f"{self.name}.{name}")

    def init(self, fn: Optional[F] = None, **kwargs: Any) -> Any:
        """Decorator/context manager for ``<self.name>.init`` (e.g. ``@ai.data.item.init``)."""
        node = self._children.get("init") or self._child("init", f"{self.name}.init")
        return node(fn, **kwargs)

    # -- decorator ----------------------------------------------------------
    def __call__(
        self,
        fn: Optional[F] = None,
        *,
        enable: Optional[bool] = None,
        epoch: Optional[int] = None,
        step: Optional[int] = None,
        image_idx: Optional[int] = None,
        image_size: Optional[Number] = None,
        args: Optional[Dict[str, Any]] = None,
    ) -> Any:
        """``@node``, ``@node(args=...)`` or ``with node(step=3):``.

        With arguments, returns a variant of this node that writes them too; the
        node itself is not changed, and disabling the node disables the variant."""
        target: DFTracerAI = self
        if not (enable is None and epoch is None and step is None and image_idx is None
                and image_size is None and args is None):
            target = DFTracerAI(self.cat, self.name, enable=enable is not False)
            target._parent = self
            target.update(epoch=epoch, step=step, image_idx=image_idx, image_size=image_size,
                          args=args)
        if fn is None:
            return target
        return dft_fn.log(target, fn, name=target.name)

    # -- loops and hooks ----------------------------------------------------
    def iter(
        self,
        iterator: Iterable[Any],
        *,
        include_block: bool = True,
        include_iter: bool = True,
        iter_name: Optional[str] = None,
        block_name: Optional[str] = None,
    ) -> Iterator[Any]:
        """Yields the items, writing ``<name>.iter`` (waiting for an item) and
        ``<name>.block`` (the loop body) events with a 1-based ``count``."""
        return self._loop(
            iterator,
            (iter_name or f"{self.name}.iter") if include_iter else None,
            (block_name or f"{self.name}.block") if include_block else None,
            "count",
        )

    def start(self, metadata: bool = False) -> None:
        """Opens this node's event (closed by ``stop``); with metadata=True writes
        a ``<name>.start`` CM event holding the time instead."""
        if metadata:
            self.log_metadata(f"{self.name}.start", str(get_time()))
        else:
            self.__enter__()

    def stop(self, metadata: bool = False) -> None:
        """Closes the innermost ``start()``/``with`` of this node on this thread."""
        if metadata:
            self.log_metadata(f"{self.name}.end", str(get_time()))
        else:
            self._stop()

    # -- state ----------------------------------------------------------------
    def update(
        self,
        epoch: Optional[int] = None,
        step: Optional[int] = None,
        image_idx: Optional[int] = None,
        image_size: Optional[Number] = None,
        args: Optional[Dict[str, Any]] = None,
    ) -> "DFTracerAI":
        """Sets values written with later events of this node and its subtree."""
        dft_fn.update(self, epoch, step, image_idx, image_size, args)
        for child in self._children.values():
            child.update(epoch, step, image_idx, image_size, args)
        return self

    def _set_enabled(self, on: bool) -> None:
        self.enabled = on
        for child in self._children.values():
            child._set_enabled(on)

    def enable(self) -> None:
        """Enables this node and its subtree."""
        self._set_enabled(True)

    def disable(self) -> None:
        """Disables this node and its subtree (decorated calls then cost ~nothing)."""
        self._set_enabled(False)

    @property
    def profiler(self) -> "DFTracerAI":
        """pydftracer kept a separate dft_fn here; the node is its own."""
        return self


def _category(cat: str, **children: str) -> DFTracerAI:
    node = DFTracerAI(cat)
    node._add(**children)
    return node


def _io(parent: DFTracerAI, name: str) -> DFTracerAI:
    io = parent._child("io", name)
    io._add(open=f"{name}.open", read=f"{name}.read", write=f"{name}.write",
            close=f"{name}.close")
    parent.io = io  # type: ignore[attr-defined]
    return io


class AI(DFTracerAI):
    """The root (``ai_root``); its children are the categories."""

    def __init__(self) -> None:
        super().__init__("ai_root", "ai_root")
        self.compute = self._child("compute", "compute", _category(
            "compute", forward="forward", backward="backward", step="step"))
        self.data = self._child("data", "data", _category(
            "data", preprocess="preprocess", item="item"))
        _io(self.data, "data.io")
        self.dataloader = self._child("dataloader", "dataloader", _category(
            "dataloader", fetch="fetch"))
        comm_ops = ("send", "receive", "barrier", "bcast", "reduce", "all_reduce", "gather",
                    "all_gather", "scatter", "reduce_scatter", "all_to_all")
        self.comm = self._child("comm", "comm", _category(
            "comm", **{op: op for op in comm_ops}))
        self.device = self._child("device", "device", _category("device", transfer="transfer"))
        self.checkpoint = self._child("checkpoint", "checkpoint", _category(
            "checkpoint", capture="capture", restart="restart"))
        _io(self.checkpoint, "checkpoint.io")
        self.pipeline = self._child("pipeline", "pipeline", _category(
            "pipeline", epoch="epoch", train="train", evaluate="evaluate", test="test"))
        self.other = self._child("other", "other", _category("other", log="other.log"))
        _io(self.other, "other.io")


ai = AI()
comm = ai.comm
compute = ai.compute
data = ai.data
dataloader = ai.dataloader
device = ai.device
checkpoint = ai.checkpoint
pipeline = ai.pipeline
