"""torch.profiler conveniences: a context manager, decorators and CLI flags
that give one run a dftracer trace (PP events through trace_handler) and the
standard outputs together (docs/profiler.md).

Importing this module does not import torch; creating a profiler does.
"""

from __future__ import annotations

import functools
import inspect
import os
import shutil
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar, Union

from dftracer.python.torch import _options, _outputs
from dftracer.python.torch._options import ProfilerOptions
from dftracer.python.torch._outputs import note
from dftracer.python.torch._summary import format_summary
from dftracer.python.torch.memory import MemoryTracker

__all__ = [
    "ProfilerContext",
    "profile_function",
    "profiler",
    "step_profiler",
    "add_profiler_args",
    "create_profiler_from_args",
]

F = TypeVar("F", bound=Callable[..., Any])

# Innermost active context last; step_profiler() steps it.
_active: List["ProfilerContext"] = []
_active_lock = threading.Lock()


def _writable_dir(path: Union[str, os.PathLike]) -> Path:
    """Creates the directory when missing; OSError naming it when it cannot
    be created or written."""
    directory = Path(path).expanduser()
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"output_dir {str(directory)!r} is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"output_dir {str(directory)!r} cannot be created: {exc.strerror}") from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OSError(f"output_dir {str(directory)!r} is not writable")
    return directory


def _quietly(action: Callable[[], None]) -> None:
    with warnings.catch_warnings():
        # Each cycle is written to its own file, so torch clearing the events
        # between cycles is what we want; its warning would only confuse.
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        action()


# The parameter lists, from ProfilerOptions (docs/profiler.md "Options").
_CONTEXT_PARAMS = _options.signature(keyword_only=False)
_FUNC = inspect.Parameter("_func", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
_PROFILE_FUNCTION_PARAMS = _options.signature(keyword_only=True, leading=[_FUNC])
_PROFILER_PARAMS = _options.signature(keyword_only=True, leading=[_FUNC],
                                      defaults=_options.PROFILER_DEFAULTS)


class ProfilerContext:
    """Profiles the steps of a `with` block with torch.profiler.

    Each finished cycle of the schedule (skip_first, then wait, warmup, active
    steps, `repeat` times; repeat=0 means forever) writes, per rank:
    `{output_dir}/{profile_name}-rank{r}.trace.json.gz` (export_chrome), the
    TensorBoard file `{worker}.{ns}.pt.trace.json.gz` (tensorboard), dftracer
    PP events (through trace_handler) and, on rank 0, a console summary.
    Call `.step()` (or `step_profiler()`) at the end of each step; a block
    that never steps is profiled whole.
    """

    def __init__(self, *args: Any, **options: Any) -> None:
        # The parameters are ProfilerOptions' fields (see __signature__ below).
        self._init_from(ProfilerOptions(**_options.bind("ProfilerContext", _CONTEXT_PARAMS, args, options)))

    __init__.__signature__ = _CONTEXT_PARAMS.replace(  # type: ignore[attr-defined]
        parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                    *_CONTEXT_PARAMS.parameters.values()])

    @classmethod
    def _from_options(cls, opts: ProfilerOptions) -> "ProfilerContext":
        self = cls.__new__(cls)
        self._init_from(opts)
        return self

    def _init_from(self, opts: ProfilerOptions) -> None:
        self._opts = opts
        self.enabled = opts.enabled
        self.profile_name = opts.profile_name or f"profile_{int(time.time())}"
        self.output_dir = Path(opts.output_dir if opts.output_dir is not None else _options.default_output_dir())
        if self.enabled:
            self.output_dir = _writable_dir(self.output_dir)
        self.trace_paths: List[Path] = []
        self.tensorboard_paths: List[Path] = []
        self.memory_paths: List[Path] = []
        self._prof: Any = None
        self._running = False
        self._whole_block = False  # profiling without a schedule until the first step()
        self._discarding = False
        self._step = 0
        self._offset = 0
        self._cycles = 0
        self._on_cuda = False
        self._memory = False
        self._nvtx = False
        self._nvtx_open = False
        self._cuda_capturing = False
        self._trace_handler: Optional[Callable[[Any], None]] = None
        self.memory_tracker: Optional[MemoryTracker] = None
        self.memory: Optional[Dict[str, Any]] = None  # the tracker's figures, once it ended

    # -- public surface ---------------------------------------------------
    @property
    def trace_path(self) -> Path:
        """The first cycle's Chrome trace, `{output_dir}/{name}-rank{r}.trace.json.gz`
        (the rank is the current one until the file is written)."""
        if self.trace_paths:
            return self.trace_paths[0]
        rank, _ = _outputs.resolve_rank()
        return _outputs.trace_file(self.output_dir, self.profile_name, rank, 0)

    @property
    def step_num(self) -> int:
        return self._step

    def __enter__(self) -> "ProfilerContext":
        self._memory_begin()
        if not self.enabled:
            return self
        with _active_lock:
            if any(c._running for c in _active):
                note(f"{self.profile_name}: another profiler is already running; this one records nothing")
                return self
            _active.append(self)
        try:
            self._start()
        except BaseException:
            with _active_lock:
                _active.remove(self)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._memory_end()
        if not self._running:
            return
        try:
            self._stop()
        finally:
            with _active_lock:
                if self in _active:
                    _active.remove(self)

    def start(self) -> "ProfilerContext":
        return self.__enter__()

    def stop(self) -> None:
        self.__exit__(None, None, None)

    def step(self) -> None:
        """Marks the end of a step; the schedule decides what the next one does."""
        if not self._running:
            return
        self._step += 1
        if self._prof is not None:
            if self._whole_block:
                self._switch_to_schedule()
            else:
                _quietly(self._prof.step)
        self._nvtx_step()

    # -- memory (docs/memory.md) -------------------------------------------
    def _memory_begin(self) -> None:
        """--track-memory, or MEM among the activities: a MemoryTracker over
        the block (MEM on CPU records the resident memory this way)."""
        o = self._opts
        wanted = o.track_memory or (self.enabled and "MEM" in o.activities)
        if wanted and self.memory_tracker is None:
            self.memory = None
            self.memory_tracker = MemoryTracker(self.profile_name).start()

    def _memory_end(self) -> None:
        tracker, self.memory_tracker = self.memory_tracker, None
        if tracker is None:
            return
        try:
            self.memory = tracker.report() if self._opts.track_memory else tracker.stop()
        except Exception as exc:
            note(f"{self.profile_name}: memory tracking failed: {exc}")

    # -- schedule ---------------------------------------------------------
    def _action(self, step: int) -> Any:
        from torch.profiler import ProfilerAction

        o = self._opts
        if step < o.skip_first:
            return ProfilerAction.NONE
        step -= o.skip_first
        cycle = o.wait + o.warmup + o.active
        if o.repeat > 0 and step // cycle >= o.repeat:
            return ProfilerAction.NONE
        mod = step % cycle
        if mod < o.wait:
            return ProfilerAction.NONE
        if mod < o.wait + o.warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if mod < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    def _recording(self, step: int) -> bool:
        from torch.profiler import ProfilerAction

        return self._action(step) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)

    def _profile(self, first_step: Optional[int]) -> Any:
        """A torch.profiler.profile starting at our step `first_step` (None: no
        schedule); keyword arguments the installed torch lacks are left out."""
        import torch
        from torch.profiler import ProfilerActivity, profile

        kinds = []
        if "CPU" in self._opts.activities:
            kinds.append(ProfilerActivity.CPU)
        if self._on_cuda:
            kinds.append(ProfilerActivity.CUDA)
        kwargs: Dict[str, Any] = dict(
            activities=kinds,
            # The offset makes the new profile's first action that of step
            # `first_step`; step_num (public) then carries the count on, so the
            # ProfilerStep#N labels match the caller's steps.
            schedule=(lambda n: self._action(n + self._offset)) if first_step is not None else None,
            on_trace_ready=self._on_trace_ready,
            record_shapes=self._opts.record_shapes,
            profile_memory=self._opts.profile_memory,
            with_stack=self._opts.with_stack,
            with_flops=self._opts.with_flops,
        )
        if self._opts.with_modules:
            kwargs["with_modules"] = True
        accepted = inspect.signature(profile.__init__).parameters
        dropped = [k for k in kwargs if k not in accepted]
        if dropped:
            note(f"torch {torch.__version__} profile() has no {', '.join(dropped)}; left out")
        self._offset = first_step or 0
        prof = profile(**{k: v for k, v in kwargs.items() if k in accepted})
        if first_step:
            prof.step_num = first_step
        self._offset = 0
        return prof

    def _start(self) -> None:
        import torch

        o = self._opts
        cuda = bool(torch.cuda.is_available())
        self._on_cuda = cuda and "GPU" in o.activities
        if "MEM" in o.activities:
            if cuda:
                torch.cuda.memory._record_memory_history(max_entries=100000)
                self._memory = True
            else:
                note("MEM activity needs CUDA for a memory snapshot; on this machine the resident"
                     " memory is recorded instead (a `memory` event, docs/memory.md)")
        if o.nsight_enabled:
            if cuda:
                self._nvtx = True
            else:
                note("nsight_enabled needs CUDA; no NVTX ranges or cudaProfilerStart/Stop on this machine")
        try:
            from dftracer.python.torch._handler import trace_handler

            self._trace_handler = trace_handler
        except ImportError:
            self._trace_handler = None
        self._running = True
        self._step = 0
        if "CPU" in o.activities or self._on_cuda:
            # Step 0 outside the active steps: profile the block whole until the
            # first step() shows the caller steps, so a block that never steps
            # still gives a trace.
            self._whole_block = not self._recording(0)
            self._start_profile(None if self._whole_block else 0)
        self._nvtx_step()

    def _start_profile(self, first_step: Optional[int]) -> None:
        """Starts torch's profiler; when torch refuses (another torch profiler
        runs, a broken Kineto) the block runs unprofiled and one line says why."""
        try:
            # Starting a second session would silently take Kineto from the
            # caller's own torch.profiler (seen only while it records).
            import torch

            recording = getattr(torch._C._autograd, "_profiler_enabled", lambda: False)
            if recording():
                raise RuntimeError("another torch.profiler is recording")
            self._prof = self._profile(first_step)
            _quietly(self._prof.start)
        except Exception as exc:
            self._prof = None
            note(f"{self.profile_name}: torch.profiler did not start ({exc}); profiling is off")

    def _switch_to_schedule(self) -> None:
        """First step() of a block that started unscheduled: drop what was
        recorded so far (the schedule did not ask for step 0) and continue on
        the schedule from this step."""
        self._discarding = True
        try:
            self._prof.stop()
        except Exception as exc:
            note(f"{self.profile_name}: stopping torch.profiler failed: {exc}")
        finally:
            self._discarding = False
        self._whole_block = False
        self._start_profile(self._step)

    def _stop(self) -> None:
        try:
            if self._prof is not None:
                if self._on_cuda:
                    import torch

                    torch.cuda.synchronize()
                self._prof.stop()
        except Exception as exc:
            note(f"{self.profile_name}: stopping torch.profiler failed: {exc}")
        finally:
            self._running = False
            self._prof_done()

    def _prof_done(self) -> None:
        if self._nvtx:
            self._nvtx_close()
        if self._memory:
            self._memory = False
            try:
                self.memory_paths.extend(_outputs.dump_memory_snapshot(self.output_dir, self.profile_name))
            except Exception as exc:
                note(f"memory snapshot failed: {exc}")

    # -- NVTX / cudaProfilerStart-Stop ------------------------------------
    def _nvtx_step(self) -> None:
        if not self._nvtx:
            return
        import torch

        try:
            if self._nvtx_open:
                torch.cuda.nvtx.range_pop()
            torch.cuda.nvtx.range_push(f"{self._opts.nsight_output}:step{self._step}")
            self._nvtx_open = True
            recording = self._recording(self._step) and self._running
            if recording and not self._cuda_capturing:
                torch.cuda.cudart().cudaProfilerStart()
                self._cuda_capturing = True
            elif not recording and self._cuda_capturing:
                torch.cuda.cudart().cudaProfilerStop()
                self._cuda_capturing = False
        except Exception as exc:
            note(f"NVTX failed, turned off: {exc}")
            self._nvtx = False

    def _nvtx_close(self) -> None:
        import torch

        try:
            if self._nvtx_open:
                torch.cuda.nvtx.range_pop()
            if self._cuda_capturing:
                torch.cuda.cudart().cudaProfilerStop()
        except Exception as exc:
            note(f"NVTX failed: {exc}")
        self._nvtx_open = self._cuda_capturing = False

    # -- outputs ----------------------------------------------------------
    def _on_trace_ready(self, prof: Any) -> None:
        """One finished cycle: PP events, Chrome/TensorBoard files, summary.
        A failing output is reported on one line; the program goes on."""
        if self._discarding:
            return
        cycle = self._cycles
        self._cycles += 1
        rank, world = _outputs.resolve_rank()
        o = self._opts
        if self._trace_handler is not None:
            try:
                self._trace_handler(prof)
            except Exception as exc:
                note(f"trace_handler failed: {exc}")
        written: Optional[Path] = None
        if o.export_chrome:
            path = _outputs.trace_file(self.output_dir, self.profile_name, rank, cycle)
            try:
                _outputs.export_chrome(prof, path, rank, world)
                self.trace_paths.append(path)
                written = path
            except Exception as exc:
                note(f"writing {path} failed: {exc}")
        if o.tensorboard:
            path = _outputs.tensorboard_file(self.output_dir, self.profile_name, rank)
            try:
                # Same content: copy the compressed file (Kineto's writer can
                # save a result only once, and this is cheaper anyway).
                if written is not None:
                    shutil.copyfile(written, path)
                else:
                    _outputs.export_chrome(prof, path, rank, world)
                self.tensorboard_paths.append(path)
            except Exception as exc:
                note(f"writing {path} failed: {exc}")
        if o.summary and rank == 0:
            try:
                title = f"{self.profile_name} rank 0 cycle {cycle}"
                print(format_summary(list(prof.key_averages()), self._on_cuda, o.with_flops, title), flush=True)
            except Exception as exc:
                note(f"summary failed: {exc}")


def step_profiler() -> None:
    """Steps the innermost running profiler; does nothing when none runs."""
    with _active_lock:
        context = _active[-1] if _active else None
    if context is not None:
        context.step()


def _decorator(opts: ProfilerOptions, func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not opts.enabled:
            return func(*args, **kwargs)
        # The directory is checked (and the rank read) per call, in the
        # process that runs the function, before the function starts.
        named = opts if opts.profile_name else opts.replace(profile_name=func.__name__)
        with ProfilerContext._from_options(named):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _decorate(owner: str, params: inspect.Signature, args: Any, options: Any) -> Any:
    """What profile_function/profiler return: the decorated function, or a
    decorator when called without one."""
    values = _options.bind(owner, params, args, options)
    func = values.pop("_func")
    opts = ProfilerOptions(**values)
    return _decorator(opts, func) if func is not None else functools.partial(_decorator, opts)


def profile_function(*args: Any, **options: Any) -> Any:
    """Decorator: each call of the function runs inside a ProfilerContext with
    these options (profile_name defaults to the function's name)."""
    return _decorate("profile_function", _PROFILE_FUNCTION_PARAMS, args, options)


def profiler(*args: Any, **options: Any) -> Any:
    """The training-loop decorator: `@profiler()` on the function, and
    `step_profiler()` at the end of each step inside it (defaults: skip_first
    1, wait 1, tensorboard on).  output_dir defaults to
    $DFTRACER_PROFILER_DIR or ./profiler_logs."""
    return _decorate("profiler", _PROFILER_PARAMS, args, options)


profile_function.__signature__ = _PROFILE_FUNCTION_PARAMS  # type: ignore[attr-defined]
profiler.__signature__ = _PROFILER_PARAMS  # type: ignore[attr-defined]

# The --profile* flags live in their own module; these names stay here too.
from dftracer.python.torch._profiler_args import add_profiler_args, create_profiler_from_args  # noqa: E402
