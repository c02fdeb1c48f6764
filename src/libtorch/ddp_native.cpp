// libtorch/ddp_native.cpp: DDP's bucket hook as a C++ communication hook, so
// that DDP runs it without Python (no GIL taken per bucket).
//
// Not part of the wheel's _core: it is compiled against the program's own
// libtorch on the user's machine (dftracer/_autotrace/ddp_native.py builds
// it once per torch and keeps it in dftracer's cache), because libtorch's C++
// ABI changes between torch releases and _core links no torch.  It does what
// the C hook does (src/torch/ddp_hook.c): scale the bucket as DDP scales a
// gradient (by 1/size, or / size for torch's built-in ALLREDUCE hook),
// all-reduce it with default options, mark it in flight until it completes
// and then record one comm/all_reduce event, through _core's
// dft_ddp_native_api.  When
// the program registers its own hook or a Join context is active (the slow
// cases, DFT_DDP_SLOW), it calls the C hook with the GIL, as DDP calls a
// Python hook.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "torch/ddp_native_api.h"

namespace {

using PG = c10::intrusive_ptr<c10d::ProcessGroup>;

class NativeHook : public c10d::CppCommHookInterface<PG> {
 public:
  // hook: the _DdpHook (a new reference is taken; the GIL is held)
  NativeHook(PG pg, PyObject* hook, const dft_ddp_native_api* api)
      : c10d::CppCommHookInterface<PG>(std::move(pg)), hook_(hook), api_(api) {
    Py_INCREF(hook_);
    inv_ = 1.0 / static_cast<double>(api_->group_size(hook_));
  }

  ~NativeHook() override {
    if (!Py_IsInitialized())  // the interpreter is gone: nothing to release
      return;
    py::gil_scoped_acquire gil;
    Py_DECREF(hook_);
  }

  // Runs on the autograd thread, without the GIL.
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    int mode = api_->mode(hook_);
    if (mode & DFT_DDP_SLOW)
      return run_python(bucket);
    int64_t start = api_->now_us();
    at::Tensor& buffer = bucket.getBufferRef();
    if (mode & DFT_DDP_DIVIDE)
      buffer.div_(api_->group_size(hook_));
    else
      buffer.mul_(inv_);  // as DDP scales each gradient without a hook
    int64_t bytes = static_cast<int64_t>(buffer.nbytes());
    int64_t index = static_cast<int64_t>(bucket.getIndex());
    int64_t seq = 0;
    int64_t token = api_->launch(hook_, start, index, &seq);  // in flight from here
    const dft_ddp_native_api* api = api_;
    std::vector<at::Tensor> tensors = {buffer};
    c10::intrusive_ptr<c10::ivalue::Future> fut;
    try {
      fut = state_->allreduce(tensors)->getFuture();
    } catch (...) {
      api->landed(token);
      throw;
    }
    PyObject* hook = hook_;  // alive: this object holds it, and DDP this object
    // Runs on the thread that completes the work (gloo's worker), no GIL.
    return fut->then(
        [hook, api, start, bytes, index, seq, token](c10::ivalue::Future& done) {
          api->landed(token);  // completed, even with an error
          c10::IValue value = done.value();  // throws the all-reduce's error: DDP raises it
          api->done(hook, start, bytes, index, seq);
          return value;
        },
        fut->elementType());
  }

  at::Tensor parseHookResult(const c10::IValue& result) override {
    if (result.isPyObject()) {  // from run_python: as DDP reads a Python hook's
      py::gil_scoped_acquire gil;
      py::object obj = torch::jit::toPyObject(result);
      return torch::jit::toIValue(obj, c10::TensorType::get()).toTensor();
    }
    return c10d::detail::parseCppCommHookResult(result);
  }

 private:
  // The C hook (which calls the program's hook, or scales by the Join
  // divisor), called as DDP calls a Python hook.
  c10::intrusive_ptr<c10::ivalue::Future> run_python(c10d::GradBucket& bucket) {
    py::gil_scoped_acquire gil;
    py::object result = py::reinterpret_borrow<py::object>(hook_)(py::none(), bucket);
    return result.cast<std::shared_ptr<torch::jit::PythonFutureWrapper>>()->fut;
  }

  PyObject* hook_;
  const dft_ddp_native_api* api_;
  double inv_;
};

const dft_ddp_native_api* api_of(py::object capsule) {
  void* p = PyCapsule_GetPointer(capsule.ptr(), "dftracer._core._ddp_native_api");
  if (!p)
    throw py::error_already_set();
  auto* api = static_cast<const dft_ddp_native_api*>(p);
  if (api->version != DFT_DDP_NATIVE_API_VERSION || api->size < sizeof(dft_ddp_native_api))
    throw std::runtime_error("dftracer._core's DDP hook interface is another version");
  return api;
}

// register(reducer, process_group, hook, api): hook the reducer.  Raises
// RuntimeError when the reducer has a hook already.
void register_hook(py::object reducer, py::object process_group, py::object hook,
                   py::object api) {
  auto r = reducer.cast<std::shared_ptr<c10d::Reducer>>();
  auto pg = process_group.cast<PG>();
  r->register_comm_hook(std::make_unique<NativeHook>(pg, hook.ptr(), api_of(api)));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "dftracer's DDP bucket hook, built against this torch";
  m.def("register", &register_hook, py::arg("reducer"), py::arg("process_group"),
        py::arg("hook"), py::arg("api"));
}
