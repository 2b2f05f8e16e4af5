"""projd — Python binding of libprojd, the C client library of projd.

projd serves ``y[m, n] = x[m, k] @ W[:n, k]^T`` (bf16 in and out, fp32
accumulation) to other processes over nng IPC; see client/projd.h for the C
contract this module wraps through ctypes. Pure standard library, Python 3.9+.

The library is found, in this order:
  1. ``$PROJD_LIB``: a path to libprojd.so (or a directory holding it); when
     it is set and does not load, that is an error (no silent fallback);
  2. next to this file's installed prefix: for each of the four folders above
     this file, ``<dir>/lib/libprojd.so.1``, ``<dir>/lib/libprojd.so`` and
     ``<dir>/build/lib/libprojd.so`` (``make install`` puts this module in
     PREFIX/share/projd/python and the library in PREFIX/lib; in the source
     tree the default build is build/lib);
  3. ``ctypes.util.find_library("projd")``.
It is loaded at the first ``Client`` (the bf16 helpers work without it).

Example (host shared memory, the cpu or cuda backend)::

    import projd
    with projd.Client("ipc:///tmp/t/projd.sock") as c:
        o = c.layer("o")
        m = 8
        with c.shm_buffer(m * o.k * 2) as x, c.shm_buffer(m * o.n * 2) as y:
            x.write(projd.floats_to_bf16([0.5] * (m * o.k)))
            r = c.project([projd.Op(layer="o", m=m, x_buf=x, y_buf=y)])
            out = projd.bf16_to_floats(y.read())   # m rows of o.n values

bf16 values in buffers are native-endian 16-bit words, as C's uint16_t.

Threads: a Client may be used from many threads at once (libprojd is
thread-safe and ctypes releases the GIL during every call); ``close`` waits
for calls in progress on other threads (each is bounded by the timeout, a
registration by twice it: its REGISTER is sent once more after a timeout).

Processes: nng, beneath libprojd, aborts a forked child that uses it once
the parent has. So a Client, its buffers and requests belong to the process
that opened them: in a fork (os.fork, multiprocessing's "fork" method)
whatever would call libprojd (a request, wait, done, ping, release) raises
RuntimeError instead, and they are dropped there without it; a new Client
there raises RuntimeError too once the parent has connected. A buffer's
memory stays mapped in the child (read, write, view): it is the parent's,
which the daemon reads and writes for the parent's requests. Start processes that connect with multiprocessing's "spawn" or
"forkserver" method, or fork before the first Client.
"""

import array
import ctypes
import ctypes.util
import dataclasses
import enum
import errno as _errno
import json
import math
import numbers
import operator
import os
import struct
import sys
import threading
import time
import weakref
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__all__ = [
    "Client",
    "ShmBuffer",
    "Request",
    "Op",
    "PackedOps",
    "OpResult",
    "Result",
    "Info",
    "Limits",
    "LayerInfo",
    "CudaRegion",
    "CudaRegistration",
    "ProjdError",
    "LibraryNotFoundError",
    "Status",
    "PF_WAIT_EVENT",
    "PF_SIGNAL_EVENT",
    "PF_ACCEPT_REPLY",
    "DEFAULT_TIMEOUT_MS",
    "load_library",
    "cuda_describe",
    "cuda_allocation",
    "float_to_bf16",
    "bf16_to_float",
    "floats_to_bf16",
    "bf16_to_floats",
]

# ---- constants of client/projd.h and protocol/wire.h ------------------------------

DEFAULT_TIMEOUT_MS = 30000  # PROJD_DEFAULT_TIMEOUT_MS
RESULT_MAX_OPS = 64  # PROJD_RESULT_MAX_OPS: per-op results kept per request
_NAME_MAX = 63  # PJ_WIRE_NAME_MAX
_UUID_SIZE = 16  # PJ_WIRE_UUID_SIZE
_IPC_HANDLE_SIZE = 64  # PJ_WIRE_IPC_HANDLE_SIZE
_MAX_LAYERS = 64  # PJ_WIRE_MAX_LAYERS: the layers pj_welcome holds inline
_MAX_LAYERS_ALL = 1024  # PJ_WIRE_MAX_LAYERS_ALL: the most a daemon serves
_MAX_SHAPES = 64  # PJ_WIRE_MAX_SHAPES
_ERR_MSG_SIZE = 1024  # projd_error.msg
_NO_OP = 0xFFFFFFFF  # projd_result.failed_op when no op failed

PF_WAIT_EVENT = 0x1  # PJ_PF_WAIT_EVENT: set by project(wait_event=...)
PF_SIGNAL_EVENT = 0x2  # PJ_PF_SIGNAL_EVENT: set by project(signal_event=...)
PF_ACCEPT_REPLY = 0x4  # PJ_PF_ACCEPT_REPLY (needs SIGNAL_EVENT)

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF


class Status(enum.IntEnum):
    """pj_status: the codes the daemon answers (protocol/PROTOCOL.md)."""

    OK = 0
    E_PROTO = 1
    E_VERSION = 2
    E_TYPE = 3
    E_FLAGS = 4
    E_TOO_BIG = 5
    E_LAYER = 6
    E_SHAPE = 7
    E_BOUNDS = 8
    E_BUFFER = 9
    E_LIMIT = 10
    E_AUTH = 11
    E_REGISTER = 12
    E_BACKEND = 13
    E_SHUTDOWN = 14
    E_INTERNAL = 15
    E_NOHELLO = 16


# ---- errors ---------------------------------------------------------------------------


class LibraryNotFoundError(OSError):
    """libprojd.so could not be loaded; the message lists what was tried."""


class ProjdError(Exception):
    """A failed libprojd call.

    code     > 0: a Status the daemon sent (ERROR, or a failing op of DONE);
             < 0: a local failure as a negative errno (-ETIMEDOUT, -ENOENT, ...)
    name     projd_strerror(code): "E_BOUNDS", or strerror's text
    message  libprojd's one-line message (the daemon's text for ERROR)
    failed_op  index of the failing op of a PROJECT, else None
    result   the Result of a PROJECT that failed (timings may be 0), else None
    """

    def __init__(
        self,
        code: int,
        name: str,
        message: str,
        failed_op: Optional[int] = None,
        result: "Optional[Result]" = None,
    ):
        super().__init__(code, name, message)
        self.code = code
        self.name = name
        self.message = message
        self.failed_op = failed_op
        self.result = result

    @property
    def status(self) -> Optional[Status]:
        """The code as a Status when the daemon sent it, else None."""
        try:
            return Status(self.code) if self.code > 0 else None
        except ValueError:
            return None

    @property
    def errno(self) -> Optional[int]:
        """The positive errno of a local failure, else None."""
        return -self.code if self.code < 0 else None

    def __str__(self) -> str:
        where = "" if self.failed_op is None else ", op %d" % self.failed_op
        return "%s (%s, code %d%s)" % (self.message or self.name, self.name, self.code, where)


# ---- ctypes mirrors of the C structs ----------------------------------------------------
# Field order and types follow client/projd.h and protocol/wire.h exactly;
# ctypes applies the platform's C alignment, so the padding matches too
# (tests/e2e_python.sh compares every offset with the C compiler's).


class _Error(ctypes.Structure):  # projd_error
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * _ERR_MSG_SIZE)]


class _WireLayer(ctypes.Structure):  # pj_wire_layer
    _fields_ = [
        ("name", ctypes.c_char * (_NAME_MAX + 1)),
        ("n", ctypes.c_uint32),
        ("k", ctypes.c_uint32),
        ("format", ctypes.c_uint8),
    ]


class _Welcome(ctypes.Structure):  # pj_welcome = projd_info
    _fields_ = [
        ("version", ctypes.c_uint16),
        ("backend", ctypes.c_uint16),
        ("device_uuid", ctypes.c_uint8 * _UUID_SIZE),
        ("max_m", ctypes.c_uint32),
        ("max_ops_per_request", ctypes.c_uint32),
        ("max_buffers", ctypes.c_uint32),
        ("max_message_bytes", ctypes.c_uint32),
        ("n_layers", ctypes.c_uint32),
        ("layers", _WireLayer * _MAX_LAYERS),
        ("n_shapes", ctypes.c_uint32),
        ("shapes", ctypes.c_uint32 * _MAX_SHAPES),
        # every layer (layers holds the first 64): NULL means layers itself
        ("n_layers_all", ctypes.c_uint32),
        ("layers_all", ctypes.POINTER(_WireLayer)),
    ]


class _Op(ctypes.Structure):  # pj_op = projd_op (56 bytes, PJ_WIRE_OP_SIZE)
    _fields_ = [
        ("layer", ctypes.c_uint32),
        ("m", ctypes.c_uint32),
        ("n", ctypes.c_uint32),
        ("x_buf", ctypes.c_uint32),
        ("x_off", ctypes.c_uint64),
        ("x_ld", ctypes.c_uint64),
        ("y_buf", ctypes.c_uint32),
        ("op_flags", ctypes.c_uint32),
        ("y_off", ctypes.c_uint64),
        ("y_ld", ctypes.c_uint64),
    ]


class _OpResult(ctypes.Structure):  # pj_op_result
    _fields_ = [("status", ctypes.c_int32), ("engine", ctypes.c_uint16)]


class _Result(ctypes.Structure):  # projd_result
    _fields_ = [
        ("status", ctypes.c_int32),
        ("n_ops", ctypes.c_uint32),
        ("failed_op", ctypes.c_uint32),
        ("queue_ns", ctypes.c_uint64),
        ("exec_ns", ctypes.c_uint64),
        ("total_ns", ctypes.c_uint64),
        ("ops", _OpResult * RESULT_MAX_OPS),
    ]


class _CudaRegion(ctypes.Structure):  # projd_cuda_region (client/projd_cuda.h)
    _fields_ = [
        ("base", ctypes.c_void_p),
        ("alloc_size", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("device", ctypes.c_int),
        ("handle", ctypes.c_uint8 * _IPC_HANDLE_SIZE),
        ("uuid", ctypes.c_uint8 * _UUID_SIZE),
    ]


# The C layouts the e2e suite checks (struct name -> ctypes type).
_C_STRUCTS = {
    "projd_error": _Error,
    "pj_wire_layer": _WireLayer,
    "projd_info": _Welcome,
    "projd_op": _Op,
    "pj_op_result": _OpResult,
    "projd_result": _Result,
    "projd_cuda_region": _CudaRegion,
}

# ---- loading the library -------------------------------------------------------------

_P = ctypes.c_void_p
_PE = ctypes.POINTER(_Error)
_SIGNATURES = {
    # name: (restype, argtypes)
    "projd_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_P), _PE]),
    "projd_close": (None, [_P]),
    "projd_ring_attach": (ctypes.c_int, [_P, ctypes.c_uint32, _PE]),
    "projd_ring_active": (ctypes.c_int, [_P]),
    "projd_set_timeout_ms": (ctypes.c_int, [_P, ctypes.c_int]),
    "projd_get_timeout_ms": (ctypes.c_int, [_P]),
    "projd_url": (ctypes.c_char_p, [_P]),
    "projd_info_get": (ctypes.POINTER(_Welcome), [_P]),
    "projd_layer_find": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "projd_backend_name": (ctypes.c_char_p, [ctypes.c_int]),
    "projd_format_name": (ctypes.c_char_p, [ctypes.c_int]),
    "projd_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "projd_shm_create": (ctypes.c_int, [_P, ctypes.c_size_t, ctypes.POINTER(_P), _PE]),
    "projd_buffer_release": (ctypes.c_int, [_P, _PE]),
    "projd_buffer_ptr": (_P, [_P]),
    "projd_buffer_id": (ctypes.c_uint32, [_P]),
    "projd_buffer_size": (ctypes.c_size_t, [_P]),
    "projd_register_cuda_ipc": (
        ctypes.c_int,
        [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint32), _PE],
    ),
    "projd_unregister": (ctypes.c_int, [_P, ctypes.c_uint32, _PE]),
    "projd_project": (
        ctypes.c_int,
        [_P, ctypes.POINTER(_Op), ctypes.c_size_t, ctypes.c_uint32, ctypes.POINTER(_Result), _PE],
    ),
    "projd_project_async": (
        ctypes.c_int,
        [_P, ctypes.POINTER(_Op), ctypes.c_size_t, ctypes.c_uint32, _P, _P, ctypes.POINTER(_P), _PE],
    ),
    "projd_project_events": (
        ctypes.c_int,
        [
            _P, ctypes.POINTER(_Op), ctypes.c_size_t, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p,
            _P, _P, ctypes.POINTER(_P), ctypes.POINTER(_Result), _PE,
        ],
    ),
    "projd_request_poll": (ctypes.c_int, [_P]),
    "projd_request_wait": (ctypes.c_int, [_P, ctypes.POINTER(_Result), _PE]),
    "projd_request_result": (ctypes.c_int, [_P, ctypes.POINTER(_Result), _PE]),
    "projd_request_free": (None, [_P]),
    "projd_stats_json": (ctypes.c_int, [_P, ctypes.POINTER(_P), _PE]),
    "projd_ping": (ctypes.c_int, [_P, _PE]),
}
# Exported only by some builds (client/projd_cuda.c is not part of libprojd.so
# as the Makefile builds it today); bound when present.
_OPTIONAL_SIGNATURES = {
    # libprojd 0.2 (PROJD_1.1): the connect bounded by the caller's timeout
    "projd_connect_timeout": (
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(_P), _PE],
    ),
    "projd_cuda_describe": (
        ctypes.c_int,
        [_P, ctypes.POINTER(_CudaRegion), ctypes.c_char_p, ctypes.c_size_t],
    ),
    # libprojd 0.3 (PROJD_1.2): every layer, past the 64 projd_info holds
    "projd_layer_count": (ctypes.c_uint32, [_P]),
    "projd_layer_get": (ctypes.POINTER(_WireLayer), [_P, ctypes.c_uint32]),
}

_lib = None
_lib_path = None
_libc_free = None
_lib_lock = threading.Lock()
# The process that first called projd_connect, which starts nng: any fork
# of it cannot use nng (it panics), so cannot connect either.
_nng_pid = None


def _candidate_paths() -> List[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    d = here
    for _ in range(4):
        d = os.path.dirname(d)
        out += [
            os.path.join(d, "lib", "libprojd.so.1"),
            os.path.join(d, "lib", "libprojd.so"),
            os.path.join(d, "build", "lib", "libprojd.so"),
        ]
    return out


def _bind(lib: ctypes.CDLL, path: str) -> None:
    missing = [name for name in _SIGNATURES if not hasattr(lib, name)]
    if missing:
        raise LibraryNotFoundError(
            "%s is not the libprojd this module wraps: it lacks %s" % (path, ", ".join(missing))
        )
    for table in (_SIGNATURES, _OPTIONAL_SIGNATURES):
        for name, (restype, argtypes) in table.items():
            if hasattr(lib, name):
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes


def load_library() -> ctypes.CDLL:
    """Load and bind libprojd once (see the module docstring for where)."""
    global _lib, _lib_path, _libc_free
    # Without the lock once loaded: finalizers (__del__) call this, and the
    # collector may run them on a thread that holds the lock.
    lib = _lib
    if lib is not None:
        return lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        lib = None
        env = os.environ.get("PROJD_LIB")
        if env:
            path = os.path.join(env, "libprojd.so") if os.path.isdir(env) else env
            try:
                lib = ctypes.CDLL(path)
            except OSError as exc:
                raise LibraryNotFoundError(
                    "PROJD_LIB=%s: cannot load %s: %s" % (env, path, exc)
                ) from None
        else:
            for path in _candidate_paths():
                if not os.path.exists(path):
                    tried.append(path + " (absent)")
                    continue
                try:
                    lib = ctypes.CDLL(path)
                    break
                except OSError as exc:
                    tried.append("%s (%s)" % (path, exc))
            if lib is None:
                name = ctypes.util.find_library("projd")
                if name is None:
                    tried.append('ctypes.util.find_library("projd") (found nothing)')
                else:
                    path = name
                    try:
                        lib = ctypes.CDLL(name)
                    except OSError as exc:
                        tried.append('ctypes.util.find_library("projd") -> %s (%s)' % (name, exc))
            if lib is None:
                raise LibraryNotFoundError(
                    "libprojd not found; PROJD_LIB is not set, and these did not load: %s. "
                    "Build it with `make` (it lands in BUILD/lib/libprojd.so) and set "
                    "PROJD_LIB to that file." % "; ".join(tried)
                )
        _bind(lib, path)
        # projd_stats_json hands back malloc'd text; it goes back to the
        # same C library's free (libprojd links the process's libc).
        libc = ctypes.CDLL(None)
        libc.free.restype = None
        libc.free.argtypes = [_P]
        _libc_free = libc.free
        _lib, _lib_path = lib, path
        return lib


def _text(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b is not None else ""


def _strerror(code: int) -> str:
    return _text(load_library().projd_strerror(code))


def _error(code: int, e: _Error, failed_op: Optional[int] = None, result=None) -> ProjdError:
    msg = _text(e.msg) if e.code == code else ""
    return ProjdError(code, _strerror(code), msg, failed_op, result)


# ---- argument checks (before anything reaches C) --------------------------------------


def _is_bool(value: Any) -> bool:
    # bool is an int subclass, and numpy's bool_ converts to one; True as a
    # size, an index or a value is a bug, not a 1.
    return isinstance(value, bool) or type(value).__name__ == "bool_"


def _uint(value: Any, what: str, limit: int = _U64, low: int = 0) -> int:
    # Any integer type is taken through __index__ (numpy's int64 from an
    # array's shape, say); a float is not, as 2.0 rows is a bug.
    if _is_bool(value):
        raise TypeError("%s must be an int, not %s" % (what, type(value).__name__))
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an int, not %s" % (what, type(value).__name__)) from None
    if value < low or value > limit:
        raise ValueError("%s must be in %d..%d, got %d" % (what, low, limit, value))
    return value


def _ident(value: Any, what: str) -> int:
    return _uint(value, what, _U32)


# ---- bf16 helpers ------------------------------------------------------------------------


def bf16_to_float(bits: int) -> float:
    """The value of a bf16 bit pattern (exact)."""
    bits = _uint(bits, "bf16 bits", 0xFFFF)
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def _f32_bits_to_bf16(u: int) -> int:
    # pj_f32_to_bf16 of kernels/bf16.h: round to nearest even on the fp32
    # bits; a NaN stays a (quiet) NaN with its sign.
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
        return ((u >> 16) | 0x0040) & 0xFFFF
    u += 0x7FFF + ((u >> 16) & 1)
    return (u >> 16) & 0xFFFF


def float_to_bf16(x: float) -> int:
    """Round a Python float to the nearest bf16 (ties to even); the bit pattern.

    Rounds the double directly (going through fp32 first could round twice).
    NaN -> a quiet NaN of the same sign, overflow -> +-inf, bf16 subnormals kept.
    """
    # Any real number (numpy's float32 and int64 among them), taken as a
    # double: float32 and smaller convert exactly.
    if _is_bool(x) or not isinstance(x, numbers.Real):
        raise TypeError("bf16 value must be a float, not %s" % type(x).__name__)
    x = float(x)
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if x != x:
        return sign | 0x7FC0
    a = abs(x)
    if a == math.inf:
        return sign | 0x7F80
    if a == 0.0:
        return sign
    _, e = math.frexp(a)  # a = f * 2**e with 0.5 <= f < 1
    if e > 128:
        return sign | 0x7F80
    # bf16 keeps 8 significant bits down to 2**-126 (e >= -125); below it
    # the spacing is that of its subnormals, 2**-133.
    shift = 8 - e if e >= -125 else 133
    q = round(math.ldexp(a, shift))  # exact scaling; round() ties to even
    if e == 128 and q >= 256:
        return sign | 0x7F80
    v = math.ldexp(q, -shift)  # at most 8 significant bits: exact in fp32
    return sign | (struct.unpack("<I", struct.pack("<f", v))[0] >> 16)


def floats_to_bf16(values: Sequence[float]) -> bytes:
    """bf16 (native-endian 16-bit words) of each value, rounded to nearest even."""
    return array.array("H", [float_to_bf16(v) for v in values]).tobytes()


def bf16_to_floats(data: Union[bytes, bytearray, memoryview]) -> List[float]:
    """The values of native-endian bf16 words (len(data) must be even).

    data is bytes, or an array of native-endian 16-bit words (numpy's
    uint16, say); an array of other items (float32, float16) or of the
    other byte order is refused with TypeError, not read as bf16 words."""
    mv = memoryview(data)
    # float16 ('e') has 2-byte items too, but is not bf16.
    if mv.itemsize not in (1, 2) or mv.format.lstrip("@=<>!") == "e":
        raise TypeError(
            "bf16 data must be bytes or 16-bit words, not items of format %r (%d bytes)"
            % (mv.format, mv.itemsize)
        )
    # Words of the other byte order would be read swapped.
    other = "<" if sys.byteorder == "big" else ">!"
    if mv.itemsize == 2 and mv.format[:1] in other:
        raise TypeError(
            "bf16 data of format %r is not in this machine's byte order (%s endian)"
            % (mv.format, sys.byteorder)
        )
    mv = mv.cast("B")
    if len(mv) % 2:
        raise ValueError("bf16 data has an odd length (%d bytes)" % len(mv))
    words = array.array("H")
    words.frombytes(mv)
    out = array.array("f")
    out.frombytes(array.array("I", [w << 16 for w in words]).tobytes())
    return out.tolist()


# ---- weight digests ----------------------------------------------------------------------

DIGEST_PIECE = 1 << 20


def weight_digest(data: Any) -> int:
    """The digest projd reports for a layer (STATS model.layers[].digest, and
    `projctl inspect`), of a tensor's bytes as its safetensors file stores
    them (same dtype, row-major): the CRC-32 of the CRC-32s of its 1 MiB
    pieces, each as 4 little-endian bytes (daemon/digest.h). data: any
    C-contiguous buffer (bytes, array, numpy array)."""
    mv = memoryview(data)
    if not mv.c_contiguous:
        raise ValueError("weight_digest needs C-contiguous data")
    mv = mv.cast("B")
    crcs = b"".join(
        zlib.crc32(mv[i : i + DIGEST_PIECE]).to_bytes(4, "little") for i in range(0, len(mv), DIGEST_PIECE)
    )
    return zlib.crc32(crcs)


def _digests(model: Dict[str, Any]) -> Dict[str, int]:
    """STATS' "model" object's layer digests by layer name."""
    return {L["name"]: int(L["digest"], 16) for L in model.get("layers", [])}


# ---- descriptions ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Limits:
    max_m: int  # largest m a request may use
    max_ops_per_request: int
    max_buffers: int  # per connection
    max_message_bytes: int


@dataclasses.dataclass(frozen=True)
class LayerInfo:
    index: int  # the number requests use
    name: str
    n: int  # rows a request may ask for (max n)
    k: int  # input width
    format: str  # "bf16", "z12", "split" or "unknown"
    format_id: int
    max_m: int  # from the daemon's limits

    @property
    def m_range(self) -> range:
        return range(1, self.max_m + 1)

    @property
    def n_range(self) -> range:
        return range(1, self.n + 1)


@dataclasses.dataclass(frozen=True)
class Info:
    """What the daemon said in WELCOME."""

    version: int
    backend: str  # "cpu", "cuda" or "unknown"
    backend_id: int
    device_uuid: bytes  # 16 bytes, zeros on cpu
    limits: Limits
    layers: Tuple[LayerInfo, ...]
    shapes: Tuple[int, ...]  # m values with captured graphs (fast shapes)


def _info_from(w: _Welcome, handle=None) -> Info:
    lib = load_library()
    limits = Limits(w.max_m, w.max_ops_per_request, w.max_buffers, w.max_message_bytes)
    layers = []
    # Through the functions, not the struct's appended fields: a libprojd
    # older than 0.3 has no such fields, and its memory there is other data.
    if handle is not None and hasattr(lib, "projd_layer_count"):
        count = lib.projd_layer_count(handle)
        every = [lib.projd_layer_get(handle, i).contents for i in range(count)]
    else:
        every, count = w.layers, min(w.n_layers, _MAX_LAYERS)
    for i in range(count):
        L = every[i]
        layers.append(
            LayerInfo(i, _text(L.name), L.n, L.k, _text(lib.projd_format_name(L.format)), L.format, w.max_m)
        )
    return Info(
        version=w.version,
        backend=_text(lib.projd_backend_name(w.backend)),
        backend_id=w.backend,
        device_uuid=bytes(w.device_uuid),
        limits=limits,
        layers=tuple(layers),
        shapes=tuple(w.shapes[i] for i in range(min(w.n_shapes, _MAX_SHAPES))),
    )


@dataclasses.dataclass
class Op:
    """One projection, as projd_op: y[m x n] = x[m x k] @ W[:n]^T.

    layer     index, or a layer name (resolved with the connection's info)
    x_buf     a ShmBuffer, or a raw buffer id (e.g. from register_cuda_ipc)
    x_off     byte offset of x in its buffer; x_ld its row stride in elements
              (None: the layer's k)
    y_buf, y_off, y_ld  likewise for y (y_ld None: n)
    n         output columns, the first n rows of W (None: the layer's n)
    op_flags  must be 0 in protocol v1
    Values are passed as given: the daemon judges ranges (E_LAYER, E_SHAPE,
    E_BUFFER, E_BOUNDS); only what C cannot represent is refused here.
    """

    layer: Union[int, str]
    m: int
    x_buf: Union["ShmBuffer", int]
    y_buf: Union["ShmBuffer", int]
    n: Optional[int] = None
    x_off: int = 0
    x_ld: Optional[int] = None
    y_off: int = 0
    y_ld: Optional[int] = None
    op_flags: int = 0


class PackedOps:
    """Ops kept in C layout, for a loop that sends one kind of request many
    times (a model's forward hook): set() writes an op in place and
    Client.project_packed() sends the first `count`, without the objects and
    per-field checks of Op and project() (about 10 µs of Python each time).

    capacity  how many ops it holds (at least 1)
    set()     layer is an index, buffers are ids (register_cuda_ipc's, or a
              ShmBuffer's .id); every value must fit its C field (32 or 64
              bits, not negative), or ValueError: nothing wraps. The daemon
              judges the rest, as for project().
    result()  the Result of the last project_packed() with it
    One thread at a time: the request's result and error structs are kept
    in it and reused.
    """

    __slots__ = ("capacity", "_arr", "_res", "_err")

    def __init__(self, capacity: int = 1):
        self.capacity = _uint(capacity, "capacity", _U32, 1)
        self._arr = (_Op * self.capacity)()
        self._res = _Result()
        self._res.failed_op = _NO_OP
        self._err = _Error()

    def set(
        self,
        i: int,
        layer: int,
        m: int,
        n: int,
        x_buf: int,
        x_off: int,
        x_ld: int,
        y_buf: int,
        y_off: int,
        y_ld: int,
        op_flags: int = 0,
    ) -> None:
        """Op i (0 <= i < capacity) becomes this projection."""
        # One test for every field: a negative value shifts to -1, a wide
        # one to non-zero; a float or None fails the | with TypeError.
        if (layer | m | n | x_buf | y_buf | op_flags) >> 32 or (x_off | x_ld | y_off | y_ld) >> 64:
            raise ValueError(
                "PackedOps.set: a value is negative or too wide for its field (layer %r, m %r, n %r, "
                "x_buf %r, x_off %r, x_ld %r, y_buf %r, y_off %r, y_ld %r, op_flags %r)"
                % (layer, m, n, x_buf, x_off, x_ld, y_buf, y_off, y_ld, op_flags)
            )
        if not 0 <= i < self.capacity:
            raise IndexError("PackedOps.set: op %r of %d" % (i, self.capacity))
        o = self._arr[i]
        o.layer, o.m, o.n, o.op_flags = layer, m, n, op_flags
        o.x_buf, o.x_off, o.x_ld = x_buf, x_off, x_ld
        o.y_buf, o.y_off, o.y_ld = y_buf, y_off, y_ld

    def result(self) -> "Result":
        """The Result of the last project_packed() (all zero before one)."""
        return _result_from(self._res)


@dataclasses.dataclass(frozen=True)
class OpResult:
    status: int
    engine: int  # backend-defined id of the engine that ran it

    @property
    def status_name(self) -> str:
        return _strerror(self.status)


@dataclasses.dataclass(frozen=True)
class Result:
    """The outcome of a PROJECT (projd_result).

    When the daemon refused the request with ERROR (a check failed, nothing
    ran), every op carries the request's status; failed_op names the op
    the daemon blamed."""

    status: int  # 0, or the first failing status
    n_ops: int
    failed_op: Optional[int]  # first failing op, None when none
    queue_ns: int  # daemon: received -> started
    exec_ns: int  # daemon: started -> finished
    total_ns: int  # client: submitted -> reply received
    ops: Tuple[OpResult, ...]  # the first RESULT_MAX_OPS ops

    @property
    def ok(self) -> bool:
        return self.status == 0


def _result_from(r: _Result) -> Result:
    n = min(r.n_ops, RESULT_MAX_OPS)
    return Result(
        status=r.status,
        n_ops=r.n_ops,
        failed_op=None if r.failed_op == _NO_OP else r.failed_op,
        queue_ns=r.queue_ns,
        exec_ns=r.exec_ns,
        total_ns=r.total_ns,
        ops=tuple(OpResult(r.ops[i].status, r.ops[i].engine) for i in range(n)),
    )


def _outcome(rc: int, res: _Result, e: _Error) -> Result:
    result = _result_from(res)
    if rc < 0 and result.status == 0:
        # Failed here (a timeout, a closed connection): libprojd has no reply
        # to fill the result from, so what ran is unknown; it must not read
        # as ok. status and every op carry the local code (-errno).
        result = dataclasses.replace(
            result, status=rc, ops=tuple(OpResult(rc, 0) for _ in result.ops)
        )
    if rc != 0:
        raise _error(rc, e, result.failed_op, result)
    return result


# ---- call guard ----------------------------------------------------------------------------


def _forked_error(what: str, pid: int) -> RuntimeError:
    return RuntimeError(
        "%s was opened in process %d and this is process %d, a fork of it: libprojd cannot be "
        "used after a fork (nng, beneath it, aborts the process). Open the Client in the process "
        "that uses it (multiprocessing's 'spawn' or 'forkserver' method)" % (what, pid, os.getpid())
    )


class _Guard:
    """Counts calls in progress on a C handle so that freeing it waits for
    them: ctypes drops the GIL during a call, so another thread may be
    inside libprojd with the handle when close() runs. It also keeps the
    handle to the process that made it (see the module's "Processes")."""

    def __init__(self, what: str):
        self._what = what
        self._cv = threading.Condition()
        self._active = 0
        self.closed = False
        self.pid = os.getpid()

    def forked(self) -> bool:
        """True in a fork of the process that made the handle."""
        return os.getpid() != self.pid

    def enter(self) -> None:
        # Before the lock: a thread of the parent may have held it at the fork.
        if os.getpid() != self.pid:
            raise _forked_error(self._what, self.pid)
        with self._cv:
            if self.closed:
                raise ValueError("%s is closed" % self._what)
            self._active += 1

    def exit(self) -> None:
        with self._cv:
            self._active -= 1
            if self._active == 0:
                self._cv.notify_all()

    def close(self) -> bool:
        """Mark closed and wait for calls in progress; True for the first
        closer, which frees the handle. False in a fork: the handle is the
        parent's and stays as it is (its calls in progress are the parent's
        threads, which the fork does not have)."""
        if os.getpid() != self.pid:
            self.closed = True
            return False
        with self._cv:
            if self.closed:
                return False
            self.closed = True
            while self._active:
                self._cv.wait()
            return True

    def __enter__(self):
        self.enter()
        return self

    def __exit__(self, *exc):
        self.exit()


# ---- shared-memory buffers ----------------------------------------------------------------


class _Mapping:
    """The C buffer behind a ShmBuffer. Held by the ShmBuffer and by the
    ctypes array that every memoryview of the buffer references, so the
    mapping stays until both are gone; releasing then is safe. No reference
    back to the array, so no cycle: it is freed as soon as the last holder
    goes."""

    def __init__(self, client: "Client", handle: int, buf_id: int, size: int, address: int):
        self.client = client
        self.handle = handle
        self.id = buf_id
        self.size = size
        self.address = address
        self.released = False
        self.lock = threading.Lock()
        self.view_refs = []  # weakrefs to the ctypes array behind each view()
        self.pending = weakref.WeakSet()  # Requests that name this buffer

    def views_open(self) -> int:
        """Views from view() still alive. Each view() is made over an array
        of its own that nothing else holds, so the array lives exactly as
        long as that memoryview or any slice or cast of it (no reliance on
        reference counts)."""
        with self.lock:
            self._drop_dead_views()
            return len(self.view_refs)

    def add_view(self, arr) -> None:
        with self.lock:
            self._drop_dead_views()  # keeps the list at the live views
            self.view_refs.append(weakref.ref(arr))

    def _drop_dead_views(self) -> None:  # under self.lock
        self.view_refs = [r for r in self.view_refs if r() is not None]

    def release(self, raise_errors: bool) -> None:
        c = self.client
        if c._guard.forked():
            # The parent's buffer: unregistering it is the parent's call.
            if raise_errors and not self.released:
                raise _forked_error("projd client", c._guard.pid)
            return
        with self.lock:
            if self.released:
                return
            self.released = True
        c._mappings.discard(self)
        if c._guard.closed:
            return  # projd_close released it
        e = _Error()
        try:
            with c._guard:
                rc = load_library().projd_buffer_release(self.handle, ctypes.byref(e))
        except ValueError:
            return  # closed meanwhile: projd_close released it
        # A lost connection (projd exited or restarted) took the daemon's
        # side of the buffer with it, and the mapping is gone here: nothing
        # is left to report, and raising would hide the error that brought
        # a `with` block here.
        if rc != 0 and raise_errors and rc != -_errno.ECONNRESET:
            raise _error(rc, e)

    def __del__(self):
        # The last view and the ShmBuffer are gone: nothing can reach the
        # mapping, release it. Errors cannot be reported from here.
        try:
            if not self.released:
                self.release(raise_errors=False)
        except Exception:
            pass


def _with_exit(release, exc_type, quiet) -> None:
    """The end of a with block: release() when the block ended normally;
    after an exception, the errors in `quiet` are dropped, so that they do
    not take the place of the exception that brought the block here."""
    if exc_type is None:
        release()
        return
    try:
        release()
    except quiet:
        pass


class ShmBuffer:
    """A host shared-memory buffer registered with the daemon (projd_shm_create).

    Reach the bytes with view() (a writable memoryview of format 'B'),
    read()/write(), or address (for ctypes). The memory is unmapped by
    release(), by the client's close(), or when the buffer and every view
    of it are gone; release() and close() refuse (BufferError) while a
    memoryview from view() is open (as mmap.close() does), because it would
    point to unmapped memory. Use ``with buf.view() as v:`` or v.release().
    A ``with`` block of the buffer (or of the client) that ends on an
    exception lets that exception through: a release that would raise
    there is skipped, and happens when the buffer's last reference goes.

    Threads: read(), write(), fill() and views must not race with release()
    or the client's close() of the same buffer on another thread (as with
    mmap); requests naming the buffer may run on any thread.
    """

    def __init__(self, mapping: _Mapping):
        self._map = mapping
        self._arr_type = type("_ShmBytes", (ctypes.c_ubyte * mapping.size,), {})

    def _check(self) -> None:
        if self._map.released:
            raise ValueError("shm buffer %d is released" % self._map.id)

    @property
    def id(self) -> int:
        """The buffer id requests use (x_buf / y_buf)."""
        return self._map.id

    @property
    def size(self) -> int:
        return self._map.size

    @property
    def address(self) -> int:
        """The mapping's address in this process (valid until release)."""
        self._check()
        return self._map.address

    @property
    def released(self) -> bool:
        return self._map.released

    def view(self) -> memoryview:
        """A writable memoryview (format 'B') of the whole buffer."""
        self._check()
        arr = self._arr_type.from_address(self._map.address)
        arr._mapping = self._map  # the view keeps the mapping alive
        self._map.add_view(arr)
        return memoryview(arr).cast("B")

    def read(self, offset: int = 0, size: Optional[int] = None) -> bytes:
        """A copy of size bytes from offset (default: to the end)."""
        self._check()
        offset = _uint(offset, "offset", self.size)
        size = self.size - offset if size is None else _uint(size, "size", self.size - offset)
        return ctypes.string_at(self._map.address + offset, size)

    def write(self, data: Union[bytes, bytearray, memoryview], offset: int = 0) -> None:
        """Copy data into the buffer at offset (bytes)."""
        self._check()
        src = memoryview(data).cast("B")
        offset = _uint(offset, "offset", self.size)
        if len(src) > self.size - offset:
            raise ValueError(
                "write of %d bytes at offset %d passes the end of shm buffer %d (%d bytes)"
                % (len(src), offset, self.id, self.size)
            )
        # through an array of its own: not a view() a release() must wait for
        dst = memoryview(self._arr_type.from_address(self._map.address)).cast("B")
        dst[offset : offset + len(src)] = src
        dst.release()

    def fill(self, byte: int) -> None:
        """Set every byte to `byte` (0xff makes every bf16 word 0xffff, a NaN)."""
        self._check()
        ctypes.memset(self._map.address, _uint(byte, "byte", 0xFF), self.size)

    def release(self) -> None:
        """Unregister and unmap (a no-op when already released).

        Raises BufferError while views are open or an unfinished request
        made with this ShmBuffer object names it (a request given its raw
        id, as PackedOps takes it, is not tracked: its output would be
        lost), ProjdError when the daemon refuses the
        UNREGISTER (the local mapping is gone in any case); not when the
        connection was lost (the daemon's side went with it)."""
        if self._map.released:
            return
        if self._map.client._guard.forked():
            self._map.release(raise_errors=True)  # raises: the parent's buffer
        views = self._map.views_open()
        if views > 0:
            raise BufferError(
                "shm buffer %d: %d memoryview(s) from view() still open; release them "
                "(memoryview.release(), or `with buf.view() as v:`) first: they would "
                "point to unmapped memory" % (self.id, views)
            )
        busy = [r for r in list(self._map.pending) if not r._finished()]
        if busy:
            raise BufferError(
                "shm buffer %d is named by %d unfinished request(s); wait for them first"
                % (self.id, len(busy))
            )
        self._map.release(raise_errors=True)

    def __enter__(self) -> "ShmBuffer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # On an exception, a release that cannot happen now (a view open, a
        # request unfinished) or that the daemon refuses leaves the buffer
        # to be released when its last reference goes, or by close().
        _with_exit(self.release, exc_type, (BufferError, ProjdError))

    def __repr__(self) -> str:
        state = "released" if self.released else "%d bytes" % self.size
        return "<projd.ShmBuffer id %d, %s>" % (self.id, state)


# ---- asynchronous requests ------------------------------------------------------------------


class Request:
    """An asynchronous PROJECT (projd_project_async), future-like.

    done() polls, wait() blocks until it completed and returns the Result
    (or raises ProjdError, every time it is called), close() frees it (also
    on garbage collection); a wait() in progress on another thread is let
    finish first (the request's end, or its timeout). The protocol
    has no cancel: a request the daemon has taken runs there to its end
    and writes its outputs, also after close() or a timeout here, so keep
    its buffers (a later request on the connection finishing says it has
    run: the daemon runs a connection's requests in order). The request
    stays valid after its client closes (it completes with an error
    then)."""

    def __init__(self, handle: int, buffers: List["ShmBuffer"], n_ops: int):
        self._h = handle
        self._guard = _Guard("projd request")
        # The buffers must stay registered until the request completes.
        self._buffers = buffers
        self.n_ops = n_ops
        for b in buffers:
            b._map.pending.add(self)

    def _finished(self) -> bool:
        try:
            return self.done()
        except ValueError:
            return True

    def done(self) -> bool:
        """True when the request has completed."""
        with self._guard:
            return bool(load_library().projd_request_poll(self._h))

    def wait(self, timeout: Optional[float] = None) -> Result:
        """The Result once completed (ProjdError when it failed).

        timeout (seconds) None waits as long as the request may take (the
        connection's timeout at submission bounds it); otherwise
        TimeoutError when it has not completed by then."""
        if timeout is not None:
            # Any real number of seconds (numpy's among them); NaN would
            # never compare as passed, so it is refused with the negatives.
            if _is_bool(timeout) or not isinstance(timeout, numbers.Real):
                raise ValueError("timeout must be None or seconds >= 0, got %r" % (timeout,))
            timeout = float(timeout)
            if not timeout >= 0:
                raise ValueError("timeout must be None or seconds >= 0, got %r" % (timeout,))
            end = time.monotonic() + timeout
            delay = 0.0002
            while not self.done():
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError("projd request not complete after %g s" % timeout)
                time.sleep(min(delay, left))
                delay = min(delay * 2, 0.01)
        res, e = _Result(), _Error()
        with self._guard:
            rc = load_library().projd_request_wait(self._h, ctypes.byref(res), ctypes.byref(e))
        return _outcome(rc, res, e)

    result = wait

    def close(self) -> None:
        """Stop waiting and free (idempotent); the daemon still runs a
        request it has taken (see the class)."""
        if self._guard.close():
            load_library().projd_request_free(self._h)
            self._h = None
            self._buffers = []

    def __enter__(self) -> "Request":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- CUDA IPC ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CudaRegion:
    """The allocation holding a device pointer (projd_cuda_region)."""

    base: int  # the allocation's base address
    alloc_size: int  # bytes from base
    offset: int  # pointer - base: add to x_off / y_off
    device: int  # CUDA device ordinal in this process
    handle: bytes  # 64-byte legacy IPC handle of base
    uuid: bytes  # 16-byte device UUID


@dataclasses.dataclass(frozen=True)
class CudaRegistration:
    id: int  # buffer id for x_buf / y_buf
    region: CudaRegion

    @property
    def offset(self) -> int:
        return self.region.offset


class _CudaDriver:
    """What projd_cuda_describe does (client/projd_cuda.c), through the CUDA
    driver API by ctypes, for when libprojd does not export it (the
    Makefile's libprojd.so does not). Not run on CI (no GPU); checked once
    by hand on an H200: base, size, offset and handle equal to what the
    runtime gives for a cudaMalloc, the UUID nvidia-smi's, and pinned host,
    managed, cudaMallocAsync and plain host memory refused."""

    _MEMORY_TYPE = 2  # CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    _IS_MANAGED = 8
    _DEVICE_ORDINAL = 9
    _LEGACY_IPC = 10  # CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
    _RANGE_START = 11
    _RANGE_SIZE = 12
    _BUFFER_ID = 7
    _MEMORYTYPE_DEVICE = 2

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise ProjdError(
                -_errno.ENOSYS, _strerror(-_errno.ENOSYS), "CUDA driver (libcuda.so.1) not found: %s" % exc
            ) from None
        L = self.lib
        L.cuInit.argtypes = [ctypes.c_uint]
        L.cuPointerGetAttribute.argtypes = [_P, ctypes.c_int, ctypes.c_uint64]
        L.cuIpcGetMemHandle.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        L.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        L.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        L.cuPointerGetAttributes.argtypes = [
            ctypes.c_uint, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64
        ]
        # _v2 gives the UUID cudaGetDeviceProperties reports (MIG instances
        # included), which is what the daemon compares with.
        self.uuid_fn = getattr(L, "cuDeviceGetUuid_v2", None) or L.cuDeviceGetUuid
        self.uuid_fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self._check(L.cuInit(0), "cuInit")

    def _fail(self, code: int, msg: str) -> ProjdError:
        return ProjdError(code, _strerror(code), msg)

    def _check(self, r: int, what: str) -> None:
        if r != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(r, ctypes.byref(name))
            raise self._fail(-_errno.EIO, "%s failed: %s (CUresult %d)" % (what, _text(name.value), r))

    def _attr(self, ctype, attr: int, ptr: int):
        v = ctype()
        r = self.lib.cuPointerGetAttribute(ctypes.byref(v), attr, ptr)
        return r, v.value

    def allocation(self, ptr: int):
        """(buffer id, base) in one cuPointerGetAttributes, which answers
        zeros rather than an error for memory CUDA does not know."""
        bid, base = ctypes.c_uint64(), ctypes.c_uint64()
        attrs = (ctypes.c_int * 2)(self._BUFFER_ID, self._RANGE_START)
        data = (ctypes.c_void_p * 2)(ctypes.addressof(bid), ctypes.addressof(base))
        r = self.lib.cuPointerGetAttributes(2, attrs, data, ptr)
        return (bid.value, base.value) if r == 0 else (0, 0)

    def describe(self, ptr: int) -> CudaRegion:
        r, mtype = self._attr(ctypes.c_uint, self._MEMORY_TYPE, ptr)
        if r != 0:
            raise self._fail(
                -_errno.EINVAL,
                "%#x is not CUDA memory (CUresult %d); register host memory as a shared-memory buffer" % (ptr, r),
            )
        r, managed = self._attr(ctypes.c_int, self._IS_MANAGED, ptr)
        if r == 0 and managed:
            raise self._fail(
                -_errno.ENOTSUP,
                "managed memory (cudaMallocManaged) has no legacy CUDA IPC handle; allocate with cudaMalloc",
            )
        if mtype != self._MEMORYTYPE_DEVICE:
            raise self._fail(
                -_errno.EINVAL,
                "%#x is not device memory; register host memory as a shared-memory buffer" % ptr,
            )
        r, capable = self._attr(ctypes.c_int, self._LEGACY_IPC, ptr)
        if r != 0 or not capable:
            raise self._fail(
                -_errno.ENOTSUP,
                "memory from cudaMallocAsync or cuMemCreate has no legacy CUDA IPC handle; allocate "
                "with cudaMalloc or disable PyTorch expandable segments "
                "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False)",
            )
        r, base = self._attr(ctypes.c_uint64, self._RANGE_START, ptr)
        self._check(r, "cuPointerGetAttribute(RANGE_START_ADDR)")
        r, size = self._attr(ctypes.c_size_t, self._RANGE_SIZE, ptr)
        self._check(r, "cuPointerGetAttribute(RANGE_SIZE)")
        r, ordinal = self._attr(ctypes.c_int, self._DEVICE_ORDINAL, ptr)
        self._check(r, "cuPointerGetAttribute(DEVICE_ORDINAL)")
        handle = ctypes.create_string_buffer(_IPC_HANDLE_SIZE)
        self._check(self.lib.cuIpcGetMemHandle(handle, base), "cuIpcGetMemHandle")
        dev = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        uuid = ctypes.create_string_buffer(_UUID_SIZE)
        self._check(self.uuid_fn(uuid, dev.value), "cuDeviceGetUuid")
        return CudaRegion(base, size, ptr - base, ordinal, handle.raw, uuid.raw)


_cuda_driver = None
_cuda_lock = threading.Lock()  # not _lib_lock: errors raised inside look up names through it


def cuda_describe(ptr: int) -> CudaRegion:
    """The allocation holding device pointer ptr: base, size, ptr's offset,
    device, IPC handle of the base and device UUID (projd_cuda_describe).

    Uses libprojd's projd_cuda_describe when the loaded library exports it,
    else the CUDA driver API directly. Call it where the pointer's CUDA
    context exists (any CUDA runtime call on its device makes one).
    Refused with ProjdError: host or unknown memory (-EINVAL), memory
    without a legacy IPC handle (-ENOTSUP: cudaMallocAsync, cuMemCreate /
    PyTorch expandable segments, managed memory). Not run on CI (no GPU).
    """
    global _cuda_driver
    ptr = _uint(ptr, "device pointer", _U64, 1)
    lib = load_library()
    if hasattr(lib, "projd_cuda_describe"):
        reg = _CudaRegion()
        err = ctypes.create_string_buffer(_ERR_MSG_SIZE)
        rc = lib.projd_cuda_describe(ptr, ctypes.byref(reg), err, len(err))
        if rc != 0:
            raise ProjdError(rc, _strerror(rc), _text(err.value))
        return CudaRegion(reg.base or 0, reg.alloc_size, reg.offset, reg.device, bytes(reg.handle), bytes(reg.uuid))
    with _cuda_lock:
        if _cuda_driver is None:
            _cuda_driver = _CudaDriver()
    return _cuda_driver.describe(ptr)


def cuda_allocation(ptr: int) -> Tuple[int, int]:
    """(id, base) of the CUDA allocation holding device pointer ptr, in one
    driver call: the driver's buffer id, unique in this process for the
    allocation's lifetime and beyond (a later cudaMalloc that gets the same
    address gets another id), and the allocation's base address. For caches
    of registrations: a pointer whose id is known needs no cuda_describe
    (four driver calls and an IPC handle). (0, 0) for memory CUDA does not
    know; cuda_describe says what is wrong with it. Not run on CI (no GPU).
    """
    global _cuda_driver
    ptr = _uint(ptr, "device pointer", _U64, 1)
    with _cuda_lock:
        if _cuda_driver is None:
            _cuda_driver = _CudaDriver()
    return _cuda_driver.allocation(ptr)


# ---- the connection -------------------------------------------------------------------------


class Client:
    """A connection to projd (projd_connect ... projd_close).

    url None or "": the default resolution of protocol/sockpath.h
    ($PROJD_SOCKET, else ipc:///run/projd/projd.sock when a daemon listens
    there, else your own ipc://$XDG_RUNTIME_DIR/projd/projd.sock (or
    ipc:///tmp/projd-<uid>/projd.sock) when it exists, else the only
    /run/projd/projd-<N>.sock listened on (several: ProjdError naming
    them), else /run/projd/projd.sock when the file is there); a bare path
    gets "ipc://" in front.
    name is what the daemon logs (cut to 63 bytes). timeout_ms, when given,
    is the timeout of every call after connecting. connect_timeout_ms,
    when given, bounds the connect (a daemon that does not answer HELLO
    fails it with ETIMEDOUT after that long; a stopped process, which never
    does nng's handshake, after nng's 10 s); without it, 30 s.

    ring: True attaches a shared-memory ring (see attach_ring) and raises
    ProjdError when the daemon refuses it. False and None (default) attach
    none here. With either, $PROJD_RING still applies, because libprojd
    reads it at connect: "1" attaches one and stays on nng when refused.
    ring_active says which it is.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        name: str = "python",
        timeout_ms: Optional[int] = None,
        ring: Optional[bool] = None,
        connect_timeout_ms: Optional[int] = None,
    ):
        self._h = None
        # Closed until connected, so that __del__ after a failed connect
        # does nothing.
        self._guard = _Guard("projd client")
        self._guard.closed = True
        self._mappings = weakref.WeakSet()
        if url is not None and not isinstance(url, str):
            raise TypeError("url must be a str or None, not %s" % type(url).__name__)
        if not isinstance(name, str):
            raise TypeError("name must be a str, not %s" % type(name).__name__)
        if timeout_ms is not None:
            timeout_ms = _uint(timeout_ms, "timeout_ms", 0x7FFFFFFF, 1)
        if connect_timeout_ms is not None:
            connect_timeout_ms = _uint(connect_timeout_ms, "connect_timeout_ms", 0x7FFFFFFF, 1)
        if ring is not None and not isinstance(ring, bool):
            raise TypeError("ring must be True, False or None, not %s" % type(ring).__name__)
        for what, s in (("url", url or ""), ("name", name)):
            if "\0" in s:
                raise ValueError("%s contains a NUL character" % what)
        global _nng_pid
        if _nng_pid is not None and _nng_pid != os.getpid():
            raise RuntimeError(
                "projd.Client: this process (%d) is a fork of process %d, which has used libprojd: "
                "nng, beneath it, aborts a fork that uses it after its parent did. Connect from a "
                "process started with multiprocessing's 'spawn' or 'forkserver' method, or fork "
                "before the first Client" % (os.getpid(), _nng_pid)
            )
        lib = load_library()
        _nng_pid = os.getpid()  # connect starts nng, whether it connects or not
        h, e = _P(), _Error()
        u = url.encode() if url else None
        if connect_timeout_ms is not None:
            if not hasattr(lib, "projd_connect_timeout"):
                raise LibraryNotFoundError(
                    "connect_timeout_ms needs libprojd 0.2 (projd_connect_timeout); this one lacks it"
                )
            rc = lib.projd_connect_timeout(u, name.encode(), connect_timeout_ms, ctypes.byref(h), ctypes.byref(e))
        else:
            rc = lib.projd_connect(u, name.encode(), ctypes.byref(h), ctypes.byref(e))
        if rc != 0:
            raise _error(rc, e)
        self._h = h.value
        self._guard = _Guard("projd client")
        self.url = _text(lib.projd_url(self._h))
        self.info = _info_from(lib.projd_info_get(self._h).contents, self._h)
        self._by_name = {L.name: L for L in self.info.layers}
        if timeout_ms is not None:
            self.timeout_ms = timeout_ms
        elif connect_timeout_ms is not None:  # the library starts calls at the connect's bound
            self.timeout_ms = DEFAULT_TIMEOUT_MS
        if ring and not self.ring_active:
            try:
                self.attach_ring()
            except BaseException:
                self.close()
                raise

    # ---- plumbing
    def _call(self, fn_name: str, *args):
        with self._guard:
            return getattr(load_library(), fn_name)(self._h, *args)

    @property
    def closed(self) -> bool:
        return self._guard.closed

    def close(self) -> None:
        """Release every buffer and close (idempotent).

        Raises BufferError, and closes nothing, while a memoryview of one of
        the connection's shm buffers is open: closing would unmap memory it
        points to. Requests still outstanding complete with an error."""
        if self._guard.closed:
            return
        if self._guard.forked():
            self._guard.close()  # the parent's connection: left to it, no C call here
            return
        for m in list(self._mappings):
            views = m.views_open()
            if views > 0:
                raise BufferError(
                    "projd client: shm buffer %d still has %d memoryview(s) open; release them "
                    "(memoryview.release(), or `with buf.view() as v:`) before closing: "
                    "closing unmaps the memory they point to" % (m.id, views)
                )
        if self._guard.close():
            for m in list(self._mappings):
                m.released = True  # projd_close frees them
            self._mappings = weakref.WeakSet()
            load_library().projd_close(self._h)
            self._h = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # On an exception, a view still open leaves the connection to be
        # closed when the last reference goes (or by a later close()).
        _with_exit(self.close, exc_type, (BufferError,))

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass  # views still open: leave the connection (and the mappings) be

    def __repr__(self) -> str:
        return "<projd.Client %s%s>" % (getattr(self, "url", "?"), " closed" if self.closed else "")

    # ---- settings and description
    @property
    def timeout_ms(self) -> int:
        """Timeout of every later call and request, in ms."""
        return self._call("projd_get_timeout_ms")

    @timeout_ms.setter
    def timeout_ms(self, ms: int) -> None:
        ms = _uint(ms, "timeout_ms", 0x7FFFFFFF, 1)
        self._call("projd_set_timeout_ms", ms)

    @property
    def layers(self) -> Tuple[LayerInfo, ...]:
        return self.info.layers

    def layer(self, name: str) -> LayerInfo:
        """The layer called name (KeyError naming the daemon's layers if none)."""
        if not isinstance(name, str):
            raise TypeError("layer name must be a str, not %s" % type(name).__name__)
        try:
            return self._by_name[name]
        except KeyError:
            # A whole model's projections are hundreds of names: the first
            # few show how they are spelled.
            names = [L.name for L in self.info.layers]
            shown = ", ".join(names if len(names) <= 16 else names[:12] + ["... (%d in all)" % len(names)])
            raise KeyError("unknown layer %r (the daemon serves %s)" % (name, shown)) from None

    # ---- the shared-memory ring
    def attach_ring(self, slots: int = 0) -> None:
        """Attach a shared-memory ring of `slots` slots (0: 64; a power of two
        from 2 to 4096): PROJECT and PING go through it from now on instead
        of nng, with the same results, errors and timeouts, at a fraction of
        nng's round trip. At most `slots` requests are in flight on it; one
        more waits for a slot. Raises ProjdError when the daemon refuses it
        (E_TYPE: an older daemon or ring.enabled = 0); the connection then
        stays usable over nng."""
        slots = _uint(slots, "slots", 4096)
        e = _Error()
        rc = self._call("projd_ring_attach", slots, ctypes.byref(e))
        if rc != 0:
            raise _error(rc, e)

    @property
    def ring_active(self) -> bool:
        """True while PROJECT and PING go through a ring. A ring the daemon
        drops (a corrupt ring) turns this False; requests then go over nng.
        After a lost connection (projd exited or restarted) it is False too,
        and every call fails with -ECONNRESET: make a new Client."""
        return bool(self._call("projd_ring_active"))

    # ---- other requests
    def ping(self) -> float:
        """PING/PONG; the round trip in seconds."""
        e = _Error()
        t0 = time.perf_counter()
        rc = self._call("projd_ping", ctypes.byref(e))
        if rc != 0:
            raise _error(rc, e)
        return time.perf_counter() - t0

    def stats(self) -> Dict[str, Any]:
        """The daemon's STATS, parsed."""
        p, e = _P(), _Error()
        rc = self._call("projd_stats_json", ctypes.byref(p), ctypes.byref(e))
        if rc != 0:
            raise _error(rc, e)
        try:
            text = ctypes.string_at(p.value)
        finally:
            _libc_free(p.value)
        # The daemon copies the bytes of paths it reports as they are; a
        # model path that is not UTF-8 comes back as the file system's
        # bytes (os.fsencode gives them back), not as a UnicodeDecodeError.
        return json.loads(text.decode("utf-8", "surrogateescape"))

    def _served_model(self) -> Dict[str, Any]:
        """STATS' "model" object, asked once a connection: a daemon serves
        one model for its life (a restart is a new connection), and a STATS
        of a thousand layers is a few MB the daemon's loop builds, which a
        worker checking each layer's weights would ask for a thousand
        times."""
        model = getattr(self, "_model_cache", None)
        if model is None:
            model = self.stats().get("model") or {}
            self._model_cache = model
        return model

    def weight_digests(self) -> Dict[str, int]:
        """Each served layer's weight digest by name (STATS model.layers; see
        weight_digest). Empty from a daemon too old to report them."""
        return _digests(self._served_model())

    def check_weight(self, layer: str, data: Any) -> None:
        """Raise ValueError when data (the layer's tensor as the checkpoint
        stores it: same dtype and shape) is not what the daemon serves for
        layer: a daemon started on another checkpoint with the same shapes
        would otherwise give wrong results without any error."""
        self.layer(layer)  # KeyError naming the daemon's layers
        model = self._served_model()
        served = _digests(model)
        if layer not in served:
            raise ValueError("the daemon reports no weight digest for layer %r (a projd from before digests)" % layer)
        mine = weight_digest(data)
        if mine != served[layer]:
            raise ValueError(
                "layer %r: the daemon serves other weights (its digest %08x, from %s; this "
                "tensor's %08x): start it on the same checkpoint"
                % (layer, served[layer], model.get("path", "?"), mine)
            )

    # ---- buffers
    def shm_buffer(self, size: int) -> ShmBuffer:
        """A new zeroed host shared-memory buffer of size bytes, registered."""
        size = _uint(size, "size", sys.maxsize, 1)
        h, e = _P(), _Error()
        lib = load_library()
        with self._guard:
            rc = lib.projd_shm_create(self._h, size, ctypes.byref(h), ctypes.byref(e))
            if rc != 0:
                raise _error(rc, e)
            m = _Mapping(self, h.value, lib.projd_buffer_id(h), lib.projd_buffer_size(h), lib.projd_buffer_ptr(h))
            self._mappings.add(m)
        return ShmBuffer(m)

    def register_cuda_ipc(self, handle: bytes, uuid: bytes, size: int) -> int:
        """Register a legacy CUDA IPC handle (cudaIpcMemHandle_t of an
        allocation's base, 64 bytes) of size bytes on the device with that
        16-byte UUID (projd_register_cuda_ipc); the buffer id. Keep the
        allocation alive until unregister(). The cpu backend refuses it
        (E_REGISTER); tests/gpu/python_torch.sh runs it on the cuda backend."""
        if not isinstance(handle, (bytes, bytearray)) or not isinstance(uuid, (bytes, bytearray)):
            raise TypeError("handle and uuid must be bytes")
        if len(handle) != _IPC_HANDLE_SIZE or len(uuid) != _UUID_SIZE:
            raise ValueError(
                "handle must be %d bytes and uuid %d, got %d and %d"
                % (_IPC_HANDLE_SIZE, _UUID_SIZE, len(handle), len(uuid))
            )
        size = _uint(size, "size", _U64, 1)
        out, e = ctypes.c_uint32(), _Error()
        rc = self._call("projd_register_cuda_ipc", bytes(handle), bytes(uuid), size, ctypes.byref(out), ctypes.byref(e))
        if rc != 0:
            raise _error(rc, e)
        return out.value

    def register_device_pointer(self, ptr: int) -> CudaRegistration:
        """Register the whole CUDA allocation holding device pointer ptr
        (cuda_describe, then register_cuda_ipc): the buffer id, and ptr's
        offset in it to add to x_off / y_off. As projd_cuda_register
        (checked on the cuda backend by tests/gpu/python_torch.sh)."""
        region = cuda_describe(ptr)
        return CudaRegistration(self.register_cuda_ipc(region.handle, region.uuid, region.alloc_size), region)

    def unregister(self, buf_id: int) -> None:
        """Release a buffer id (from register_cuda_ipc, or any raw id)."""
        e = _Error()
        rc = self._call("projd_unregister", _ident(buf_id, "buffer id"), ctypes.byref(e))
        if rc != 0:
            raise _error(rc, e)

    # ---- projections
    def _ops(self, ops: Sequence[Op]) -> Tuple[Any, List[ShmBuffer]]:
        if isinstance(ops, Op):
            ops = [ops]
        if not isinstance(ops, (list, tuple)):
            raise TypeError("ops must be a list of projd.Op, not %s" % type(ops).__name__)
        if not ops:
            raise ValueError("a PROJECT needs at least one op")
        arr = (_Op * len(ops))()
        buffers = []
        for i, op in enumerate(ops):
            if not isinstance(op, Op):
                raise TypeError("ops[%d] must be a projd.Op, not %s" % (i, type(op).__name__))
            L = None
            if isinstance(op.layer, str):
                try:
                    L = self.layer(op.layer)
                except KeyError as exc:
                    raise ValueError("ops[%d].layer: %s" % (i, exc.args[0])) from None
                layer = L.index
            else:
                layer = _ident(op.layer, "ops[%d].layer" % i)
                if layer < len(self.info.layers):
                    L = self.info.layers[layer]
            ids = []
            for what in ("x_buf", "y_buf"):
                b = getattr(op, what)
                if isinstance(b, ShmBuffer):
                    if b._map.client is not self:
                        raise ValueError("ops[%d].%s belongs to another connection" % (i, what))
                    if b.released:
                        raise ValueError("ops[%d].%s: shm buffer %d is released" % (i, what, b.id))
                    buffers.append(b)
                    ids.append(b.id)
                else:
                    ids.append(_ident(b, "ops[%d].%s" % (i, what)))

            def given(value, what, from_layer):
                # None means "the layer's": only known for a layer the daemon serves.
                if value is not None:
                    return value
                if L is None:
                    raise ValueError(
                        "ops[%d].layer: %d is not a layer the daemon serves (it announced %d); "
                        "ops[%d].%s must be given to send the op anyway" % (i, layer, len(self.info.layers), i, what)
                    )
                return from_layer

            n = given(op.n, "n", L.n if L else None)
            x_ld = given(op.x_ld, "x_ld", L.k if L else None)
            y_ld = n if op.y_ld is None else op.y_ld
            o = arr[i]
            o.layer = layer
            o.m = _ident(op.m, "ops[%d].m" % i)
            o.n = _ident(n, "ops[%d].n" % i)
            o.x_buf, o.y_buf = ids
            o.x_off = _uint(op.x_off, "ops[%d].x_off" % i)
            o.x_ld = _uint(x_ld, "ops[%d].x_ld" % i)
            o.y_off = _uint(op.y_off, "ops[%d].y_off" % i)
            o.y_ld = _uint(y_ld, "ops[%d].y_ld" % i)
            o.op_flags = _ident(op.op_flags, "ops[%d].op_flags" % i)
        return arr, buffers

    def _flags(self, flags: int) -> int:
        flags = _ident(flags, "flags")
        if flags & (PF_WAIT_EVENT | PF_SIGNAL_EVENT):
            # Set by the events given to project(), which carry the handles.
            raise ValueError(
                "flags WAIT_EVENT / SIGNAL_EVENT come with their IPC event handles: "
                "pass wait_event= / signal_event= to project()"
            )
        return flags

    def project(
        self,
        ops: Sequence[Op],
        flags: int = 0,
        wait_event: Optional[bytes] = None,
        signal_event: Optional[bytes] = None,
    ) -> Result:
        """Run the ops in order and wait for the reply (projd_project, or
        projd_project_events when events are given).

        wait_event: a CUDA IPC event handle (64 bytes, e.g. torch's
        Event(interprocess=True).ipc_handle()) the daemon's stream waits on
        before reading x; signal_event: one it records after writing y.
        With PF_ACCEPT_REPLY in flags (needs signal_event) the daemon
        replies once the work is launched, not done: the caller's stream
        waits on signal_event before it uses y. Raises ProjdError (with
        failed_op and result) when the daemon refuses the request or an op
        fails."""
        arr, _ = self._ops(ops)
        flags = self._flags(flags)
        res, e = _Result(), _Error()
        if wait_event is None and signal_event is None:
            rc = self._call("projd_project", arr, len(arr), flags, ctypes.byref(res), ctypes.byref(e))
            return _outcome(rc, res, e)
        for name, ev in (("wait_event", wait_event), ("signal_event", signal_event)):
            if ev is not None and (not isinstance(ev, (bytes, bytearray)) or len(ev) != _IPC_HANDLE_SIZE):
                raise ValueError("%s must be a %d-byte CUDA IPC event handle" % (name, _IPC_HANDLE_SIZE))
        flags |= (PF_WAIT_EVENT if wait_event is not None else 0) | (PF_SIGNAL_EVENT if signal_event is not None else 0)
        rc = self._call(
            "projd_project_events", arr, len(arr), flags,
            None if wait_event is None else bytes(wait_event),
            None if signal_event is None else bytes(signal_event),
            None, None, None, ctypes.byref(res), ctypes.byref(e),
        )
        return _outcome(rc, res, e)

    def project_packed(
        self,
        ops: "PackedOps",
        count: Optional[int] = None,
        flags: int = 0,
        wait_event: Optional[bytes] = None,
        signal_event: Optional[bytes] = None,
    ) -> None:
        """project() for the first count ops of a PackedOps (all when None):
        the same request, events and errors (ProjdError with failed_op and
        result), without building a Result on success (ops.result() does).
        Event handles must be bytes here."""
        # Any integer type, as the module's other counts (numpy's int64).
        n = ops.capacity if count is None else _uint(count, "count", ops.capacity, 1)
        flags = self._flags(flags)
        if wait_event is not None:
            if not isinstance(wait_event, bytes) or len(wait_event) != _IPC_HANDLE_SIZE:
                raise ValueError("wait_event must be a %d-byte CUDA IPC event handle (bytes)" % _IPC_HANDLE_SIZE)
            flags |= PF_WAIT_EVENT
        if signal_event is not None:
            if not isinstance(signal_event, bytes) or len(signal_event) != _IPC_HANDLE_SIZE:
                raise ValueError("signal_event must be a %d-byte CUDA IPC event handle (bytes)" % _IPC_HANDLE_SIZE)
            flags |= PF_SIGNAL_EVENT
        res, e = ops._res, ops._err
        # A local failure leaves the result as it was: clear what the last
        # request left, so a failure never reads as its success.
        ctypes.memset(ctypes.addressof(res), 0, ctypes.sizeof(res))
        res.failed_op = _NO_OP
        if flags & (PF_WAIT_EVENT | PF_SIGNAL_EVENT):
            rc = self._call(
                "projd_project_events", ops._arr, n, flags, wait_event, signal_event, None, None, None, res, e
            )
        else:
            rc = self._call("projd_project", ops._arr, n, flags, res, e)
        if rc < 0 and res.status == 0:
            # A local failure (libprojd before this fix left it reading as
            # PJ_OK): ops.result() must say it too, as the exception does.
            res.status = rc
            for i in range(min(n, RESULT_MAX_OPS)):
                res.ops[i].status = rc
        if rc != 0:
            _outcome(rc, res, e)  # raises

    def project_async(self, ops: Sequence[Op], flags: int = 0) -> Request:
        """Submit the ops and return without waiting for the daemon
        (projd_project_async).

        A submission error (message too big, no memory) raises here;
        everything the daemon judges comes out of Request.wait(). On a ring
        whose slots are all in flight the call waits for one to come free,
        up to the client's timeout, and raises ProjdError(-ETIMEDOUT) when
        none does (no request is made then)."""
        arr, buffers = self._ops(ops)
        flags = self._flags(flags)
        req, e = _P(), _Error()
        rc = self._call("projd_project_async", arr, len(arr), flags, None, None, ctypes.byref(req), ctypes.byref(e))
        if rc != 0:
            raise _error(rc, e)
        return Request(req.value, buffers, len(arr))
