"""pydftracer's ``dftracer.python.common``: the logger class, ``dft_fn``, tags,
entities and helpers, on the native core.

``dftracer`` here is a thin facade over the native logger (``_core.logger``):
the calls made per event (``get_time``, ``enter_event``, ``exit_event``,
``log_event``, ``log_metadata_event``) are the native methods themselves,
bound on the instance, so no Python frame runs between the caller and C.
``dft_fn`` is the native ``_core.dft_fn`` (decorators, loops and ``with``
blocks run in C) plus pydftracer's entity methods.
"""

from __future__ import annotations

import logging
import os
import sys
from enum import Enum, IntEnum
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple, TypeVar, Union

from dftracer import _core
from dftracer.python import env as _env
from dftracer.python.env import (
    DFTRACER_ENABLE,
    DFTRACER_ENABLE_ENV,
    DFTRACER_INIT_ENV,
    DFTRACER_INIT_PRELOAD,
    DFTRACER_LOG_LEVEL,
    DFTRACER_LOG_LEVEL_ENV,
    DFTRACER_TIME_METRIC_ENV,
    setup_stream_logger,
)

try:
    from typing import ParamSpec
except ImportError:  # Python < 3.10
    from typing_extensions import ParamSpec  # type: ignore[assignment]

__all__ = [
    *_env.__all__,
    "EntityID",
    "EntityRelation",
    "EntityRole",
    "EntityStore",
    "NoOpProfiler",
    "P",
    "ProfilerProtocol",
    "R",
    "TagDType",
    "TagType",
    "TagValue",
    "TagValueTuple",
    "capture_signal",
    "dft_fn",
    "dftracer",
    "get_default_args",
    "get_time_scale",
    "profiler",
    "setup_logger",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

TagValueTuple = Tuple[int, Union[int, float, str]]

# ---- tags ------------------------------------------------------------------


class TagType(Enum):
    KEY = 0
    VALUE = 1
    IGNORE = 2

    def __int__(self) -> int:
        return int(self.value)


class TagDType(Enum):
    INT = 0
    FLOAT = 1
    STRING = 2

    def __int__(self) -> int:
        return int(self.value)


class TagValue:
    """A value converted to its dtype; ``value()`` is the ``(tag, value)`` pair
    that ``log_event``'s ``int_args``/``float_args``/``string_args`` take."""

    def __init__(self, value: Any, dtype: TagDType = TagDType.STRING,
                 tag_type: TagType = TagType.KEY) -> None:
        self._dtype = dtype
        self._tag_type = tag_type
        self._value: Union[int, float, str]
        if dtype == TagDType.INT:
            self._value = int(value)
        elif dtype == TagDType.FLOAT:
            self._value = float(value)
        else:
            self._value = str(value)

    def value(self) -> TagValueTuple:
        return (int(self._tag_type), self._value)


# ---- entities (pydftracer's provenance API) ----------------------------------
# The native core records no entities: declare_entity returns 0 ("no entity"),
# and relations to entity 0 are dropped -- what pydftracer 2.0.6 does over the
# dftracer 2.2.0 native library, which predates entities.


class EntityStore(IntEnum):
    MEMORY = 0
    GPU_MEMORY = 1
    LOCAL_DISK = 2
    PARALLEL_FS = 3
    BURST_BUFFER = 4
    OBJECT_STORE = 5
    DATABASE = 6
    NETWORK = 7
    OTHER = 8


class EntityRole(IntEnum):
    UNKNOWN = 0
    INPUT = 1
    OUTPUT = 2
    INTERMEDIATE = 3
    PARAMETER = 4
    REFERENCE = 5


class EntityRelation(IntEnum):
    """Event->entity relations (< 16) and entity->entity relations (>= 16)."""

    USED = 0
    GENERATED = 1
    INVALIDATED = 2
    UPDATED = 3
    DERIVED_FROM = 16
    REVISION_OF = 17
    CONTAINS = 18
    PART_OF = 19
    SPECIALIZATION_OF = 20
    ALTERNATE_OF = 21
    DEPENDS_ON = 22


EntityID = int

# ---- the profiler protocol ----------------------------------------------------


class ProfilerProtocol(Protocol):
    """What a native profiler module provides (``dftracer.dftracer`` does)."""

    def initialize(self, log_file: Optional[str] = None, data_dirs: Optional[str] = None,
                   process_id: int = -1) -> None: ...
    def get_time(self) -> int: ...
    def get_config(self, key: str) -> str: ...
    def enter_event(self) -> None: ...
    def exit_event(self) -> None: ...
    def log_event(self, name: str, cat: str, start_time: int, duration: int,
                  int_args: Optional[Dict[str, TagValueTuple]] = None,
                  string_args: Optional[Dict[str, TagValueTuple]] = None,
                  float_args: Optional[Dict[str, TagValueTuple]] = None,
                  relations: Optional[Dict[Any, List[int]]] = None) -> None: ...
    def log_metadata_event(self, key: str, value: str) -> None: ...
    def declare_entity(self, type: str, key: str, store: Any, uri: str) -> EntityID: ...
    def declare_entity_type(self, type: str, role: Any, description: str) -> None: ...
    def relate_entities(self, relation: Any, subject: EntityID, object: EntityID) -> None: ...
    def set_app_metadata_int(self, key: str, value: int) -> None: ...
    def set_app_metadata_string(self, key: str, value: str) -> None: ...
    def mark_used(self, name: str) -> None: ...
    def finalize(self) -> None: ...


class NoOpProfiler:
    """A profiler that does nothing (``profiler`` until tracing is enabled)."""

    def initialize(self, log_file: Optional[str] = None, data_dirs: Optional[str] = None,
                   process_id: int = -1) -> None:
        pass

    def get_time(self) -> int:
        return 0

    def get_config(self, key: str) -> str:
        return ""

    def enter_event(self) -> None:
        pass

    def exit_event(self) -> None:
        pass

    def log_event(self, name: str, cat: str, start_time: int, duration: int,
                  int_args: Optional[Dict[str, TagValueTuple]] = None,
                  string_args: Optional[Dict[str, TagValueTuple]] = None,
                  float_args: Optional[Dict[str, TagValueTuple]] = None,
                  relations: Optional[Dict[Any, List[int]]] = None) -> None:
        pass

    def log_metadata_event(self, key: str, value: str) -> None:
        pass

    def declare_entity(self, type: str, key: str, store: Any, uri: str) -> EntityID:
        return 0

    def declare_entity_type(self, type: str, role: Any, description: str) -> None:
        pass

    def relate_entities(self, relation: Any, subject: EntityID, object: EntityID) -> None:
        pass

    def set_app_metadata_int(self, key: str, value: int) -> None:
        pass

    def set_app_metadata_string(self, key: str, value: str) -> None:
        pass

    def mark_used(self, name: str) -> None:
        pass

    def finalize(self) -> None:
        pass


# Set to the native module dftracer.dftracer by dftracer.python.logger when
# DFTRACER_ENABLE is on, as in pydftracer.
profiler: ProfilerProtocol = NoOpProfiler()

# ---- helpers ------------------------------------------------------------------


def get_time_scale() -> float:
    """Units per second of the trace's timestamps: always 1e6, every ``ts`` and
    ``dur`` is in microseconds (docs/trace-format.md)."""
    return 1e6


def capture_signal(signal_number: int, frame: Any) -> None:
    """A signal handler that finalizes the trace and exits with the signal
    number.  Not installed by dftracer: set ``DFTRACER_BIND_SIGNALS=1`` instead,
    which also keeps the program's own handlers (docs/configuration.md)."""
    _core.finalize()
    sys.exit(signal_number)


def setup_logger(name: str, log_file: str, formatter: str,
                 level: int = logging.INFO) -> logging.Logger:
    """The logger ``name`` writing to the file ``log_file`` with ``formatter``."""
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter(formatter))
    logger = logging.getLogger(name)
    logger.setLevel(level)
    logger.addHandler(handler)
    return logger


def get_default_args(func: Callable[..., Any]) -> Dict[str, Any]:
    """The parameters of ``func`` that have defaults, with their defaults."""
    import inspect  # only here: importing it costs milliseconds

    return {k: p.default for k, p in inspect.signature(func).parameters.items()
            if p.default is not inspect.Parameter.empty}


# ---- the logger -----------------------------------------------------------------


class dftracer:
    """pydftracer's process-wide logger: ``dftracer.initialize_log(...)`` or
    ``dftracer.get_instance()``.  Every instance writes through the one native
    logger; the per-event methods are the native methods themselves."""

    __instance: Optional["dftracer"] = None

    def __init__(self) -> None:
        core = _core.logger
        self.logger: Optional[ProfilerProtocol] = None
        self.dbg_logging: Optional[logging.Logger] = None
        self.start_time: int = 0
        self._used_marks: set = set()
        # The hot calls go straight to C: no Python frame in between.  (Plain
        # assignments keep the instance's compact attribute layout.)
        self.get_time = core.get_time  # type: ignore[method-assign]
        self.enter_event = core.enter_event  # type: ignore[method-assign]
        self.exit_event = core.exit_event  # type: ignore[method-assign]
        self.log_event = core.log_event  # type: ignore[method-assign]
        self.log_metadata_event = core.log_metadata_event  # type: ignore[method-assign]
        self.flush = core.flush  # type: ignore[method-assign]
        self.finalize = core.finalize  # type: ignore[method-assign]
        dftracer.__instance = self

    # The per-event methods, for the class's documentation and for calls
    # through the class; each instance binds the native methods over them.
    def get_time(self) -> int:
        """Microseconds since the Unix epoch on the tracer clock."""
        return _core.get_time()

    def enter_event(self) -> None:
        """Opens a nesting scope on this thread."""
        _core.logger.enter_event()

    def exit_event(self) -> None:
        """Closes the innermost scope opened by enter_event() on this thread."""
        _core.logger.exit_event()

    def log_event(self, name: str, cat: str, start_time: int, duration: int,
                  int_args: Optional[Dict[str, TagValueTuple]] = None,
                  float_args: Optional[Dict[str, TagValueTuple]] = None,
                  string_args: Optional[Dict[str, TagValueTuple]] = None,
                  relations: Optional[Dict[EntityRelation, List[int]]] = None) -> None:
        """Records a complete event (times in microseconds)."""
        _core.logger.log_event(name, cat, start_time, duration, int_args, float_args,
                               string_args, relations)

    def log_metadata_event(self, key: str, value: str) -> None:
        """Records a CM metadata event."""
        _core.logger.log_metadata_event(key, value)

    def flush(self) -> None:
        """Writes every buffered event now."""
        _core.logger.flush()

    def finalize(self) -> None:
        """Writes everything buffered and the end event; later calls do nothing."""
        _core.logger.finalize()

    @classmethod
    def get_instance(cls) -> "dftracer":
        """The process-wide logger."""
        if dftracer.__instance is None:
            dftracer()
        assert dftracer.__instance is not None
        return dftracer.__instance

    @staticmethod
    def initialize_log(logfile: Optional[str] = None, data_dir: Optional[str] = None,
                       process_id: int = -1) -> "dftracer":
        """Starts tracing when ``DFTRACER_ENABLE`` is on (creating the log
        file's directory if it is missing, as the core does for every trace)
        and returns the logger."""
        instance = dftracer.get_instance()
        if logfile is not None and not isinstance(logfile, (str, bytes, os.PathLike)):
            raise TypeError(f"logfile must be a str or path-like, not {type(logfile).__name__}")
        _core.dftracer.initialize_log(logfile, data_dir, process_id)
        instance.dbg_logging = logging.getLogger("dftracer_dbg")
        if _core.is_active():
            import dftracer.dftracer as native

            instance.logger = native
            instance.start_time = _core.get_time()
            instance.mark_used("python_function")
            from dftracer import _rank_hook

            _rank_hook.install()
        return instance

    @property
    def active(self) -> bool:
        """True while events are being recorded."""
        return _core.is_active()

    @property
    def trace_path(self) -> Optional[str]:
        """The trace file, or None."""
        return _core.logger.trace_path

    def get_config(self, key: str) -> str:
        """The value of the ``DFTRACER_*`` setting ``key`` while tracing, else ""."""
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, not {type(key).__name__}")
        if not _core.is_active():
            return ""
        if key == DFTRACER_TIME_METRIC_ENV:
            return "US"
        if key == DFTRACER_ENABLE_ENV:
            return "1"
        return os.environ.get(key, "")

    def mark_used(self, name: str) -> None:
        """Notes that an integration was used (kept in this process only)."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        if _core.is_active():
            self._used_marks.add(name)

    def set_app_metadata_int(self, key: str, value: int) -> None:
        """Writes ``key`` = ``value`` as a ``CM`` metadata event."""
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"value must be an int, not {type(value).__name__}")
        _core.logger.log_metadata_event(key, str(value))

    def set_app_metadata_string(self, key: str, value: str) -> None:
        """Writes ``key`` = ``value`` as a ``CM`` metadata event."""
        _core.logger.log_metadata_event(key, value)

    def declare_entity(self, type: str, key: Any, store: EntityStore = EntityStore.MEMORY,
                       uri: str = "") -> EntityID:
        """Returns 0: the core records no entities."""
        return 0

    def declare_entity_type(self, type: str, role: EntityRole = EntityRole.UNKNOWN,
                            description: str = "") -> None:
        """Does nothing: the core records no entities."""

    def relate_entities(self, relation: EntityRelation, subject: EntityID,
                        object: EntityID) -> None:
        """Does nothing: the core records no entities."""


# ---- dft_fn ---------------------------------------------------------------------


class dft_fn(_core.dft_fn):
    """Events of one category: ``@dft_fn(cat).log``, ``.log_init``,
    ``.log_static``, ``.iter(...)``, ``with dft_fn(cat, name):``.  All of it
    runs in the native core."""

    __slots__ = ()

    def relate(self, relation: EntityRelation, entity: EntityID) -> "dft_fn":
        """Relates this event to an entity; entities are not recorded."""
        return self

    def relate_entity(self, relation: EntityRelation, type: str, key: Any,
                      store: EntityStore = EntityStore.MEMORY, uri: str = "") -> EntityID:
        """Declares (type, key) and relates it: returns 0, nothing is recorded."""
        return 0

    def uses(self, type: str, key: Any, store: EntityStore = EntityStore.MEMORY,
             uri: str = "") -> EntityID:
        return self.relate_entity(EntityRelation.USED, type, key, store, uri)

    def generates(self, type: str, key: Any, store: EntityStore = EntityStore.MEMORY,
                  uri: str = "") -> EntityID:
        return self.relate_entity(EntityRelation.GENERATED, type, key, store, uri)
