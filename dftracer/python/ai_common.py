"""The AI/ML event tree of pydftracer (its ``dftracer.python.ai_common``): the
node class :class:`DFTracerAI`, one class per category, their event enums and
the naming constants.  The tree instance ``ai`` is in :mod:`dftracer.python.ai_init`.

Every node is a :class:`dftracer._core.dft_fn` (the calls, ``with`` blocks and
loops run in C) with a category and an event name, e.g. ``ai.compute.forward``
writes events named ``forward`` in category ``compute``.  A node is a decorator
(``@ai.data.item``, ``@ai.compute.forward(args={...})``), a context manager, a
loop wrapper (``.iter``), a hook pair (``.start()``/``.stop()``); ``update``,
``enable`` and ``disable`` apply to its whole subtree.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, TypeVar, Union

from dftracer.python.common import dft_fn as _dft_fn
from dftracer._core import get_time as _get_time
from dftracer.python.common import *  # noqa: F401,F403
from dftracer.python.common import __all__ as _COMMON

if sys.version_info >= (3, 11):
    from enum import StrEnum as StringEnum
    from enum import auto
else:
    from enum import Enum, auto

    class StringEnum(str, Enum):
        """A str enum whose auto() values are the lower-cased member names."""

        def __new__(cls, value: Any, *args: Any, **kwargs: Any) -> "StringEnum":
            if not isinstance(value, str):
                raise TypeError(f"Values of StrEnums must be strings: {value!r} is a {type(value)}")
            return super().__new__(cls, value, *args, **kwargs)

        def __str__(self) -> str:
            return str(self.value)

        @staticmethod
        def _generate_next_value_(name: str, start: int, count: int, last_values: List[Any]) -> str:
            return name.lower()


__all__ = [
    *_COMMON,
    "AI", "BLOCK_NAME", "CTX_SEPARATOR", "Checkpoint", "CheckpointEvent", "Communication",
    "CommunicationEvent", "Compute", "ComputeEvent", "DFTracerAI", "Data", "DataEvent",
    "DataLoader", "DataLoaderEvent", "Device", "DeviceEvent", "INIT_NAME", "IO", "IOEvent",
    "ITER_COUNT_NAME", "ITER_NAME", "Other", "OtherEvent", "Pipeline", "PipelineEvent",
    "ProfileCategory", "ROOT_CAT", "ROOT_NAME", "START_METADATA_NAME", "STOP_METADATA_NAME",
    "StringEnum", "get_iter_block_name", "get_iter_handle_name",
]

F = TypeVar("F", bound=Callable[..., Any])
Number = Union[int, float]

ITER_COUNT_NAME = "count"
INIT_NAME = "init"
BLOCK_NAME = "block"
ITER_NAME = "iter"
CTX_SEPARATOR = "."
ROOT_NAME = "ai_root"
ROOT_CAT = "ai_root"
START_METADATA_NAME = "start"
STOP_METADATA_NAME = "end"


def get_iter_block_name(name: str) -> str:
    """``<name>.block`` (unchanged if it already ends so)."""
    suffix = CTX_SEPARATOR + BLOCK_NAME
    return name if name.endswith(suffix) else name + suffix


def get_iter_handle_name(name: str) -> str:
    """``<name>.iter`` (unchanged if it already ends so)."""
    suffix = CTX_SEPARATOR + ITER_NAME
    return name if name.endswith(suffix) else name + suffix


# ---- categories and events ---------------------------------------------------


class ProfileCategory(StringEnum):
    COMPUTE = auto()
    DATA = auto()
    DATALOADER = auto()
    COMM = auto()
    DEVICE = auto()
    CHECKPOINT = auto()
    PIPELINE = auto()
    OTHER = auto()


class ComputeEvent(StringEnum):
    FORWARD = auto()
    BACKWARD = auto()
    STEP = auto()


class DataEvent(StringEnum):
    PREPROCESS = auto()
    ITEM = auto()


class DataLoaderEvent(StringEnum):
    FETCH = auto()


class CommunicationEvent(StringEnum):
    SEND = auto()
    RECEIVE = auto()
    BARRIER = auto()
    BCAST = auto()
    REDUCE = auto()
    ALL_REDUCE = auto()
    GATHER = auto()
    ALL_GATHER = auto()
    SCATTER = auto()
    REDUCE_SCATTER = auto()
    ALL_TO_ALL = auto()


class DeviceEvent(StringEnum):
    TRANSFER = auto()


class PipelineEvent(StringEnum):
    EPOCH = auto()
    TRAIN = auto()
    EVALUATE = auto()
    TEST = auto()


class CheckpointEvent(StringEnum):
    CAPTURE = auto()
    RESTART = auto()


class OtherEvent(StringEnum):
    LOG = auto()


class IOEvent(StringEnum):
    OPEN = auto()
    READ = auto()
    WRITE = auto()
    CLOSE = auto()


# ---- the node --------------------------------------------------------------------


class DFTracerAI(_dft_fn):
    """One node of the tree: events named ``name`` (``cat`` when empty) in
    category ``cat``."""

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
        super().__init__(str(cat), str(name) if name else str(cat), epoch, step, image_idx,
                         image_size, enable)
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

    def create_children(self, names: Dict[str, str]) -> None:
        """Adds a child node per ``attribute: event name``, in this category."""
        for attr, name in names.items():
            setattr(self, attr, self._child(attr, str(name)))

    def derive(self, name: str) -> "DFTracerAI":
        """The child ``<self.name>.<name>`` in the same category (cached)."""
        key = "derived:" + name
        node = self._children.get(key)
        return node if node is not None else self._child(key, f"{self.name}{CTX_SEPARATOR}{name}")

    def init(
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
        """Decorator/context manager for ``<self.name>.init`` (e.g. ``@ai.data.item.init``)."""
        node = self._children.get(INIT_NAME) or self._child(
            INIT_NAME, f"{self.name}{CTX_SEPARATOR}{INIT_NAME}")
        return node(fn, enable=enable, epoch=epoch, step=step, image_idx=image_idx,
                    image_size=image_size, args=args)

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
        return _dft_fn.log(target, fn, name=target.name)

    # -- loops and hooks ----------------------------------------------------
    def iter(  # type: ignore[override]
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
            (iter_name or get_iter_handle_name(self.name)) if include_iter else None,
            (block_name or get_iter_block_name(self.name)) if include_block else None,
            ITER_COUNT_NAME,
        )

    def get_time(self) -> int:
        """The tracer clock (microseconds since the Unix epoch)."""
        return _get_time()

    def start(self, metadata: bool = False) -> None:
        """Opens this node's event (closed by ``stop``); with metadata=True writes
        a ``<name>.start`` CM event holding the time instead."""
        if metadata:
            self.log_metadata(f"{self.name}{CTX_SEPARATOR}{START_METADATA_NAME}",
                              str(_get_time()))
        else:
            self.__enter__()

    def stop(self, metadata: bool = False) -> None:
        """Closes the innermost ``start()``/``with`` of this node on this thread."""
        if metadata:
            self.log_metadata(f"{self.name}{CTX_SEPARATOR}{STOP_METADATA_NAME}",
                              str(_get_time()))
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
        _dft_fn.update(self, epoch, step, image_idx, image_size, args)
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


# ---- the category classes ------------------------------------------------------


class _Category(DFTracerAI):
    """A category node: ``cat`` and ``name`` are the category's name."""

    CATEGORY: str = ""
    EVENTS: Dict[str, str] = {}

    def __init__(self, epoch: Optional[int] = None, step: Optional[int] = None,
                 image_idx: Optional[int] = None, image_size: Optional[Number] = None,
                 enable: bool = True) -> None:
        super().__init__(self.CATEGORY, self.CATEGORY, epoch=epoch, step=step,
                         image_idx=image_idx, image_size=image_size, enable=enable)
        self.create_children(self.EVENTS)

    def _add_io(self) -> "IO":
        io = IO(cat=self.cat, parent_name=self.name, enable=self.enabled, **self._values)
        self.io = self._child("io", io.name, io)
        return io


class IO(DFTracerAI):
    """``<parent>.io`` with children ``open``, ``read``, ``write``, ``close``
    (``data.io``, ``checkpoint.io``, ``other.io``)."""

    open: DFTracerAI
    read: DFTracerAI
    write: DFTracerAI
    close: DFTracerAI

    def __init__(self, *, cat: str, parent_name: str, epoch: Optional[int] = None,
                 step: Optional[int] = None, image_idx: Optional[int] = None,
                 image_size: Optional[Number] = None, enable: bool = True) -> None:
        name = f"{parent_name}{CTX_SEPARATOR}io"
        super().__init__(cat, name, epoch=epoch, step=step, image_idx=image_idx,
                         image_size=image_size, enable=enable)
        self.create_children({e.value: f"{name}{CTX_SEPARATOR}{e.value}" for e in IOEvent})


class Compute(_Category):
    CATEGORY = ProfileCategory.COMPUTE.value
    EVENTS = {e.value: e.value for e in ComputeEvent}
    forward: DFTracerAI
    backward: DFTracerAI
    step: DFTracerAI


class Data(_Category):
    CATEGORY = ProfileCategory.DATA.value
    EVENTS = {e.value: e.value for e in DataEvent}
    preprocess: DFTracerAI
    item: DFTracerAI
    io: IO

    def __init__(self, epoch: Optional[int] = None, step: Optional[int] = None,
                 image_idx: Optional[int] = None, image_size: Optional[Number] = None,
                 enable: bool = True) -> None:
        super().__init__(epoch, step, image_idx, image_size, enable)
        self._add_io()


class DataLoader(_Category):
    CATEGORY = ProfileCategory.DATALOADER.value
    EVENTS = {e.value: e.value for e in DataLoaderEvent}
    fetch: DFTracerAI


class Communication(_Category):
    CATEGORY = ProfileCategory.COMM.value
    EVENTS = {e.value: e.value for e in CommunicationEvent}
    send: DFTracerAI
    receive: DFTracerAI
    barrier: DFTracerAI
    bcast: DFTracerAI
    reduce: DFTracerAI
    all_reduce: DFTracerAI
    gather: DFTracerAI
    all_gather: DFTracerAI
    scatter: DFTracerAI
    reduce_scatter: DFTracerAI
    all_to_all: DFTracerAI


class Device(_Category):
    CATEGORY = ProfileCategory.DEVICE.value
    EVENTS = {e.value: e.value for e in DeviceEvent}
    transfer: DFTracerAI


class Checkpoint(_Category):
    CATEGORY = ProfileCategory.CHECKPOINT.value
    EVENTS = {e.value: e.value for e in CheckpointEvent}
    capture: DFTracerAI
    restart: DFTracerAI
    io: IO

    def __init__(self, epoch: Optional[int] = None, step: Optional[int] = None,
                 image_idx: Optional[int] = None, image_size: Optional[Number] = None,
                 enable: bool = True) -> None:
        super().__init__(epoch, step, image_idx, image_size, enable)
        self._add_io()


class Pipeline(_Category):
    CATEGORY = ProfileCategory.PIPELINE.value
    EVENTS = {e.value: e.value for e in PipelineEvent}
    epoch: DFTracerAI
    train: DFTracerAI
    evaluate: DFTracerAI
    test: DFTracerAI


class Other(_Category):
    CATEGORY = ProfileCategory.OTHER.value
    EVENTS = {e.value: f"{ProfileCategory.OTHER.value}{CTX_SEPARATOR}{e.value}"
              for e in OtherEvent}
    log: DFTracerAI
    io: IO

    def __init__(self, epoch: Optional[int] = None, step: Optional[int] = None,
                 image_idx: Optional[int] = None, image_size: Optional[Number] = None,
                 enable: bool = True) -> None:
        super().__init__(epoch, step, image_idx, image_size, enable)
        self._add_io()


class AI(DFTracerAI):
    """The root (``ai_root``); its children are the categories."""

    compute: Compute
    data: Data
    dataloader: DataLoader
    comm: Communication
    device: Device
    checkpoint: Checkpoint
    pipeline: Pipeline
    other: Other

    def __init__(self, epoch: Optional[int] = None, step: Optional[int] = None,
                 image_idx: Optional[int] = None, image_size: Optional[Number] = None,
                 enable: bool = True) -> None:
        super().__init__(ROOT_CAT, ROOT_NAME, epoch=epoch, step=step, image_idx=image_idx,
                         image_size=image_size, enable=enable)
        values = dict(epoch=epoch, step=step, image_idx=image_idx, image_size=image_size,
                      enable=enable)
        for attr, cls in (("compute", Compute), ("data", Data), ("dataloader", DataLoader),
                          ("comm", Communication), ("device", Device),
                          ("checkpoint", Checkpoint), ("pipeline", Pipeline), ("other", Other)):
            setattr(self, attr, self._child(attr, cls.CATEGORY, cls(**values)))
