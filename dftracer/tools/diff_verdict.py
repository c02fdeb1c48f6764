"""The verdict of ``dftracer diff`` (docs/cli.md, "dftracer diff"): the one
line a person can act on, from the comparison dftracer/tools/diff.py makes
-- the step change, then what explains it: a new straggler by the summary's
rule (dftracer/tools/ranks.py) with its own events, a rank that is no longer
one, a busier or less busy machine, the classes and names that moved -- and
always what moved, or that nothing did."""

from __future__ import annotations

from typing import Any, Dict

from dftracer.tools import ranks


def work(s: Dict[str, Any]) -> bool:
    """A straggler named for its work (not "waiting for a CPU")."""
    return s["cause_class"] != ranks.CPU_WAIT


def label(r: Dict[str, Any]) -> str:
    """cat/name of a row; a class's residual row (no category) by its name."""
    if not r.get("name"):
        return r["cat"]
    return f"{r['cat']}/{r['name']}" if r["cat"] else r["name"]


def per_call(r: Dict[str, Any]) -> float:
    """A row's change per call (its time per step over its count per step)."""
    def each(us: float, n: float) -> float:
        return us / n if n else 0.0
    return each(r["new_us_per_step"], r["new_count_per_step"]) - \
        each(r["base_us_per_step"], r["base_count_per_step"])


def ms(us: float, signed: bool = True) -> str:
    return (f"{us / 1e3:+.1f} ms" if signed else f"{us / 1e3:.1f} ms") \
        if abs(us) >= 100 else (f"{us:+.0f} us" if signed else f"{us:.0f} us")


def verdict(d: Dict[str, Any]) -> str:
    """One line a person can act on: the step change, then what explains it
    -- a new straggler and its own events first, the classes, a rank whose
    class moved, a busier machine -- never "within noise" beside a
    significant change the tables show."""
    s = d["step"]
    if s["base_us"] is None or s["new_us"] is None:
        return "no steps to compare in " + ("both runs" if s["base_us"] is None
                                             and s["new_us"] is None else
                                             "BASE" if s["base_us"] is None else "NEW")
    pct = f" ({100 * s['change']:+.0f} %)" if s["change"] is not None else ""
    head = f"step {ms(s['change_us'])}{pct}"
    parts = []
    own = {x["rank"]: x for x in d.get("straggler_changes", [])}
    # a straggler for its work is new unless BASE had it so ("waiting for a
    # CPU" is its machine, said apart)
    base_work = {y["rank"] for y in d["stragglers"]["base"] if work(y)}
    new_stragglers = [x for x in d["stragglers"]["new"] if x["rank"] not in base_work
                      and (work(x) or x["rank"] not in {y["rank"] for y in
                                                         d["stragglers"]["base"]})]
    named_classes = set()
    for x in new_stragglers:
        if not work(x):
            parts.append(f"rank {x['rank']} waited {ms(x['cause_excess_us'], False)} a step "
                         "more than the others for a CPU (its machine, not its work)")
            continue
        what = f"{x['cause_cat']}/{x['cause_name']}" if x["cause_cat"] else x["cause_name"]
        grew = [r for r in own.get(x["rank"], {}).get("rows", [])
                if r["cls"] == x["cause_class"] and r["change_us_per_step"] > 0][:2]
        grew = [r for r in grew if r["change_us_per_step"] >= grew[0]["change_us_per_step"] / 4]
        if grew:  # its own events, the largest growth first
            what = "; ".join(f"{label(r)} {ms(r['change_us_per_step'])}" for r in grew)
        else:
            what += f" +{ms(x['cause_excess_us'], False)}"
        lead = x.get("mean_lead_us", x["excess_us"])
        parts.append(f"rank {x['rank']} is a new straggler, {ms(lead)} a step over the "
                     f"others ({ranks.LABELS[x['cause_class']]}: {what})")
        named_classes.add((x["rank"], x["cause_class"]))
    now = {y["rank"] for y in d["stragglers"]["new"] if work(y)}
    gone = [x for x in d["stragglers"]["base"] if x["rank"] not in now and work(x)]
    for x in gone:
        parts.append(f"rank {x['rank']} is no longer a straggler (it was "
                     f"{ms(x.get('mean_lead_us', x['excess_us']))} a step over the others, "
                     f"{ranks.LABELS[x['cause_class']]})")
    sched = d.get("sched")
    # the machine busier or less busy for all: the step threads' wait for a
    # CPU moved beyond noise, their CPU time did not
    machine = 0
    if sched and sched["wait"]["significant"] and not sched["cpu"]["significant"]:
        machine = 1 if sched["wait"]["change_us_per_step"] > 0 else -1
    sig = [c for c in d["classes"] if c["significant"]]
    for c in sig:
        names = [r for r in d["changes"] if r["significant"]]
        main = [r for r in names if r["where"] == "main" and r["cls"] == c["cls"]][:2]
        workers = [r for r in names if r["where"] == "workers" and c["cls"] == "data"][:2]
        if any(x["cause_class"] == c["cls"] for x in new_stragglers):
            main = []  # named with the straggler, from its own events
        detail = [label(r) for r in main]
        detail += [f"{label(r)} {ms(per_call(r))} each in the workers" for r in workers]
        parts.append(f"{ranks.LABELS[c['cls']]} {ms(c['change_us_per_step'])}"
                     + (f" ({'; '.join(detail)})" if detail else ""))
    # a rank whose class moved significantly, not said above (the by-rank table)
    for r in d["by_rank"]:
        for c, v in r["by_class"].items():
            if v["significant"] and (r["rank"], c) not in named_classes and \
                    not any(x["cls"] == c for x in sig) and c != "comm":
                parts.append(f"rank {r['rank']} {ranks.LABELS[c]} "
                             f"{ms(v['change_us_per_step'])}")
                named_classes.add((r["rank"], c))
    if machine:  # said first: it explains the classes that moved with it
        w, cpu = sched["wait"], sched["cpu"]
        parts.insert(len(new_stragglers) + len(gone),
                     f"the machine was {'busier' if machine > 0 else 'less busy'}: the step "
                     f"threads waited {ms(abs(w['change_us_per_step']), False)} a step "
                     f"{'more' if machine > 0 else 'less'} for a CPU, with their CPU time "
                     f"within noise ({ms(cpu['change_us_per_step'])})")
    elif sched and sched["cpu"]["significant"]:
        parts.append(f"the step threads' CPU time {ms(sched['cpu']['change_us_per_step'])} a "
                     f"step (their wait for a CPU {ms(sched['wait']['change_us_per_step'])})")
    counted = [r for r in d["changes"] if r["count_changed"] and r["where"] == "main"][:1]
    for r in counted:
        parts.append(f"{label(r)} {r['base_count_per_step']:g} -> "
                     f"{r['new_count_per_step']:g} a step")
    if not s["significant"] and not parts:
        return f"{head}: within noise (+-{ms(s['noise_us'], False)} a step), " \
               "nothing changed beyond it"
    if not parts:
        # the step moved, no part of it alone beyond its noise: the largest movers
        movers = sorted(d["classes"], key=lambda c: -abs(c["change_us_per_step"]))[:2]
        said = ", ".join(f"{ranks.LABELS[c['cls']]} {ms(c['change_us_per_step'])}"
                         for c in movers if abs(c["change_us_per_step"]) >= 0.5)
        return (f"{head}: no class moved beyond its own noise; the most: {said}"
                if said else f"{head}: spread over the classes, none moved by itself")
    rest = "everything else within noise" if len(sig) < len(d["classes"]) else ""
    return head + ": " + ", ".join(parts + ([rest] if rest else []))
