"""The subcommands of the ``dftracer`` command line (see docs/cli.md).

Each subcommand module exposes ``add_parser(subparsers)``; the per-file work
lives in :mod:`dftracer.tools.work` so that it can run in worker processes or
as Dask tasks.
"""
