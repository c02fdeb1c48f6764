"""The --profile* command-line flags (docs/profiler.md "Command-line flags"),
made from the options that have a flag in ProfilerOptions."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from dftracer.python.torch import _options

if TYPE_CHECKING:
    from dftracer.python.torch.profiler_context import ProfilerContext


def _flagged() -> Iterator["dataclasses.Field[Any]"]:
    return (f for f in dataclasses.fields(_options.ProfilerOptions) if f.metadata["flag"])


def _dest(field: "dataclasses.Field[Any]") -> str:
    return field.metadata["flag"].lstrip("-").replace("-", "_")


def _at_least(minimum: int) -> Callable[[str], int]:
    def count(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return count


def add_profiler_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Adds the --profile* flags (docs/profiler.md) to `parser` and returns it."""
    group = parser.add_argument_group("profiling (torch.profiler + dftracer)")
    for f in _flagged():
        m = f.metadata
        flag, default, kind = m["flag"], m["flag_default"], m["kind"]
        if kind == "switch" and not default:
            group.add_argument(flag, action="store_true", help=m["help"])
        elif kind == "switch":
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=True,
                               help=f"{m['help']} (default: on)")
        elif kind == "count":
            group.add_argument(flag, type=_at_least(m["minimum"]), default=default,
                               help=f"{m['help']} (default: {default})")
        elif kind == "activities":
            names = list(_options.ACTIVITIES)
            group.add_argument(flag, nargs="+", default=list(default), type=str.upper,
                               choices=names, metavar="{" + ",".join(names) + "}",
                               help=f"{m['help']} (default: {' '.join(default)})")
        else:
            group.add_argument(flag, default=None, help=f"{m['help']} (default: {m['default_text']})")
    return parser


def create_profiler_from_args(args: argparse.Namespace,
                              profile_name: Optional[str] = None) -> "ProfilerContext":
    """A ProfilerContext from the flags of add_profiler_args (disabled unless
    --profile); `profile_name` is used when --profile-name was not given."""
    from dftracer.python.torch.profiler_context import ProfilerContext

    values = {f.name: getattr(args, _dest(f), f.metadata["flag_default"]) for f in _flagged()}
    # An empty or missing value means the default (profile_name: the argument).
    values["activities"] = values["activities"] or _options.ProfilerOptions.activities
    values["profile_name"] = values["profile_name"] or profile_name
    return ProfilerContext(**values)
