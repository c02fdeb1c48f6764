"""The version of dftracer: the single source of truth.

pyproject.toml reads it (``tool.setuptools.dynamic``), setup.py compiles it into
the extension (``DFT_VERSION``, written into every trace's ``start`` event) and
``dftracer.__version__`` is ``_core.__version__``.  Semantic versioning: the
trace format and the pydftracer-compatible API change only with the minor
version while the major one is 0.
"""

__version__ = "0.2.0"
