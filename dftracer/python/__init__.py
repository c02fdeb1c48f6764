"""The pydftracer-compatible API.

``from dftracer.python import dftracer`` (the logger), ``dft_fn`` (imported as
``Profile`` in most code: decorators, loops, context managers) and ``ai`` (the
AI/ML event tree), with everything else pydftracer 2.0.6 exports here: the
environment constants, tags, the category classes and enums, the entity API
(docs/compat.md lists where dftracer deliberately differs).
``dynamo``, ``Dynamo``, ``create_backend`` and ``dftracer_dynamo_backend``
(the torch.compile integration) are imported on first use, so importing this
package does not import torch.
"""

from typing import Any

from dftracer._core import __version__
from dftracer.python import env  # noqa: F401  (pydftracer's submodule attributes)
from dftracer.python import common  # noqa: F401
from dftracer.python.ai import *  # noqa: F401,F403
from dftracer.python.ai import __all__ as _AI_NAMES
from dftracer.python.logger import *  # noqa: F401,F403
from dftracer.python.logger import __all__ as _LOGGER_NAMES
from dftracer.python.logger import logger  # the DFTRACER logging.Logger, as in pydftracer
from dftracer.python import ai_common, ai_init  # noqa: F401

_DYNAMO_NAMES = ("Dynamo", "create_backend", "dftracer_dynamo_backend")
__all__ = list(dict.fromkeys([*_AI_NAMES, *_LOGGER_NAMES, "env", "ai_init", "dynamo",
                              *_DYNAMO_NAMES]))


def __getattr__(name: str) -> Any:
    if name == "dynamo" or name in _DYNAMO_NAMES:
        import importlib

        module = importlib.import_module("dftracer.python.dynamo")
        return module if name == "dynamo" else getattr(module, name)
    raise AttributeError(f"module 'dftracer.python' has no attribute {name!r}")
