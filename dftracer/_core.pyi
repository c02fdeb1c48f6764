"""Type stubs for dftracer._core, the native extension."""

from os import PathLike
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, TypeVar, Union, overload

_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T")
_Number = Union[int, float]
_Path = Union[str, bytes, PathLike]

__version__: str

_IntValue = Union[int, Tuple[int, int]]
_FloatValue = Union[float, int, Tuple[int, Union[float, int]]]
_StrValue = Union[str, Tuple[int, str]]

class dftracer:
    """The process-wide trace logger."""

    @property
    def active(self) -> bool: ...
    @property
    def trace_path(self) -> Optional[str]: ...
    @classmethod
    def get_instance(cls) -> "dftracer": ...
    @staticmethod
    def initialize_log(
        logfile: Optional[str] = None, data_dir: Optional[str] = None, process_id: int = -1
    ) -> "dftracer": ...
    def get_time(self) -> int: ...
    def enter_event(self) -> None: ...
    def exit_event(self) -> None: ...
    def log_event(
        self,
        name: str,
        cat: str,
        start_time: int,
        duration: int,
        int_args: Optional[Mapping[str, _IntValue]] = None,
        float_args: Optional[Mapping[str, _FloatValue]] = None,
        string_args: Optional[Mapping[str, _StrValue]] = None,
        relations: Optional[Dict[Any, List[int]]] = None,
    ) -> None: ...
    def log_metadata_event(self, key: str, value: str) -> None: ...
    def flush(self) -> None: ...
    def finalize(self) -> None: ...

logger: dftracer

def get_time() -> int: ...
def finalize() -> None: ...
def is_active() -> bool: ...
def _clock_info() -> Dict[str, Any]: ...
# open spans and stacks on request (docs/hang.md)
def _span_open(name: str, cat: str, ts: int, group: Optional[str] = None, seq: int = -1, /) -> int: ...
def _span_close(token: int, /) -> None: ...
_STACKS_SIGNAL: int
_STACKS: int  # 1: this interpreter lets the flusher read its stacks (docs/hang.md)
def _record_rank(rank: int, world_size: int = -1, local_rank: int = -1,
                 job_id: Optional[str] = None, source: str = "torch.distributed") -> None:
    """Writes a `rank` metadata event (a rank learnt after start-up)."""

def _record_worker(id: int, num_workers: int = -1) -> None:
    """Writes a `worker` metadata event (a DataLoader worker's id)."""

# I/O tracing (src/io/module.c)
def io_calls() -> List[Tuple[str, str, bool]]:
    """(name, cat, defined) for every libc function whose calls on traced files
    are recorded (docs/io-tracing.md); defined: this process's libc has it."""
    ...
def _io_installed() -> Dict[str, Union[bool, int]]: ...
def _io_got_slots(name: str) -> List[Tuple[str, int, int]]: ...
def _io_wrapper(name: str) -> Optional[int]: ...
def _io_traced_path(path: Union[str, bytes]) -> Optional[str]: ...

# ---- decorators (src/profile/) ------------------------------------------------

class dft_fn:
    """Events of one category: decorators, loops and a context manager."""

    cat: str
    name: str
    _cat: str
    _name: str
    enabled: bool
    _enable: bool
    _parent: Optional["dft_fn"]
    @property
    def _values(self) -> Dict[str, Optional[_Number]]: ...
    @property
    def args(self) -> Dict[str, Union[int, float, str]]: ...
    def __init__(self, cat: str, name: Optional[str] = None, epoch: Optional[int] = None,
                 step: Optional[int] = None, image_idx: Optional[int] = None,
                 image_size: Optional[_Number] = None, enable: bool = True) -> None: ...
    @overload
    def log(self, func: _F) -> _F: ...
    @overload
    def log(self, func: None = None, *, name: Optional[str] = None) -> Callable[[_F], _F]: ...
    @overload
    def log_init(self, func: _F) -> _F: ...
    @overload
    def log_init(self, func: None = None, *, name: Optional[str] = None) -> Callable[[_F], _F]: ...
    @overload
    def log_static(self, func: _F) -> _F: ...
    @overload
    def log_static(self, func: None = None, *, name: Optional[str] = None) -> Callable[[_F], _F]: ...
    def iter(self, func: Iterable[_T], name: str = "loop", iter_name: str = "step") -> Iterator[_T]: ...
    def _loop(self, iterable: Iterable[_T], iter_event: Optional[str], block_event: Optional[str],
              counter_key: str) -> Iterator[_T]: ...
    def update(self, epoch: Optional[int] = None, step: Optional[int] = None,
               image_idx: Optional[int] = None, image_size: Optional[_Number] = None,
               args: Optional[Dict[str, Any]] = None) -> "dft_fn": ...
    def flush(self) -> "dft_fn": ...
    def reset(self) -> "dft_fn": ...
    def log_metadata(self, key: str, value: Any) -> None: ...
    def __enter__(self: _T) -> _T: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...
    def _stop(self) -> None: ...

# ---- trace readers (src/reader/; used by the dftracer command line) ----

_HIST_BINS: int

def _summarize_file(path: _Path) -> Dict[str, Any]:
    """Aggregates one trace: status, counts, host/pid/rank/process_name,
    ts_min/end_max, and groups: (cat, name, pid, tid, count, total_us, min_us,
    max_us, io_bytes, io_events, {histogram bin: count})."""

def _validate_file(path: _Path) -> Dict[str, Any]:
    """Checks one trace against docs/trace-format.md: status, events, members,
    finalized, header, problem_count, problems (the first 20)."""

def _rewrite_file(path: _Path, part: _Path, fmt: str, old_pid: int, new_pid: int,
                  nfiles: int, index: int, ts_offset: int = 0) -> Dict[str, Any]:
    """Writes one trace's events, hashes resolved, as gzip members into part
    (fmt "pfw" or "chrome"), every ts moved by ts_offset microseconds."""

_RANK_CLASSES: Tuple[str, ...]
# reader/classify.c: the one definition of event classes, step kinds, I/O direction
_CLASSES: Tuple[str, ...]
_STEP_KINDS: Tuple[Optional[str], ...]
_CLS_CONTAINER: int
_CLS_TRACER: int
_IO_READ: int
_IO_WRITE: int
_IO_BYTES: int
_IO_ITEMS: int
_IO_CHAR: int
_IO_STRING: int
def _classify(cat: str, name: str) -> Tuple[int, int, int, int]:
    """(index in _CLASSES, _CLS_* flags, index in _STEP_KINDS, _IO_* flags)."""
_RANK_STEP_FIELDS: int
_RANK_SYNC_MAX: int

def _rank_file(path: _Path, step: Optional[str] = None, sync_only: bool = False) -> Dict[str, Any]:
    """One trace as one rank of a job: identity (host, pid, ppid, rank, ...),
    steps (bytes of int64, _RANK_STEP_FIELDS per step), keys (cat, name,
    class, count, total_us, self_us, self_in_steps_us, io_bytes), sync points
    (bytes of int64 pairs: key, end) and clock (pairs, first, min, max)."""
_IO_COUNTERS: Tuple[str, ...]
def _io_file(path: _Path, epoch_from: Optional[str] = None,
             bounds: Optional[bytes] = None) -> Dict[str, Any]: ...

class _LineReader:
    """Batches of lines (bytes, without newline) of a plain or gzip trace."""

    status: str
    message: str
    members: int
    def __init__(self, path: _Path) -> None: ...
    def __iter__(self) -> Iterator[List[bytes]]: ...
    def __next__(self) -> List[bytes]: ...

class _EventReader:
    """Batches of (cat, name, pid, tid, ts, dur, io_bytes) tuples: the complete
    events of a trace file (io_bytes -1 when the event moved none)."""

    status: str
    message: str
    def __init__(self, path: _Path) -> None: ...
    def __iter__(self) -> Iterator[List[Tuple[str, str, int, int, int, int, int]]]: ...
    def __next__(self) -> List[Tuple[str, str, int, int, int, int, int]]: ...

def _sort_spans(ts: Any, dur: Any, order: Any) -> None:
    """Fills order (array('q')) with the indices of the spans (ts, dur: array('q'))
    sorted by start, longest first."""

# ---- torch.profiler (src/torch/trace_handler.c) ----

def _torch_trace_handler(prof: Any) -> int: ...

# ---- GPU activity (src/gpu/); the public API is dftracer.python.cupti ----

def _cupti_enable() -> None: ...
def _cupti_disable() -> None: ...
def _cupti_available() -> bool: ...
def _cupti_reason() -> str: ...
def _cupti_running() -> bool: ...
def _cupti_pause() -> bool: ...
def _cupti_resume() -> bool: ...

# ---- torch.compile integration (src/torch/dynamo_timing.c, src/torch/frame_hook.c) ----
# Internal: called by dftracer.python.dynamo and by the FX graphs it rewrites.

def _dyn_context_new() -> int: ...
def _dyn_context_set(
    ctx: int,
    name: Optional[str],
    epoch: Optional[int],
    step: Optional[int],
    image_idx: Optional[int],
    image_size: object,
) -> None: ...
def _dyn_op(name: str, graph: int, phase: str, ctx: int) -> int: ...
def _dyn_setup(is_grad_enabled: object) -> None: ...
def _dyn_graph(graph: int) -> None: ...
def _dyn_grad() -> None: ...
def _dyn_begin(op: int) -> int: ...
def _dyn_end(op: int, token: int) -> None: ...
def _dyn_compile_begin() -> None: ...
def _dyn_compile_end(graphs: int) -> None: ...
def _dyn_counters() -> Tuple[int, int, int, int]: ...

class _DdpHook:
    """DDP's communication hook in C (src/torch/ddp_hook.c): registered with
    torch.distributed._register_comm_hook(reducer, hook, hook); called as
    hook(state, bucket) -> Future, one comm/all_reduce event per bucket."""

    user: Optional[Tuple[object, Callable[..., object]]]
    join_work: object
    divide: bool
    @property
    def group(self) -> str: ...
    @property
    def size(self) -> int: ...
    def __init__(
        self,
        pg: object,
        group: str,
        size: int,
        opts: object,
        seq: Dict[str, int],
        divisor_fn: Callable[["_DdpHook"], int],
    ) -> None: ...
    def __call__(self, state: object, bucket: object) -> object: ...
# False on a CPython newer than FRAME_HOOK_MAX_PYTHON: the _frame_hook_*
# functions are then absent (src/torch/frame_hook.c).
FRAME_HOOK: bool
FRAME_HOOK_MAX_PYTHON: Tuple[int, int]
def _frame_hook_add(code: object, name: str, ctx: int) -> None: ...
def _frame_hook_remove(code: object) -> None: ...
def _frame_hook_ensure() -> None: ...
def _frame_hook_state() -> Tuple[bool, int, int]: ...
