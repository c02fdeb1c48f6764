"""DFAnalyzer's DLIO preset over trace folders, as numbers (tests/ecosystem).

Runs in the ecosystem venv (build/ecosystem-venv: dftracer-analyzer 0.0.9
over dftracer-utils 0.0.12), never in dftracer's own: both packages live
under the `dftracer` name.  For each folder it runs what `dfanalyzer
analyzer/preset=dlio trace_path=FOLDER` runs and prints one JSON object:
the "Time Period Summary" counts and, per layer row, its Ops, processes and
files, as the console table shows them.

    python dfanalyzer_counts.py WORKDIR FOLDER...
"""

import json
import os
import sys


def counts(workdir, folder, n):
    from dftracer.analyzer import init_with_hydra

    run = os.path.join(workdir, f"dfanalyzer-{n}")
    inst = init_with_hydra([
        "analyzer/preset=dlio", f"trace_path={folder}", f"hydra.run.dir={run}",
        "cluster.n_workers=1", "cluster.processes=false",
        f"cluster.local_directory={os.path.join(run, 'dask')}"])
    try:
        result = inst.analyze_trace()
        raw = inst.output._compute_raw_stats(result)
        (key,) = [k for k in result.flat_views if k[-1] == "time_range"]
        summary = inst.output._create_summary(result=result, view_key=key, raw_stats=raw)
        return {
            "trace_count": int(raw.trace_event_count),
            "profile_count": int(raw.profile_event_count),
            "total_count": int(raw.total_event_count),
            "files": int(raw.unique_file_count),
            "nodes": int(raw.unique_host_count),
            "processes": int(raw.unique_process_count),
            "layers": {layer: {"count": m.count, "processes": m.num_processes,
                               "files": m.num_files}
                       for layer, m in summary.layer_metrics.items()},
        }
    finally:
        inst.shutdown()


if __name__ == "__main__":
    out = {folder: counts(sys.argv[1], folder, n) for n, folder in enumerate(sys.argv[2:])}
    print(json.dumps(out))
