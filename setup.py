"""Builds dftracer._core from src/*.c against zlib (and CUPTI headers when found)."""

import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH = "dftracer-preload.pth"


class build_py_with_pth(build_py):
    """Also puts the start-up hook at the root of the wheel, i.e. into
    site-packages, where the interpreter reads .pth files (`dftracer run`)."""

    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        self.copy_file(os.path.join(here, PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


def _cupti_include():
    """The CUDA include directory holding cupti.h, or None."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        for sub in ("include", "extras/CUPTI/include"):
            inc = os.path.join(root, sub)
            if os.path.exists(os.path.join(inc, "cupti.h")) and os.path.exists(
                os.path.join(inc, "cuda.h")
            ):
                return inc
    return None


define_macros = [("_GNU_SOURCE", "1")]
include_dirs = ["src"]
cupti = _cupti_include()
if cupti and os.environ.get("DFTRACER_BUILD_CUPTI", "1") != "0":
    define_macros.append(("DFT_HAVE_CUPTI", "1"))
    include_dirs.append(cupti)

extra_compile_args = ["-std=c11", "-Wall", "-Wextra", "-O2", "-fvisibility=hidden"]
extra_link_args = []
if os.environ.get("DFTRACER_SANITIZE"):
    flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"]
    extra_compile_args += flags
    extra_link_args += ["-fsanitize=address,undefined"]

setup(
    cmdclass={"build_py": build_py_with_pth},
    ext_modules=[
        Extension(
            "dftracer._core",
            sources=sorted(glob.glob("src/**/*.c", recursive=True)),
            depends=sorted(glob.glob("src/**/*.h", recursive=True)),
            include_dirs=include_dirs,
            define_macros=define_macros,
            libraries=["z", "dl", "pthread"],
            extra_compile_args=extra_compile_args,
            extra_link_args=extra_link_args,
        )
    ]
)
