"""dft_fn ("Profile"): decorators, loops and context managers, checked on the
trace files they write (decoded and validated by tracefile.read_trace)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import inspect
import os
import pickle
import sys
import textwrap
from typing import Any, Dict, List

import pytest

from tracefile import find_traces, read_trace, run_python


from dftracer.python import dft_fn as Profile  # noqa: E402

PRELUDE = """
import asyncio, os, sys, threading
from dftracer.python import dftracer, ai
from dftracer.python import dft_fn as Profile
log = dftracer.initialize_log(os.path.join({d!r}, "trace.pfw"), None, -1)
"""


def traced(tmp_path, body: str, enable: bool = True):
    """Runs body after initialize_log in a fresh interpreter; returns the
    decoded trace (or None when no file was written) and the process."""
    code = PRELUDE.format(d=str(tmp_path)) + textwrap.dedent(body) + "\nlog.finalize()\n"
    env = {}
    if enable:
        env["DFTRACER_ENABLE"] = "1"
    proc = run_python(code, env=env, cwd=str(tmp_path))
    files = find_traces(str(tmp_path))
    if not enable:
        return None, proc
    assert len(files) == 1, files
    return read_trace(files[0]), proc


def own_args(ev: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in ev["args"].items() if k not in ("hhash", "level", "p_idx")}


def named(trace, name: str) -> List[Dict[str, Any]]:
    return [e for e in trace.user_events() if e["name"] == name]


# ---- plain functions, names, nesting ------------------------------------------


def test_plain_function_one_event_per_call(tmp_path):
    trace, proc = traced(tmp_path, """
        p = Profile("app")
        @p.log
        def work(x):
            return x * 2
        print(work(3), work(4))
    """)
    assert proc.stdout.split() == ["6", "8"]
    evs = trace.user_events()
    assert [(e["name"], e["cat"]) for e in evs] == [("work", "app")] * 2
    for e in evs:
        assert e["args"]["level"] == 1 and e["args"]["p_idx"] == -1
        assert own_args(e) == {}
    assert evs[0]["ts"] <= evs[1]["ts"]


def test_log_name_forms_and_qualname(tmp_path):
    trace, _ = traced(tmp_path, """
        p = Profile("app")
        @p.log(name="custom")
        def a(): pass
        @p.log()
        def b(): pass
        def outer():
            @p.log
            def inner(): pass
            inner()
        a(); b(); outer()
    """)
    assert [e["name"] for e in trace.user_events()] == ["custom", "b", "outer.<locals>.inner"]


def test_default_profile_name_is_callers_function(tmp_path):
    trace, _ = traced(tmp_path, """
        def make():
            return Profile("app")
        p = make()
        with p:
            pass
    """)
    assert [e["name"] for e in trace.user_events()] == ["make"]


def test_nesting_level_and_p_idx(tmp_path):
    trace, _ = traced(tmp_path, """
        p = Profile("app")
        @p.log
        def leaf(): pass
        @p.log
        def mid():
            leaf(); leaf()
        @p.log
        def top():
            mid()
        top()
        leaf()
    """)
    evs = {e["id"]: e for e in trace.user_events()}
    top = named(trace, "top")[0]
    mid = named(trace, "mid")[0]
    leaves = named(trace, "leaf")
    assert (top["args"]["level"], top["args"]["p_idx"]) == (1, -1)
    assert (mid["args"]["level"], mid["args"]["p_idx"]) == (2, top["id"])
    assert [(e["args"]["level"], e["args"]["p_idx"]) for e in leaves] == [
        (3, mid["id"]), (3, mid["id"]), (1, -1)]
    assert len(evs) == 5
    # A parent spans its children.
    for child, parent in ((mid, top), (leaves[0], mid)):
        assert parent["ts"] <= child["ts"]
        assert child["ts"] + child["dur"] <= parent["ts"] + parent["dur"]


def test_scopeless_events_never_take_an_enclosing_id(tmp_path):
    """Async calls, flush() regions and out-of-order stop() write events with
    their own ids, nested under the block they happen in."""
    trace, _ = traced(tmp_path, """
        p = Profile("app")
        @p.log
        async def co(): pass
        region = Profile("app", name="region")
        with Profile("app", name="blk"):
            asyncio.run(co())
            region.flush()
        a, b = Profile("app", name="a"), Profile("app", name="b")
        with Profile("app", name="outer"):
            a.__enter__(); b.__enter__()
            a._stop()      # out of order: b is still open
            b._stop()
    """)
    blk = named(trace, "blk")[0]
    outer = named(trace, "outer")[0]
    assert (blk["args"]["level"], blk["args"]["p_idx"]) == (1, -1)
    for n in ("co", "region"):
        e = named(trace, n)[0]
        assert (e["args"]["level"], e["args"]["p_idx"]) == (2, blk["id"]), n
    assert (outer["args"]["level"], outer["args"]["p_idx"]) == (1, -1)
    a, b = named(trace, "a")[0], named(trace, "b")[0]
    assert (a["args"]["level"], a["args"]["p_idx"]) == (2, outer["id"])
    assert (b["args"]["level"], b["args"]["p_idx"]) == (3, a["id"])
    assert a["ts"] + a["dur"] <= b["ts"] + b["dur"]  # a's own end time was kept


# ---- epoch / step / image_idx / image_size -----------------------------------


def test_step_args_from_call_defaults_and_self(tmp_path):
    trace, _ = traced(tmp_path, """
        p = Profile("app")
        @p.log
        def f(x, step=3, *, epoch=1, image_size=0.5):
            pass
        f(0)                      # declared defaults
        f(0, 7)                   # passed positionally wins over the default
        f(0, step=8, epoch=2)     # passed by keyword
        f(0, image_size=1024)     # int stays int
        f(0, step="not a number") # ignored, not an error
        @p.log
        def g(**kw): pass
        g(image_idx=4)            # **kwargs count too
        class T:
            def __init__(self): self.epoch, self.step = 5, 6
            @p.log
            def run(self, step=None): pass
        T().run()                 # self attributes
        T().run(step=9)           # a passed value wins over self.step
    """)
    got = [own_args(e) for e in trace.user_events()]
    assert got == [
        {"epoch": 1, "step": 3, "image_size": 0.5},
        {"epoch": 1, "step": 7, "image_size": 0.5},
        {"epoch": 2, "step": 8, "image_size": 0.5},
        {"epoch": 1, "step": 3, "image_size": 1024},
        {"epoch": 1, "image_size": 0.5},
        {"image_idx": 4},
        {"epoch": 5, "step": 6},
        {"epoch": 5, "step": 9},
    ]


def test_profile_values_update_and_args(tmp_path):
    trace, _ = traced(tmp_path, """
        p = Profile("app", name="blk", epoch=1, step=2, image_idx=3, image_size=4)
        with p:
            pass
        p.update(step=10, args={"model": "resnet", "lr": 0.5, "n": 3, "obj": [1]})
        with p:
            pass
        @p.log
        def f(step): pass
        f(11)   # the call's value wins over the object's
    """)
    a, b, c = trace.user_events()
    assert own_args(a) == {"epoch": 1, "step": 2, "image_idx": 3, "image_size": 4}
    assert own_args(b) == {"epoch": 1, "step": 10, "image_idx": 3, "image_size": 4,
                           "model": "resnet", "lr": 0.5, "n": 3, "obj": "[1]"}
    assert own_args(c)["step"] == 11 and c["name"] == "f"


def test_bad_arguments_raise_named_errors():
    with pytest.raises(TypeError, match="cat"):
        Profile(3)
    with pytest.raises(TypeError, match="name"):
        Profile("c", name=3)
    p = Profile("c", name="n")
    with pytest.raises(TypeError, match="epoch"):
        p.update(epoch="x")
    with pytest.raises(TypeError, match="args"):
        p.update(args=[1])
    with pytest.raises(TypeError, match="func"):
        p.log(3)
    with pytest.raises(TypeError, match="iter_name"):
        p.iter([], iter_name=3)


# ---- methods of all kinds -----------------------------------------------------


def test_methods_of_all_kinds(tmp_path):
    trace, proc = traced(tmp_path, """
        p = Profile("app")
        class C:
            @p.log_init
            def __init__(self, v):
                self.v = v
            @p.log
            def inst(self, x):
                return self.v + x
            @p.log
            @staticmethod
            def s1(x):
                return x
            @staticmethod
            @p.log
            def s2(x):
                return x
            @p.log
            @classmethod
            def c1(cls):
                return cls.__name__
            @classmethod
            @p.log
            def c2(cls):
                return cls.__name__
            @p.log_static
            def s3(x):
                return x
        c = C(10)
        print(c.inst(1), C.inst(c, 2), c.s1(3), C.s1(4), c.s2(5), C.s2(6),
              c.c1(), C.c1(), c.c2(), C.c2(), c.s3(7), C.s3(8))
    """)
    assert proc.stdout.split() == ["11", "12", "3", "4", "5", "6", "C", "C", "C", "C", "7", "8"]
    names = [e["name"] for e in trace.user_events()]
    assert names == ["C.__init__", "C.inst", "C.inst", "C.s1", "C.s1", "C.s2", "C.s2",
                     "C.c1", "C.c1", "C.c2", "C.c2", "C.s3", "C.s3"]


# ---- exceptions ------------------------------------------------------------------


def test_exceptions_pass_through_and_mark_the_event(tmp_path):
    trace, proc = traced(tmp_path, """
        p = Profile("app")
        err = KeyError("k")
        @p.log
        def boom():
            raise err
        try:
            boom()
        except KeyError as e:
            print(e is err, e.__traceback__.tb_next.tb_frame.f_code.co_name)
        try:
            with Profile("app", name="blk"):
                raise ValueError("v")
        except ValueError:
            print("ok")
        @p.log
        def fine(): pass
        fine()
    """)
    assert proc.stdout.split() == ["True", "boom", "ok"]
    boom, blk, fine = trace.user_events()
    assert own_args(boom) == {"error": "KeyError"}
    assert blk["name"] == "blk" and own_args(blk) == {"error": "ValueError"}
    assert own_args(fine) == {}


# ---- generators and coroutines -------------------------------------------------


def test_generator_one_event_per_resumption(tmp_path):
    trace, proc = traced(tmp_path, """
        p = Profile("app")
        @p.log
        def gen(n, step=0):
            for i in range(n):
                got = yield i
                if got is not None:
                    print("got", got)
            return "done"
        print(list(gen(3, step=4)))
        g = gen(2)
        next(g); g.send("x")
        def outer():
            r = yield from gen(1)
            print("ret", r)
        list(outer())
        @p.log
        def bad():
            yield 1
            raise RuntimeError("r")
        try:
            list(bad())
        except RuntimeError:
            print("raised")
    """)
    assert proc.stdout.split("\n")[:4] == ["[0, 1, 2]", "got x", "ret done", "raised"]
    gens = named(trace, "gen")
    # 3 items + the final resumption; then 2 resumptions (next, send); then 2 via yield from
    assert len(gens) == 4 + 2 + 2
    assert all(own_args(e) == {"step": 4} for e in gens[:4])
    assert all(e["args"]["level"] == 1 for e in gens)
    bads = named(trace, "bad")
    assert [own_args(e) for e in bads] == [{}, {"error": "RuntimeError"}]


def test_async_function_event_spans_the_awaited_call(tmp_path):
    trace, proc = traced(tmp_path, """
        p = Profile("app")
        @p.log
        async def work(x, step=1):
            await asyncio.sleep(0.02)
            return x * 2
        @p.log
        async def fail():
            await asyncio.sleep(0)
            raise ValueError("v")
        async def main():
            print(await work(2))
            t = asyncio.create_task(work(3, step=5))
            print(await t)
            print(asyncio.iscoroutinefunction(work), asyncio.iscoroutine(work(0).__await__()))
            try:
                await fail()
            except ValueError:
                print("raised")
        asyncio.run(main())
    """)
    assert proc.stdout.split() == ["4", "6", "True", "True", "raised"]
    works = named(trace, "work")
    assert len(works) == 2
    assert [own_args(e)["step"] for e in works] == [1, 5]
    assert all(e["dur"] >= 20000 for e in works)
    assert own_args(named(trace, "fail")[0]) == {"error": "ValueError"}


# ---- loops -------------------------------------------------------------------------


def test_iter_events_counter_and_nesting(tmp_path):
    trace, proc = traced(tmp_path, """
        p = Profile("app")
        @p.log
        def body(x): pass
        for x in p.iter(range(3)):
            body(x)
        for x in p.iter(["a", "b"], name="ld", iter_name="idx"):
            pass
        for x in p.iter(range(10)):
            if x == 1:
                break
        print("ok")
    """)
    iters = named(trace, "loop.iter")
    yields = named(trace, "loop.yield")
    assert [own_args(e) for e in iters[:3]] == [{"step": 1}, {"step": 2}, {"step": 3}]
    assert [own_args(e) for e in yields[:3]] == [{"step": 1}, {"step": 2}, {"step": 3}]
    bodies = named(trace, "body")
    for y, b in zip(yields, bodies):
        assert b["args"]["p_idx"] == y["id"] and b["args"]["level"] == y["args"]["level"] + 1
    assert [own_args(e) for e in named(trace, "ld.iter")] == [{"idx": 1}, {"idx": 2}]
    assert len(named(trace, "ld.yield")) == 2
    # break after item 2: both bodies are still written
    assert len(iters) == 3 + 2 and len(yields) == 3 + 2


# ---- context manager, flush, reset, metadata --------------------------------------


def test_context_manager_flush_reset_metadata(tmp_path):
    trace, _ = traced(tmp_path, """
        with Profile("cm", name="outer"):
            with Profile("cm", name="inner"):
                pass
        p = Profile("cm", name="region")
        p.reset()
        p.flush()
        q = Profile("cm", name="early")
        with q:
            q.flush()      # written here, not again at exit
        q.log_metadata("run", 42)
    """)
    outer, inner = named(trace, "outer")[0], named(trace, "inner")[0]
    assert inner["args"]["p_idx"] == outer["id"] and inner["args"]["level"] == 2
    assert len(named(trace, "region")) == 1
    assert len(named(trace, "early")) == 1
    cm = trace.of("M", name="CM")
    assert [(e["args"]["name"], e["args"]["value"]) for e in cm] == [("run", "42")]


# ---- threads -------------------------------------------------------------------------


def test_threads_share_one_profile(tmp_path):
    trace, _ = traced(tmp_path, """
        p = Profile("thr")
        @p.log
        def inner(i): pass
        @p.log
        def outer(step):
            inner(step)
        def run(k):
            for i in range(50):
                outer(i)
                with p:
                    inner(i)
        ts = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in ts: t.start()
        for t in ts: t.join()
    """)
    evs = trace.user_events()
    by_id = {e["id"]: e for e in evs}
    assert len(evs) == 4 * 50 * 4
    assert len({e["tid"] for e in evs}) == 4
    for e in named(trace, "inner"):
        parent = by_id[e["args"]["p_idx"]]
        assert parent["tid"] == e["tid"] and parent["name"] in ("outer", "<module>", "run")
        assert e["args"]["level"] == 2
    assert sorted(own_args(e)["step"] for e in named(trace, "outer")) == sorted(
        list(range(50)) * 4)


# ---- disabled ---------------------------------------------------------------------------


def test_disabled_writes_nothing(tmp_path):
    trace, proc = traced(tmp_path, """
        p = Profile("app")
        @p.log
        def f(x): return x + 1
        for x in p.iter(range(2)):
            with p:
                f(x)
        print(f(1))
    """, enable=False)
    assert proc.stdout.split() == ["2"]
    assert find_traces(str(tmp_path)) == []
    assert os.listdir(tmp_path) == []


def test_enable_false_profile_writes_nothing(tmp_path):
    trace, _ = traced(tmp_path, """
        off = Profile("off", enable=False)
        on = Profile("on")
        @off.log
        def a(): pass
        @on.log
        def b(): pass
        a(); b()
        with off: pass
        for _ in off.iter(range(2)): pass
        off.enabled = True
        a()
    """)
    assert [(e["name"], e["cat"]) for e in trace.user_events()] == [("b", "on"), ("a", "off")]


def test_decorating_without_dftracer_enable_returns_the_function():
    """No trace can start without DFTRACER_ENABLE: the decorators give back what they got
    (log_static a staticmethod), so a disabled decorator costs nothing per call."""
    assert "DFTRACER_ENABLE" not in os.environ
    p = Profile("app", name="n")

    def f(x):
        return x + 1

    assert p.log(f) is f
    assert p.log(name="g")(f) is f
    assert p.log_init(f) is f
    sm, cm = staticmethod(f), classmethod(f)
    assert p.log(sm) is sm and p.log(cm) is cm

    class C:
        s = p.log_static(f)

    assert isinstance(C.__dict__["s"], staticmethod)
    assert C().s(1) == 2 and C.s(2) == 3


def test_disabled_call_allocates_nothing():
    """A wrapper made while DFTRACER_ENABLE was set, called with tracing off."""
    with enable_env():
        p = Profile("app", name="n", enable=False)

        @p.log
        def f():
            pass

        class C:
            @p.log
            def m(self):
                pass

    assert hasattr(f, "__wrapped__")
    c = C()
    for _ in range(100):  # warm up
        f()
        c.m()
    before = sys.getallocatedblocks()
    for _ in range(20000):
        f()
        c.m()
    assert sys.getallocatedblocks() - before < 50


# ---- signature and pickling (in-process) ----------------------------------------------

@contextlib.contextmanager
def enable_env():
    """Decorates as a process with DFTRACER_ENABLE=1 does (without it, the
    decorators return the function itself)."""
    os.environ["DFTRACER_ENABLE"] = "1"
    try:
        yield
    finally:
        del os.environ["DFTRACER_ENABLE"]


_p = Profile("pickle", name="p")
_env = enable_env()
_env.__enter__()


@_p.log
def module_function(a: int, b: str = "x", *, step: int = 0) -> int:
    """Docstring."""
    return a


class Holder:
    @_p.log
    def method(self, x: int) -> int:
        return x

    @_p.log
    @staticmethod
    def static(y: float) -> float:
        return y

    @_p.log
    @classmethod
    def klass(cls, z: str) -> str:
        return z


_env.__exit__(None, None, None)


class _PlainHolder:
    def method(self, x: int) -> int:
        return x

    @staticmethod
    def static(y: float) -> float:
        return y

    @classmethod
    def klass(cls, z: str) -> str:
        return z


def _plain(a: int, b: str = "x", *, step: int = 0) -> int:
    """Docstring."""
    return a


def test_wrapper_metadata_and_signature():
    f = module_function
    assert f.__name__ == "module_function"
    assert f.__qualname__ == "module_function"
    assert f.__doc__ == "Docstring."
    assert f.__module__ == __name__
    assert f.__annotations__ == _plain.__annotations__
    assert inspect.isfunction(f.__wrapped__)
    assert str(inspect.signature(f)) == str(inspect.signature(_plain))
    for attr in ("method", "static", "klass"):
        assert str(inspect.signature(getattr(Holder(), attr))) == str(
            inspect.signature(getattr(_PlainHolder(), attr)))
        assert str(inspect.signature(getattr(Holder, attr))) == str(
            inspect.signature(getattr(_PlainHolder, attr)))
    assert Holder.method.__qualname__ == "Holder.method"
    f.custom = 1
    assert f.__dict__["custom"] == 1
    assert functools.wraps(f)(lambda: None).__name__ == "module_function"


def test_wrapper_pickles_by_reference():
    for obj in (module_function, Holder.method, Holder.static):
        assert pickle.loads(pickle.dumps(obj)) is obj
        assert copy.deepcopy(obj) is obj
    bound = pickle.loads(pickle.dumps(Holder.klass))
    assert bound("z") == "z"


def test_asyncio_sees_a_coroutine_function():
    p = Profile("a", name="a")

    @p.log
    async def co():
        return 1

    assert asyncio.iscoroutinefunction(co)
    assert asyncio.run(co()) == 1
