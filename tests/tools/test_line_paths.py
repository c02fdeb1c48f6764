"""The line parser's two paths give one answer (src/reader/parse.c): lines in
the writer's exact layout go through the fast path (the args object
included, and each pass reads the args the parser found:
reader/members.c dft_line_args); the same events with another key order
and spacing go through the general JSON walk. `summary`, `summary --io` and
`summary --ranks` must say the same of both, for args the fast path hands
back to the general walk midway (escapes, spaces, floats, objects, the
older tools' unescaped quotes) as for plain ones."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

T0 = 1_700_000_000_000_000
HH = "185b3c7d3c6c6298"
FH = {"/data/a.bin": "00000000000000f1", '/data/q"uote.bin': "00000000000000f2"}
PLAIN = '{"hhash":"%s","level":1,"p_idx":-1' % HH


def events():
    """(head, args_text): head a dict in the writer's key order; args_text the
    args object as written (some not in the writer's exact form)."""
    out = []
    meta = [("HH", {"name": "host-a", "value": HH}), ("PR", {"name": "rank", "value": 0})]
    meta += [("FH", {"name": p, "value": h}) for p, h in FH.items()]
    for name, args in meta:
        out.append(({"name": name, "cat": "dftracer", "ph": "M"},
                    '{"hhash":"%s",%s' % (HH, json.dumps(args, separators=(",", ":"))[1:])))
    odd = [  # each goes to the general walk at some member
        '{"hhash":"%s","level":1,"p_idx":-1,"fhash":"00000000000000f2","fd":4,"ret":100,"size":100,'
        '"note":"a\\"b"}' % HH,
        '{"hhash":"%s","level":1, "fhash":"00000000000000f1","fd":3,"ret":300}' % HH,
        '{"hhash":"%s","level":1,"fhash":"00000000000000f1","fd":3,"ret":50,"x":1.5e3,'
        '"o":{"k":[1,2,{"z":null}]},"b":true,"n":null}' % HH,
        '{"hhash":"%s","level":1,"fhash":"00000000000000f1","fd":3,"ret":7,"say":"he said "hi""}' % HH,
    ]
    ts = T0
    for step in range(6):
        out.append(({"name": "iteration", "cat": "pipeline", "ts": ts, "dur": 900, "ph": "X"},
                    PLAIN + ',"step":%d}' % step))
        out.append(({"name": "forward", "cat": "compute", "ts": ts + 10, "dur": 300, "ph": "X"},
                    PLAIN + ',"module":"model.Net","step":%d}' % step))
        out.append(({"name": "read", "cat": "POSIX", "ts": ts + 400, "dur": 20, "ph": "X"},
                    PLAIN + ',"fhash":"00000000000000f1","fd":3,"ret":4096,"size":4096}'))
        out.append(({"name": "read", "cat": "POSIX", "ts": ts + 430, "dur": 20, "ph": "X"},
                    odd[step % len(odd)]))
        out.append(({"name": "all_reduce", "cat": "comm", "ts": ts + 500, "dur": 100, "ph": "X"},
                    PLAIN + ',"group":"world","seq":%d,"size":1024}' % step))
        ts += 1000
    return out


def writer_line(i, head, args):
    keys = ["name", "cat"]
    parts = ['"id":%d' % i] + ['"%s":%s' % (k, json.dumps(head[k])) for k in keys]
    parts += ['"pid":%d' % 77, '"tid":%d' % 77]
    parts += ['"%s":%d' % (k, head[k]) for k in ("ts", "dur") if k in head]
    parts.append('"ph":"%s"' % head["ph"])
    return "{" + ",".join(parts) + ',"args":' + args + "}"


def other_line(i, head, args):
    """The same event, keys in another order and spaced: the general walk."""
    parts = ['"args": ' + args, '"ph": "%s"' % head["ph"]]
    parts += ['"%s": %d' % (k, head[k]) for k in ("dur", "ts") if k in head]
    parts += ['"tid": 77', '"pid": 77', '"cat": %s' % json.dumps(head["cat"]),
              '"name": %s' % json.dumps(head["name"]), '"id": %d' % i]
    return "{ " + ", ".join(parts) + " }"


def write(path, form):
    lines = ["["] + [form(i + 1, h, a) for i, (h, a) in enumerate(events())] + ["]"]
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def summary(path, *flags):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", str(path), "--json",
                           *flags], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.replace(str(path), "PATH"))


def test_fast_and_general_paths_agree_on_every_pass(tmp_path):
    (tmp_path / "fast").mkdir()
    (tmp_path / "general").mkdir()
    fast = tmp_path / "fast" / "job-77.pfw.gz"
    general = tmp_path / "general" / "job-77.pfw.gz"
    write(fast, writer_line)
    write(general, other_line)
    # the fast file really is in the writer's layout (docs/trace-format.md)
    with gzip.open(fast, "rt") as f:
        assert f.read().splitlines()[5].startswith('{"id":5,"name":"iteration","cat":"pipeline",')
    for flags in ((), ("--io",), ("--ranks",)):
        a, b = summary(fast, *flags), summary(general, *flags)
        assert a == b, flags
    plain = summary(fast)
    reads = [r for r in plain["by_name"] if (r["cat"], r["name"]) == ("POSIX", "read")]
    assert len(reads) == 1 and reads[0]["count"] == 12
    io = summary(fast, "--io")
    text = json.dumps(io)
    # every byte count of the reads is there: 6 x 4096 and the odd ones'
    assert str(6 * 4096 + 100 + 300 + 50 + 7 + 100 + 300) in text, text[:2000]
    assert '/data/q\\"uote.bin' in text
    ranks = summary(fast, "--ranks")
    assert "iteration" in json.dumps(ranks)
