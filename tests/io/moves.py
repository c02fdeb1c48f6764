"""A traced program that moves file data with every kind of call dftracer
intercepts, one operation per thread, and measures what each operation really
moved: the calling thread's rchar/wchar (/proc/thread-self/io: the bytes its
read- and write-like system calls returned), or, for splice (which the kernel
does not count there), the sum of what the calls returned.

Usage: python moves.py DATA_DIR OUT.json   (traced: DFTRACER_ENABLE=1, DFTRACER_DATA_DIR)

OUT.json: {"ops": {op: {"tid": ..., "kind": "read"|"write"|"copy"|"splice"|"none",
"moved": bytes, "rchar": ..., "wchar": ...}}, "errors": {call: errno}}.  tests/io/test_io_bytes.py
compares `dftracer summary --by tid` with it.
"""

import ctypes
import json
import mmap
import os
import shutil
import sys
import threading

from dftracer.python import dftracer

DATA, OUT = sys.argv[1], sys.argv[2]
log = dftracer.initialize_log(None, None, -1)
libc = ctypes.CDLL(None, use_errno=True)
P, S, I, L = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_long
for name, res, args in (
        ("fopen", P, [ctypes.c_char_p, ctypes.c_char_p]), ("fclose", I, [P]),
        ("fread", S, [P, S, S, P]), ("fwrite", S, [P, S, S, P]),
        ("fgets", P, [P, I, P]), ("fputs", I, [ctypes.c_char_p, P]),
        ("fgetc", I, [P]), ("fputc", I, [I, P]), ("getline", ctypes.c_ssize_t, [P, P, P]),
        ("fprintf", I, [P, ctypes.c_char_p, ctypes.c_char_p]), ("free", None, [P]),
        ("__read_chk", ctypes.c_ssize_t, [I, P, S, S]),
        ("__pread64_chk", ctypes.c_ssize_t, [I, P, S, L, S]),
        ("__fread_chk", S, [P, S, S, S, P]), ("__fgets_chk", P, [P, S, I, P]),
        ("fallocate", I, [I, I, L, L]), ("sync_file_range", I, [I, L, L, ctypes.c_uint])):
    f = getattr(libc, name)
    f.restype, f.argtypes = res, args


def path(name):
    return os.path.join(DATA, name).encode()


def thread_io():
    fd = os.open("/proc/thread-self/io", os.O_RDONLY)
    text = os.read(fd, 4096)
    os.close(fd)
    fields = dict(line.split(": ") for line in text.decode().splitlines())
    return int(fields["rchar"]), int(fields["wchar"]), len(text)


results = {}
errors = {}


def op(kind):
    """Runs the decorated function in a thread of its own, now."""
    def run(fn):
        out = {}

        def body():
            r0, w0, n0 = thread_io()
            ret = fn()
            r1, w1, _ = thread_io()
            rchar, wchar = r1 - r0 - n0, w1 - w0  # minus the first thread_io's own read
            moved = {"read": rchar, "write": wchar, "copy": rchar, "none": 0}.get(kind, ret)
            out.update(tid=threading.get_native_id(), kind=kind, moved=moved, rchar=rchar,
                       wchar=wchar)

        t = threading.Thread(target=body, name=fn.__name__)
        t.start()
        t.join()
        results[fn.__name__] = out
        return fn
    return run


BLOCK = bytes(range(256)) * 300  # 76,800 bytes


# ---- POSIX ------------------------------------------------------------------------

@op("write")
def write():
    fd = os.open(path("posix.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(3):
        os.write(fd, BLOCK)
    os.close(fd)


@op("read")
def read():
    fd = os.open(path("posix.bin"), os.O_RDONLY)
    while os.read(fd, 50000):
        pass
    os.close(fd)


@op("write")
def pwrite_writev():
    fd = os.open(path("vec.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.pwrite(fd, BLOCK, 0)
    os.writev(fd, [BLOCK, BLOCK[:1000]])
    os.pwritev(fd, [BLOCK[:10], BLOCK[:20]], 500000)
    os.close(fd)


@op("read")
def pread_readv():
    fd = os.open(path("vec.bin"), os.O_RDONLY)
    os.pread(fd, 70000, 100)
    os.readv(fd, [bytearray(1000), bytearray(2000)])
    os.preadv(fd, [bytearray(10), bytearray(100)], 499990)  # 40 bytes left to read
    os.close(fd)


@op("copy")
def sendfile():
    src = os.open(path("posix.bin"), os.O_RDONLY)
    dst = os.open(path("sent.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    offset = 0
    while True:
        n = os.sendfile(dst, src, offset, 100000)
        if n == 0:
            break
        offset += n
    os.close(src)
    os.close(dst)


@op("copy")
def copy_file_range():
    src = os.open(path("posix.bin"), os.O_RDONLY)
    dst = os.open(path("ranged.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    while os.copy_file_range(src, dst, 100000):
        pass
    os.close(src)
    os.close(dst)


@op("splice")
def splice():
    src = os.open(path("posix.bin"), os.O_RDONLY)
    dst = os.open(path("spliced.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    r, w = os.pipe()
    moved = 0
    while True:
        n = os.splice(src, w, 65536)  # file -> pipe
        if n == 0:
            break
        moved += n + os.splice(r, dst, n)  # pipe -> file
    for fd in (src, dst, r, w):
        os.close(fd)
    return moved


@op("copy")
def shutil_copyfile():
    shutil.copyfile(path("posix.bin"), path("copied.bin"))


@op("none")
def sizes_and_syncs():
    fd = os.open(path("sized.bin"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.posix_fallocate(fd, 0, 8192)
    libc.fallocate(fd, 0, 0, 16384)
    os.ftruncate(fd, 4096)
    os.truncate(path("sized.bin"), 8192)
    os.fsync(fd)
    os.fdatasync(fd)
    libc.sync_file_range(fd, 0, 4096, 2)
    with mmap.mmap(fd, 8192) as m:
        m[0:4] = b"abcd"
        m.flush()  # msync
    os.close(fd)
    ro = os.open(path("sized.bin"), os.O_RDONLY)
    try:
        os.posix_fallocate(ro, 0, 10)  # returns EBADF, leaves errno alone
    except OSError as e:
        errors["posix_fallocate"] = e.errno
    os.close(ro)


# ---- stdio (through ctypes: dlsym finds dftracer's wrappers) ------------------------

@op("write")
def fwrite():
    fp = libc.fopen(path("items.bin"), b"wb")
    buf = ctypes.create_string_buffer(BLOCK, len(BLOCK))
    libc.fwrite(buf, 4, len(BLOCK) // 4, fp)  # ret is items: 19,200 of 4 bytes
    libc.fwrite(buf, 1, 1000, fp)
    libc.fclose(fp)


@op("read")
def fread():
    fp = libc.fopen(path("items.bin"), b"rb")
    buf = ctypes.create_string_buffer(len(BLOCK) * 2)
    while libc.fread(buf, 8, 5000, fp):  # the last call returns fewer items than asked
        pass
    libc.fclose(fp)


@op("write")
def fputs_fputc_fprintf():
    fp = libc.fopen(path("lines.txt"), b"w")
    for i in range(200):
        libc.fputs(b"line %d of the file\n" % i, fp)
    for c in b"characters\n":
        libc.fputc(c, fp)
    libc.fprintf(fp, b"%s\n", b"formatted " * 20)
    libc.fclose(fp)


@op("read")
def fgets():
    fp = libc.fopen(path("lines.txt"), b"r")
    buf = ctypes.create_string_buffer(64)
    while libc.fgets(buf, 64, fp):
        pass
    libc.fclose(fp)


@op("read")
def getline():
    fp = libc.fopen(path("lines.txt"), b"r")
    line, cap = ctypes.c_void_p(), ctypes.c_size_t()
    while libc.getline(ctypes.byref(line), ctypes.byref(cap), fp) >= 0:
        pass
    libc.free(line)
    libc.fclose(fp)


@op("read")
def fgetc():
    fp = libc.fopen(path("lines.txt"), b"r")
    while libc.fgetc(fp) >= 0:
        pass
    libc.fclose(fp)


@op("read")
def fortified():
    buf = ctypes.create_string_buffer(100000)
    fd = os.open(path("posix.bin"), os.O_RDONLY)
    libc.__read_chk(fd, buf, 50000, len(buf))
    libc.__pread64_chk(fd, buf, 50000, 200000, len(buf))  # 30,400 bytes left there
    os.close(fd)
    fp = libc.fopen(path("lines.txt"), b"r")
    libc.__fgets_chk(buf, len(buf), 64, fp)
    while libc.__fread_chk(buf, len(buf), 1, 1000, fp):
        pass
    libc.fclose(fp)


# ---- numpy and torch, when installed ------------------------------------------------

try:
    import numpy as np
except ImportError:
    np = None
try:
    import torch
except ImportError:
    torch = None

if np is not None:
    array = np.arange(1 << 18, dtype=np.float32)
    np.save(os.path.join(os.path.dirname(DATA), "warm.npy"), array)  # imports, untraced
    np.load(os.path.join(os.path.dirname(DATA), "warm.npy"))

    @op("write")
    def numpy_save():
        np.save(path("array.npy").decode(), array)

    @op("read")
    def numpy_load():
        np.load(path("array.npy").decode())

if torch is not None:
    tensor = torch.arange(1 << 16, dtype=torch.float32)
    torch.save({"t": tensor}, os.path.join(os.path.dirname(DATA), "warm.pt"))
    torch.load(os.path.join(os.path.dirname(DATA), "warm.pt"))

    @op("write")
    def torch_save():
        torch.save({"t": tensor}, path("tensor.pt").decode())

    @op("read")
    def torch_load():
        torch.load(path("tensor.pt").decode())

log.finalize()
with open(OUT, "w") as f:
    json.dump({"ops": results, "errors": errors}, f)
