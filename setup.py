"""Builds dftracer._core from the C sources under src/ against zlib (and CUPTI
headers when found).  Everything else (metadata, packages, data files) is in
pyproject.toml and MANIFEST.in.

Build switches (environment): DFTRACER_SANITIZE=1 (ASan + UBSan),
DFTRACER_BUILD_CUPTI=0 (no CUPTI), DFTRACER_FRAME_HOOK_MAX_PY=0x030A (treat
CPython newer than 3.10 as untested for the frame hook; for tests),
DFTRACER_BUILD_TESTCORE=1 (also build the test extension, _dftracer_testcore:
the same sources with the core's test hooks and src/testing/, for the test and
benchmark targets of the Makefile; never in a wheel) or =only (just that one),
DFTRACER_BUILD_JOBS=N (compilers run at once; default: build_ext's -j, else
the CPUs this process may use).
"""

import glob
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
PTH = "dftracer-preload.pth"


def _version():
    """dftracer/_version.py's __version__ (the single source of truth)."""
    with open(os.path.join(HERE, "dftracer", "_version.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not m:
        raise RuntimeError("dftracer/_version.py: no __version__ = \"...\" line")
    return m.group(1)


# The native DDP hook's sources, built on the user's machine against their
# torch (dftracer/_autotrace/ddp_native.py), go into the package.
# (laid out as under src/: native/libtorch/ddp_native.cpp includes
# "torch/ddp_native_api.h").
NATIVE_SOURCES = ["libtorch/ddp_native.cpp", "torch/ddp_native_api.h"]
NATIVE_DIR = os.path.join("dftracer", "_autotrace", "native")


class build_py_with_pth(build_py):
    """Also puts the start-up hook at the root of the wheel, i.e. into
    site-packages, where the interpreter reads .pth files (`dftracer run`),
    and the native DDP hook's sources into dftracer/_autotrace/native/."""

    def native_outputs(self):
        return [os.path.join(self.build_lib, NATIVE_DIR, p) for p in NATIVE_SOURCES]

    def run(self):
        super().run()
        self.copy_file(os.path.join(HERE, PTH), os.path.join(self.build_lib, PTH))
        for src, dst in zip(NATIVE_SOURCES, self.native_outputs()):
            self.mkpath(os.path.dirname(dst))
            self.copy_file(os.path.join(HERE, "src", src), dst)

    def get_outputs(self, include_bytecode=1):
        return (super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)] +
                self.native_outputs())


BUILD_STAMP = "dftracer-build-config"


def build_config_changed(build_temp, config):
    """True when build_temp holds objects compiled with another build
    configuration than config (a string: the deflate library's macros and
    libraries, the flags); records config there for the next build."""
    stamp = os.path.join(build_temp, BUILD_STAMP)
    try:
        with open(stamp, encoding="utf-8") as f:
            had = f.read()
    except OSError:
        had = None
    os.makedirs(build_temp, exist_ok=True)
    with open(stamp, "w", encoding="utf-8") as f:
        f.write(config)
    return had is not None and had != config


def _up_to_date(obj):
    """True when obj is newer than its source and every header it included,
    as the compiler listed them in obj.d (-MMD) at the last build."""
    try:
        with open(obj + ".d", encoding="utf-8") as f:
            deps = f.read().replace("\\\n", " ").split(":", 1)[1].split()
        built = os.stat(obj).st_mtime
        return all(os.stat(d).st_mtime <= built for d in deps)
    except (OSError, IndexError):
        return False


def _compile_in_parallel(compiler, jobs, force):
    """Makes compiler.compile run up to jobs compilers at once (the extension is
    ~190 files that distutils compiles one after the other, most of a build's
    time on a machine with more than one core; threads only wait for the
    compiler processes), and compile only what changed: each object records
    the headers it included (-MMD) and is left as it is while neither its
    source nor one of them is newer (force(): the build configuration
    changed, or --force).  Left as it is if this distutils lacks the steps."""
    steps = ("_setup_compile", "_get_cc_args", "_compile")
    if not all(hasattr(compiler, s) for s in steps):
        return

    def compile(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                extra_preargs=None, extra_postargs=None, depends=None):
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
        again = force()

        def one(obj):
            if not again and _up_to_date(obj):
                return
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, list(extra_postargs or []) +
                              ["-MMD", "-MF", obj + ".d"], pp_opts)

        with ThreadPoolExecutor(max(jobs, 1)) as pool:  # an error is raised again here
            list(pool.map(one, [obj for obj in objects if obj in build]))
        return objects

    compiler.compile = compile


def _build_jobs(asked):
    """build_ext's --parallel (-j) when given, else DFTRACER_BUILD_JOBS, else
    the CPUs this process may run on."""
    if asked:
        return int(asked)
    value = os.environ.get("DFTRACER_BUILD_JOBS", "").strip()
    if value:
        try:
            if int(value) >= 1:
                return int(value)
        except ValueError:
            pass
        print(f"warning: DFTRACER_BUILD_JOBS={value!r} is not a positive number: "
              f"using {_cpus()}", file=sys.stderr)
    return _cpus()


def _cpus():
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


class build_ext_checked(build_ext):
    """Says which deflate library the build uses (one line), and rebuilds every
    object when the build configuration (the library, macros, flags) differs
    from the one the objects in build_temp were compiled with: an object of
    core/compress.c built for another library must never be linked again."""

    def run(self):
        print(_BACKEND_LINE, file=sys.stderr)
        changed = False
        for ext in self.extensions:  # each checked, each stamp kept up to date
            config = repr((ext.define_macros, ext.libraries, ext.extra_compile_args,
                           ext.extra_link_args))
            changed |= build_config_changed(self._temp_of(ext), config)
        if changed and not self.force:
            print("dftracer build: the build configuration changed since the objects in "
                  f"{self.build_temp} were compiled: rebuilding them all", file=sys.stderr)
            self.force = True
        # distutils' own --parallel builds extensions side by side, not one
        # extension's files: the files are compiled in parallel instead.
        self._jobs, self.parallel = _build_jobs(self.parallel), None
        super().run()

    def build_extensions(self):
        _compile_in_parallel(self.compiler, self._jobs, lambda: bool(self.force))
        super().build_extensions()

    def _temp_of(self, ext):
        return os.path.join(self.build_temp, "testcore") if ext.name == TESTCORE else self.build_temp

    def build_extension(self, ext):
        """The test extension's objects go to a folder of their own: its
        sources are the core's with other macros, so they must not share
        objects."""
        if ext.name != TESTCORE:
            return super().build_extension(ext)
        temp = self.build_temp
        self.build_temp = self._temp_of(ext)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = temp


class sdist_sources_only(sdist):
    """Leaves out of the sdist what builds and test runs leave in the tree
    (MANIFEST.in's global-exclude would warn whenever there is none)."""

    BUILT = re.compile(r"(^|/)__pycache__/|\.(so|o|py[co]|pfw|pfw\.gz)$")

    def make_distribution(self):
        self.filelist.files = [f for f in self.filelist.files if not self.BUILT.search(f)]
        super().make_distribution()


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


def _compression_backend():
    """(name, define_macros, libraries) of the deflate library for the writer.

    DFTRACER_COMPRESSION_BACKEND=auto (default) takes ISA-L's igzip when its
    header and library link, else libdeflate, else zlib, which the build needs
    anyway; isal, libdeflate or zlib forces one (an error if it does not link)."""
    want = os.environ.get("DFTRACER_COMPRESSION_BACKEND", "auto").strip().lower() or "auto"
    found = {
        "isal": ("isa-l/igzip_lib.h", "isal", "DFT_COMPRESS_ISAL"),
        "libdeflate": ("libdeflate.h", "deflate", "DFT_COMPRESS_LIBDEFLATE"),
    }
    if want not in ("auto", "zlib", *found):
        raise SystemExit(f"DFTRACER_COMPRESSION_BACKEND={want!r}: use auto, isal, libdeflate or zlib")
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    for name in (list(found) if want == "auto" else [want] if want in found else []):
        header, lib, macro = found[name]
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "t.c")
            with open(src, "w") as f:
                f.write(f"#include <{header}>\nint main(void) {{ return 0; }}\n")
            try:
                ok = subprocess.run(cc + [src, "-o", os.path.join(tmp, "t"), "-l" + lib],
                                    capture_output=True).returncode == 0
            except OSError:
                ok = False
        if ok:
            return name, [(macro, "1")], [lib]
        if want != "auto":
            raise SystemExit(f"DFTRACER_COMPRESSION_BACKEND={want}: <{header}> with -l{lib} does not build")
    return "zlib", [], []


define_macros = [("_GNU_SOURCE", "1"), ("DFT_VERSION", '"%s"' % _version())]
if os.environ.get("DFTRACER_FRAME_HOOK_MAX_PY"):
    define_macros.append(("DFT_FRAME_HOOK_MAX_PY", os.environ["DFTRACER_FRAME_HOOK_MAX_PY"]))
include_dirs = ["src"]
cupti = _cupti_include()
if cupti and os.environ.get("DFTRACER_BUILD_CUPTI", "1") != "0":
    define_macros.append(("DFT_HAVE_CUPTI", "1"))
    include_dirs.append(cupti)

_backend, _backend_macros, _backend_libs = _compression_backend()
define_macros += _backend_macros
_BACKEND_LINE = {
    "isal": "dftracer build: deflate library ISA-L (igzip), the fastest under a flood of events",
    "libdeflate": "dftracer build: deflate library libdeflate; install libisal-dev (ISA-L) and "
                  "rebuild for the fastest writer under a flood of events",
    "zlib": "dftracer build: no libisal-dev or libdeflate-dev found, building with zlib alone: "
            "traces are as small, but the writer is slower under a flood of events "
            "(install libisal-dev and rebuild; README, Install)",
}[_backend]
if os.environ.get("DFTRACER_COMPRESSION_BACKEND", "auto").strip().lower() == _backend != "isal":
    _BACKEND_LINE = (f"dftracer build: deflate library {_backend} "
                     f"(DFTRACER_COMPRESSION_BACKEND={_backend})")

extra_compile_args = ["-std=c11", "-Wall", "-Wextra", "-O2", "-fvisibility=hidden"]
extra_link_args = []
if os.environ.get("DFTRACER_SANITIZE"):
    flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"]
    extra_compile_args += flags
    extra_link_args += ["-fsanitize=address,undefined"]

# src/testing/ is the test extension's alone.
SOURCES = sorted(glob.glob("src/**/*.c", recursive=True))
CORE_SOURCES = [f for f in SOURCES if not f.startswith("src/testing/")]
TESTCORE = "_dftracer_testcore"
_testcore = os.environ.get("DFTRACER_BUILD_TESTCORE", "0").strip().lower()
if _testcore not in ("0", "1", "only"):
    raise SystemExit(f"DFTRACER_BUILD_TESTCORE={_testcore!r}: use 0, 1 or only")
if _testcore != "0" and {"bdist_wheel", "sdist", "install", "develop", "editable_wheel"} & set(sys.argv):
    raise SystemExit("DFTRACER_BUILD_TESTCORE is for `setup.py build` and `build_ext`: the test "
                     "extension never goes into a package")


def _extension(name, sources, macros):
    return Extension(
        name,
        sources=sources,
        depends=sorted(glob.glob("src/**/*.h", recursive=True)),
        include_dirs=include_dirs,
        define_macros=define_macros + macros,
        libraries=_backend_libs + ["z", "dl", "pthread"],
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
    )


def main():
    ext_modules = []
    if _testcore != "only":
        ext_modules.append(_extension("dftracer._core", CORE_SOURCES, []))
    if _testcore != "0":
        ext_modules.append(_extension(TESTCORE, SOURCES, [("DFT_TESTING", "1")]))
    setup(
        cmdclass={"build_py": build_py_with_pth, "sdist": sdist_sources_only,
                  "build_ext": build_ext_checked},
        ext_modules=ext_modules,
    )


if __name__ == "__main__":  # so it is for `python setup.py` and pip's build backend alike
    main()
