"""`forward` and `backward` of top-level modules.

Global forward hooks (torch.nn.modules.module.register_module_forward_*)
keep a per-thread depth: a module whose forward starts at depth 0 is
top-level, and only its end writes an event; every other module costs two
counter updates.  The forward hook is registered with always_call, so a
forward that raises still closes.

Backward: torch.autograd's _engine_run_backward, through which backward()
and torch.autograd.grad() enter the autograd engine, is a C object
(_core._AtEngineRun): a call into the engine on a thread whose last
top-level forward since the last optimizer step had an output that needs
grad is the `backward` event, to the engine's return (after the callbacks
queued during the pass: DDP's wait for its last bucket).  It names that
model (a loss module only when no other model forwarded).  No hook is put
on the autograd graph: registering one per step cost more than the event.

The hooks are C objects (src/torch/autotrace_hooks.c): torch calls C, and
no Python frame of ours runs per module call, forward or backward.  A
top-level module found is timed by a C object set as its `forward`
attribute (_core._AtForward), not by hooks of its own: a module with hooks
goes through torch's hook path on every call (a few microseconds), one
without keeps the hook-free path and calls our forward, which calls its own.

Global hooks make torch dispatch hooks on every module call (about 2 us
on a slow core), so they only find the top-level modules, and the search is
bounded: it ends when a top-level module it saw forwards again (one
iteration seen), at the next iteration, or after 100 top-level forwards;
the top-level modules seen get their C forward, and every module is back
to torch's hook-free path.  Each new pass over a DataLoader (an
epoch, an evaluation loop), each model.train()/model.eval() and each
torch.load that returns a module (a model reloaded for the test pass) looks
again, so a model built or loaded late is timed from its next pass.  A model
first called outside these windows is not timed.

torch.compile must not see global module hooks (dynamo guards on them, and
OptimizedModule warns about them): the first compile or OptimizedModule ends
the search for good; OptimizedModule and DDP models made later get hooks of
their own (hooks, which dynamo traces, not the C forward, which it would
not).  The per-module hooks stand aside inside a compiled region; the C
forwards and hooks are left out when a module is pickled (torch.save of a
whole model, copy.deepcopy) and while torch.jit.script compiles one.
"""

from __future__ import annotations

import functools
import types
import weakref
from typing import Any, Callable, List, Optional

import torch
import torch.nn.modules.module as nn_module

from dftracer import _core
from dftracer._autotrace import _base, steps
from dftracer._autotrace._base import class_name, compiling, part, patch

P = part("modules")


_handles: List[Any] = []
_seen: "weakref.WeakSet[Any]" = weakref.WeakSet()          # top-level modules so far
_per_module: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_global = [False]      # the global hooks are registered
_compiled = [False]    # torch.compile was seen: never global hooks again
_window = [0, 0]       # the search ends at this iteration, or after this many forwards
WINDOW_ITERATIONS, WINDOW_FORWARDS = 1, 100
SEARCH_ENDS_ON_REPEAT = True  # a top-level module forwarding again ends the search


# ---- forward and backward: C objects (src/torch/autotrace_hooks.c) ----------

_pre = _core._at_forward_pre      # (module, args)
_post = _core._at_forward_post    # (module, args, output); always_call


def _pre_outside_compile(module: Any, args: Any) -> None:
    if not compiling():
        _pre(module, args)


def _post_outside_compile(module: Any, args: Any, output: Any) -> None:
    if not compiling():
        _post(module, args, output)


def module_name(module: Any) -> str:
    """The class name; for torch.compile's wrapper, the compiled module's."""
    name = class_name(module)
    if name == "OptimizedModule":
        orig = getattr(module, "_orig_mod", None)
        if orig is not None:
            return class_name(orig)
    return name


def _search_seen(module: Any) -> None:
    """The C hooks saw a top-level forward end while the global hooks search:
    the search ends once a module seen forwards again (one iteration seen),
    at the next iteration, or after WINDOW_FORWARDS top-level forwards."""
    if not _global[0]:
        return
    try:
        again = module in _seen
        _seen.add(module)
    except TypeError:  # a module class that is not hashable
        again = False
    _window[1] -= 1
    if (again and SEARCH_ENDS_ON_REPEAT) or steps.current() >= _window[0] or _window[1] <= 0:
        end_search()


# ---- global hooks, then per-module hooks once torch.compile is in use -------


def _replaceable(module: Any) -> bool:
    """Whether module's `forward` can be replaced by a _core._AtForward: its
    class's forward is a plain function and none is set on the instance."""
    attrs = getattr(module, "__dict__", None)
    return (isinstance(attrs, dict) and "forward" not in attrs
            and isinstance(getattr(type(module), "forward", None), types.FunctionType))


def _has_own_hooks(module: Any) -> bool:
    """The program hooked the model's forward itself: torch then takes its
    hooked call path anyway, and hooks of ours around the program's keep them
    inside the `forward` event (a forward wrapper would leave them out)."""
    return bool(getattr(module, "_forward_pre_hooks", None) or getattr(module, "_forward_hooks", None))


def hook_module(module: Any) -> None:
    """Times a top-level module's forward: by a _core._AtForward set as its
    `forward` attribute (torch keeps its hook-free call path), or, where that
    cannot be (torch.compile in use: dynamo traces hooks; a forward set on the
    instance or not a function) or should not (the program's own forward
    hooks on it), by per-module hooks that stand aside inside a compiled
    region."""
    if not P.on or module in _per_module:
        return
    shims = _compiled[0]  # dynamo traces hooks: Python shims that stand aside
    if not shims and _replaceable(module) and not _has_own_hooks(module):
        wrapper = _core._AtForward(module)  # holds the module weakly
        module.__dict__["forward"] = wrapper
        _per_module[module] = (None, None, wrapper)
        return
    # first of its pre-hooks and last of its hooks: the program's own hooks
    # on the model count inside its forward
    pre = module.register_forward_pre_hook(_pre_outside_compile if shims else _pre,
                                           prepend=True)
    post = module.register_forward_hook(_post_outside_compile if shims else _post,
                                        always_call=True)
    _per_module[module] = (pre, post, shims)


def _rehook(module: Any) -> None:
    """The program hooked a module whose forward is ours (a pre-hook on the
    DDP wrapper after DDP(...)): from its next call, hooks of ours around
    the program's (called by the C forward, src/torch/autotrace_forward.c)."""
    entry = _per_module.get(module)
    if entry is None or entry[0] is not None or not P.on:
        return
    _unhook(module, entry)
    del _per_module[module]
    hook_module(module)


_core._at_forward_rehook(_rehook)


def _ours(module: Any, wrapper: Any) -> bool:
    return getattr(module, "__dict__", {}).get("forward") is wrapper


def _unhook(module: Any, entry: Any) -> None:
    pre, post, kind = entry
    if pre is None:
        if _ours(module, kind):
            del module.__dict__["forward"]
    else:
        pre.remove()
        post.remove()


def _to_shims() -> None:
    """torch.compile is in use: forward wrappers and per-module hooks in C
    become Python hook shims."""
    for module, entry in list(_per_module.items()):
        if entry[2] is not True:
            _unhook(module, entry)
            del _per_module[module]
            hook_module(module)


def hook_if_not_searching(module: Any) -> None:
    """A wrapper model (DDP, OptimizedModule) made while no global hooks
    would see it."""
    if not _global[0]:
        try:
            hook_module(module)
        except Exception as exc:
            P.fail(exc)


def end_search() -> None:
    """Removes the global hooks; the top-level modules seen so far get hooks
    of their own.  A forward running now on this thread still ends its event."""
    if not _global[0]:
        return
    _global[0] = False
    _remove_global()
    try:
        depth, top, _ = _core._at_thread()
        running: Optional[Any] = top if depth > 0 else None
        for module in list(_seen):
            hook_module(module)
        if running is not None:  # only from compile_seen(): hooks, not a C forward
            hook_module(running)  # its forward hooks are read when it returns
            _core._at_set_depth(1)
    except Exception as exc:
        P.fail(exc)


def search_again() -> None:
    """A new pass over a DataLoader: look for top-level modules again."""
    if P.on and not _global[0] and not _compiled[0]:
        try:
            _add_global()
        except Exception as exc:
            P.fail(exc)


def compile_seen() -> None:
    first = not _compiled[0]
    _compiled[0] = True
    end_search()
    if first:
        _to_shims()
        for fn in _base.at_compile:
            fn()


def without_module_hooks() -> List[Any]:
    """Takes the per-module hooks and forward wrappers off every module;
    put_back() puts them back."""
    taken = []
    for module, (pre, post, kind) in list(_per_module.items()):
        if pre is None:
            if _ours(module, kind):
                del module.__dict__["forward"]
                taken.append((module, kind))
            continue
        f_pre = module._forward_pre_hooks.pop(pre.id, None)
        f_post = module._forward_hooks.pop(post.id, None)
        always = module._forward_hooks_always_called.pop(post.id, None)
        taken.append((module, pre.id, f_pre, post.id, f_post, always))
    return taken


def put_back(taken: List[Any]) -> None:
    for entry in taken:
        if len(entry) == 2:
            module, wrapper = entry
            module.__dict__.setdefault("forward", wrapper)
            continue
        module, pre_id, f_pre, post_id, f_post, always = entry
        if f_pre is not None:
            module._forward_pre_hooks[pre_id] = f_pre
        if f_post is not None:
            module._forward_hooks[post_id] = f_post
        if always is not None:
            module._forward_hooks_always_called[post_id] = always


def _switch_at_compile(args: Any) -> None:
    compile_seen()


def _watch_optimized_init(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if P.on:  # before __init__, which reads the model's forward, and the first
            compile_seen()  # call, which warns about global hooks
        original(self, *args, **kwargs)
        if P.on:
            hook_if_not_searching(self)

    return __init__


def _register_switch() -> None:
    import torch._dynamo

    handler = torch._dynamo.callback_handler
    if _switch_at_compile not in handler.start_callbacks:
        handler.register_start_callback(_switch_at_compile)


def watch_compile() -> None:
    """Once torch._dynamo is imported: the first compile or OptimizedModule
    ends the global hooks."""
    from torch._dynamo import eval_frame

    _register_switch()
    patch(P, eval_frame.OptimizedModule, "__init__",
          _watch_optimized_init(eval_frame.OptimizedModule.__init__))


def rewatch() -> None:
    """After torch._dynamo.reset(), which drops every compile callback."""
    if P.on and not _compiled[0]:
        try:
            _register_switch()
        except Exception as exc:
            P.fail(exc)


def reset_depth() -> None:
    """Called where no forward can be running: undoes a depth left behind by
    a forward that ended without its hooks (the optimizer's C hook does it)."""
    _core._at_set_depth(0)


def _wrap_getstate(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    @functools.wraps(original)
    def __getstate__(self: Any) -> Any:
        state = original(self)
        try:
            ours = _per_module.get(self)
        except TypeError:  # a module class that is not hashable: never hooked
            return state
        if ours is None or not isinstance(state, dict):
            return state
        state = dict(state)
        pre, post, kind = ours
        if pre is None:  # our forward wrapper: the class's forward comes back
            if state.get("forward") is kind:
                del state["forward"]
            return state
        for key, hook_id in (("_forward_pre_hooks", pre.id), ("_forward_hooks", post.id),
                             ("_forward_hooks_always_called", post.id)):
            hooks = state.get(key)
            if hooks is not None and hook_id in hooks:
                hooks = hooks.copy()
                del hooks[hook_id]
                state[key] = hooks
        return state

    return __getstate__


def _wrap_script(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def script(*args: Any, **kwargs: Any) -> Any:
        taken = without_module_hooks()  # TorchScript would try to compile ours
        try:
            return original(*args, **kwargs)
        finally:
            put_back(taken)

    return script


def _add_global() -> None:
    _handles.append(nn_module.register_module_forward_pre_hook(_pre))
    _handles.append(nn_module.register_module_forward_hook(_post, always_call=True))
    _global[0] = True
    _core._at_searching(True)
    _window[0] = steps.current() + WINDOW_ITERATIONS
    _window[1] = WINDOW_FORWARDS


def _remove_global() -> None:
    _core._at_searching(False)
    for handle in _handles:
        handle.remove()
    _handles.clear()


def _remove_all() -> None:
    _remove_global()
    _global[0] = False
    for module, entry in list(_per_module.items()):
        _unhook(module, entry)
    _per_module.clear()


def _wrap_train(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def train(self: Any, mode: bool = True) -> Any:
        if not _global[0]:
            search_again()  # a training or evaluation pass begins: maybe a new model
        return original(self, mode)

    return train


def install() -> None:
    _core._at_setup(torch.Tensor, torch.nn.Parameter, torch.nn.modules.loss._Loss,
                    torch.is_grad_enabled, torch._C._current_graph_task_id, _search_seen)
    _add_global()
    P.undo_with(_remove_all)
    patch(P, nn_module.Module, "train", _wrap_train(nn_module.Module.train))
    patch(P, nn_module.Module, "__getstate__", _wrap_getstate(nn_module.Module.__getstate__))
    script = _wrap_script(torch.jit.script)
    patch(P, torch.jit, "script", script)
    patch(P, torch.jit._script, "script", script)
    # backward(): both names torch reads (torch.autograd's own, and graph's,
    # which torch.compiler's non-strict tracing swaps and puts back)
    engine = _core._AtEngineRun(torch.autograd.graph._engine_run_backward)
    patch(P, torch.autograd.graph, "_engine_run_backward", engine)
    patch(P, torch.autograd, "_engine_run_backward", engine)
    P.started()
