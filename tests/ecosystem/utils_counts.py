"""dftracer-utils' counts of trace folders (tests/ecosystem), in its own venv.

For each folder: the events per (phase, cat, name) that
``TraceViewer(folder).phase(...).group_by("cat", "name").agg("count")``
finds, as one JSON object.

    python utils_counts.py INDEXDIR FOLDER...
"""

import json
import os
import sys

from dftracer.utils import TraceViewer


def counts(folder, index):
    out = {}
    for phase in ("events", "counters"):
        frame = (TraceViewer(folder, index_path=index).phase(phase)
                 .group_by("cat", "name").agg("count").collect()).to_dict()
        out[phase] = [[c, n, k] for c, n, k in zip(frame["cat"], frame["name"], frame["count"])]
    return out


if __name__ == "__main__":
    print(json.dumps({f: counts(f, os.path.join(sys.argv[1], str(n)))
                      for n, f in enumerate(sys.argv[2:])}))
