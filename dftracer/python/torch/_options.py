"""The options of a profiling run (docs/profiler.md), each defined once.

`ProfilerOptions` holds every option's name, type, default, check, help text
and, where it has one, its command-line flag and environment variable.
ProfilerContext, profile_function and profiler() take their parameter lists
from it (`signature`), and add_profiler_args its flags (_profiler_args.py).
Importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Union

ENV_DIR = "DFTRACER_PROFILER_DIR"
DEFAULT_DIR = "./profiler_logs"
ACTIVITIES = ("CPU", "GPU", "MEM")
_ALIASES = {"CPU": "CPU", "GPU": "GPU", "CUDA": "GPU", "MEM": "MEM", "MEMORY": "MEM"}

# The defaults of the training-loop decorator profiler() where they differ.
PROFILER_DEFAULTS: Mapping[str, Any] = {"skip_first": 1, "wait": 1, "tensorboard": True}


def default_output_dir() -> str:
    return os.environ.get(ENV_DIR) or DEFAULT_DIR


def _option(default: Any, kind: str, help: str, *, flag: Optional[str] = None,
            flag_default: Any = None, minimum: int = 0, default_text: Optional[str] = None,
            env: Optional[str] = None, kw_only: bool = False) -> Any:
    """A dataclass field with what the checks and the flags need: kind is
    "switch" (bool), "count" (int >= minimum), "activities" or "text"; a
    flag's default is the option's unless flag_default says otherwise."""
    meta = {"kind": kind, "help": help, "flag": flag, "minimum": minimum, "env": env,
            "default_text": default_text,
            "flag_default": default if flag_default is None else flag_default}
    return dataclasses.field(default=default, kw_only=kw_only, metadata=meta)


def _activity_name(item: Any) -> str:
    """'CPU', 'GPU' or 'MEM' for a name (any case; 'CUDA' is 'GPU') or a
    torch.profiler.ProfilerActivity member."""
    name = getattr(item, "name", item)
    if isinstance(name, str) and name.strip().upper() in _ALIASES:
        return _ALIASES[name.strip().upper()]
    raise ValueError(f"activities: unknown activity {item!r}; use {', '.join(ACTIVITIES)}")


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclasses.dataclass
class ProfilerOptions:
    """Every option of a profiling run, checked on creation (ValueError
    naming the option). The field order is ProfilerContext's parameter
    order; `activities` becomes a list of 'CPU', 'GPU', 'MEM'."""

    enabled: bool = _option(True, "switch", "enable the profiler",
                            flag="--profile", flag_default=False)
    activities: Optional[Iterable[Any]] = _option(
        ("CPU", "GPU"), "activities", "what to profile", flag="--profile-activities")
    output_dir: Optional[Union[str, os.PathLike]] = _option(
        None, "text", "output directory", flag="--profile-dir", env=ENV_DIR,
        default_text=f"${ENV_DIR} or {DEFAULT_DIR}")
    profile_name: Optional[str] = _option(None, "text", "profile name prefix",
                                          flag="--profile-name",
                                          default_text="profile_<unix time>")
    with_stack: bool = _option(False, "switch", "record Python stacks",
                               flag="--profile-with-stack")
    record_shapes: bool = _option(True, "switch", "record input shapes",
                                  flag="--profile-record-shapes")
    profile_memory: bool = _option(False, "switch", "record allocation events")
    with_flops: bool = _option(True, "switch", "estimate FLOPs of matmul/conv")
    wait: int = _option(0, "count", "steps to wait", flag="--profile-wait")
    warmup: int = _option(1, "count", "warmup steps", flag="--profile-warmup")
    active: int = _option(3, "count", "active steps", flag="--profile-active", minimum=1)
    repeat: int = _option(1, "count", "profiling cycles, 0 = until the end",
                          flag="--profile-repeat")
    skip_first: int = _option(0, "count", "steps ignored first")
    export_chrome: bool = _option(True, "switch", "write {name}-rank{r}.trace.json.gz")
    tensorboard: bool = _option(False, "switch", "write the TensorBoard layout file")
    summary: bool = _option(True, "switch", "print the top ops on rank 0")
    with_modules: bool = _option(False, "switch", "record module hierarchy (when torch has it)",
                                 kw_only=True)
    nsight_enabled: bool = _option(False, "switch",
                                   "NVTX ranges per step, cudaProfilerStart/Stop (CUDA)",
                                   kw_only=True)
    nsight_output: str = _option("nsight_profile", "text", "prefix of the NVTX range names",
                                 kw_only=True)
    track_memory: bool = _option(False, "switch",
                                 "resident (and CUDA) memory over the block, one line at its end"
                                 " (MemoryTracker, docs/memory.md)",
                                 flag="--track-memory", kw_only=True)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            kind = f.metadata["kind"]
            if kind == "switch":
                setattr(self, f.name, bool(value))
            elif kind == "count":
                _check_count(f.name, value, f.metadata["minimum"])
        activities = ("CPU", "GPU") if self.activities is None else self.activities
        if isinstance(activities, (str, bytes)):
            activities = [activities]
        names = [_activity_name(a) for a in activities]
        if not names:
            raise ValueError("activities must name at least one of CPU, GPU, MEM")
        self.activities = list(dict.fromkeys(names))
        name = self.profile_name
        if name is not None and (not isinstance(name, str) or not name or os.sep in name):
            raise ValueError(f"profile_name must be a non-empty file name, not {name!r}")
        if not isinstance(self.nsight_output, str) or not self.nsight_output:
            raise ValueError(f"nsight_output must be a non-empty string, not {self.nsight_output!r}")

    def replace(self, **changes: Any) -> "ProfilerOptions":
        return dataclasses.replace(self, **changes)


def signature(*, keyword_only: bool, defaults: Mapping[str, Any] = {},
              leading: Sequence[inspect.Parameter] = ()) -> inspect.Signature:
    """The options as a parameter list: as ProfilerContext takes them, or all
    keyword-only (the decorators), with `defaults` replacing some defaults and
    `leading` parameters first."""
    params = list(leading)
    for p in inspect.signature(ProfilerOptions).parameters.values():
        kind = inspect.Parameter.KEYWORD_ONLY if keyword_only else p.kind
        params.append(p.replace(kind=kind, default=defaults.get(p.name, p.default)))
    return inspect.Signature(params)


def bind(owner: str, sig: inspect.Signature, args: Sequence[Any],
         kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The arguments of a call of `owner` with signature `sig`, defaults
    filled in; TypeError naming `owner` as Python would for a bad call."""
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{owner}() {exc}") from None
    bound.apply_defaults()
    return dict(bound.arguments)
