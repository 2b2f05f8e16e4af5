"""test_projd.py — the Python binding (client/python/projd.py) end to end.

Run by tests/e2e_python.sh, which starts two projd daemons (cpu backend,
the small generated model) and sets:
  PROJD_LIB             the libprojd.so under test
  PROJD_TEST_URL        a daemon answering at full speed
  PROJD_TEST_SLOW_URL   a daemon holding every op for 300 ms (cpu.min_op_us),
                        for what needs a request still in flight
  PROJD_TEST_MODEL      the model both serve (safetensors)
  PROJD_TEST_LAYERS     `projctl layers` of the first daemon
  PROJD_TEST_CC         a C compiler, for the struct layout check
  PROJD_TEST_PROJD      the projd binary, for daemons of the test's own (one
                        killed; one serving what projd_pack.py wrote)
  PROJD_TEST_MANY_URL   a daemon of 300 layers (ManyLayersTests)

Results are checked bit for bit against a pure-Python reference of
kernels/refgemm.h (fp32 sums in increasing k, rounded to bf16 to nearest
even; for split layers x*hi then x*lo at each k) computed from the model
file's weights: the 12-bit layers decode exactly to the file's bf16 words,
so every layer compares exactly, as tests/test_daemon_e2e.c does.
Standard library only.
"""

import array
import fractions
import ctypes
import errno
import gc
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "client", "python"))

import projd  # noqa: E402  (after the path above)
from projd import Op, ProjdError, Status  # noqa: E402

POISON = 0xFFFF  # a NaN no finite result produces: unwritten elements show


def env(name):
    v = os.environ.get(name)
    if not v:
        raise unittest.SkipTest("%s is not set: run tests/e2e_python.sh" % name)
    return v


# ---- the reference --------------------------------------------------------------------------


def f32_bits(values):
    """fp32 bit patterns of a sequence of values exactly representable in fp32."""
    u = array.array("I")
    u.frombytes(array.array("f", values).tobytes())
    return u


class Model:
    """The safetensors file: 8-byte little-endian header length, JSON
    header (dtype, shape, data_offsets per tensor), then the data."""

    def __init__(self, path):
        with open(path, "rb") as f:
            data = f.read()
        (hlen,) = struct.unpack_from("<Q", data, 0)
        header = json.loads(data[8 : 8 + hlen].decode("utf-8"))
        self.tensors = {}
        for name, t in header.items():
            if name == "__metadata__":
                continue
            a, b = t["data_offsets"]
            self.tensors[name] = (t["dtype"], tuple(t["shape"]), data[8 + hlen + a : 8 + hlen + b])

    def terms(self, tensor, fmt):
        """The weight terms the daemon accumulates, each as K columns of N
        floats: [W] for bf16 / z12, [hi, lo] for split (kernels/bf16.c)."""
        dtype, shape, raw = self.tensors[tensor]
        n, k = shape
        if sys.byteorder != "little":
            raise unittest.SkipTest("the reference reads little-endian tensors on a little-endian host")
        if dtype == "BF16":
            words = [array.array("H", raw)]
            if fmt == "split":  # model.c: lo = +0, hi + lo == w exactly
                words.append(array.array("H", bytes(len(raw))))
        elif dtype == "F32" and fmt == "split":
            hi, lo = array.array("H"), array.array("H")
            vals = array.array("f", raw)
            for u, v in zip(f32_bits(vals), vals):
                if (u & 0x7F800000) == 0x7F800000:
                    hi.append(projd._f32_bits_to_bf16(u))
                    lo.append(0)
                    continue
                h = projd._f32_bits_to_bf16(u)
                if (h & 0x7FFF) == 0x7F80:  # would overflow: the largest finite bf16
                    h = (h & 0x8000) | 0x7F7F
                hi.append(h)
                # v - hi is exact in fp32 (bf16.c), and in a double
                lo.append(projd._f32_bits_to_bf16(f32_bits([v - projd.bf16_to_float(h)])[0]))
            words = [hi, lo]
        else:
            raise AssertionError("tensor %s: %s stored as %s is not covered by the reference" % (tensor, dtype, fmt))
        terms = []
        for w in words:
            flat = projd.bf16_to_floats(w.tobytes())
            terms.append([flat[c::k] for c in range(k)])
        return (n, k), terms


def reference(terms, x_rows, n):
    """y rows (bf16 words) of x_rows against the first n rows of W."""
    cols = [[col[:n] for col in term] for term in terms]
    out = array.array("H")
    zero = bytes(4 * n)
    for xr in x_rows:
        acc = array.array("f", zero)
        for c, xk in enumerate(xr):
            # acc never holds -0 (sums start at +0 and round to nearest),
            # so adding the +-0 products of a zero x changes nothing.
            if xk == 0.0:
                continue
            for term in cols:
                # The product of two bf16 values is exact in a double and,
                # with |product| >= 2**-133 (checked in setUpClass), in fp32;
                # a + p rounded first to double then to fp32 equals the fp32
                # sum (53 >= 2 * 24 + 2), which is what C computes.
                acc = array.array("f", [a + xk * w for a, w in zip(acc, term[c])])
        out.extend(projd._f32_bits_to_bf16(u) for u in f32_bits(acc))
    return out


def random_x(rng, m, k):
    """m rows of k bf16 words: |x| in [2**-8, 2), an exact zero now and then."""
    rows = []
    for _ in range(m):
        row = array.array("H")
        for _ in range(k):
            r = rng.getrandbits(17)
            if r & 31 == 0:
                row.append(0)
            else:
                sign = (r >> 5) & 1
                exp = 127 - ((r >> 6) % 9)  # 2**-8 .. 2**0
                row.append(sign << 15 | exp << 7 | (r >> 10) & 0x7F)
        rows.append(row)
    return rows


# ---- no daemon needed ----------------------------------------------------------------------------


class Bf16Tests(unittest.TestCase):
    def test_known_values(self):
        f = projd.float_to_bf16
        self.assertEqual(f(1.0), 0x3F80)
        self.assertEqual(f(-2.0), 0xC000)
        self.assertEqual(f(0.0), 0x0000)
        self.assertEqual(f(-0.0), 0x8000)
        self.assertEqual(f(float("inf")), 0x7F80)
        self.assertEqual(f(float("-inf")), 0xFF80)
        self.assertEqual(f(float("nan")), 0x7FC0)
        self.assertEqual(f(1 + 2**-8), 0x3F80)  # tie: to even
        self.assertEqual(f(1 + 3 * 2**-8), 0x3F82)  # tie: to even (up)
        self.assertEqual(f(1 + 2**-8 + 2**-40), 0x3F81)  # above the tie: rounding via fp32 would give 0x3f80
        self.assertEqual(f(2**-133), 0x0001)  # smallest subnormal
        self.assertEqual(f(2**-134), 0x0000)  # tie with 0: to even
        self.assertEqual(f(1.5 * 2**-134), 0x0001)
        big = projd.bf16_to_float(0x7F7F)  # largest finite
        self.assertEqual(f(big), 0x7F7F)
        self.assertEqual(f(big + 2**119), 0x7F80)  # tie with 2**128: to even = inf
        self.assertEqual(f(big + 2**118), 0x7F7F)
        self.assertEqual(f(1e300), 0x7F80)
        self.assertEqual(f(-1e300), 0xFF80)
        self.assertEqual(f(3), 0x4040)  # ints are numbers too
        with self.assertRaises(TypeError):
            f("1.0")
        with self.assertRaises(TypeError):
            f(True)

    def test_every_pattern_round_trips(self):
        for h in range(0x10000):
            v = projd.bf16_to_float(h)
            back = projd.float_to_bf16(v)
            if v != v:
                self.assertEqual(back & 0x7FC0, 0x7FC0, hex(h))
                self.assertEqual(back & 0x8000, h & 0x8000, hex(h))
            else:
                self.assertEqual(back, h, hex(h))

    def test_agrees_with_c_rounding_on_fp32_values(self):
        # On values fp32 can hold, rounding the double directly must equal
        # pj_f32_to_bf16 on the fp32 bits (kernels/bf16.h).
        rng = random.Random(5)
        bits = [rng.getrandbits(32) for _ in range(20000)]
        bits += [0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x00008000, 0x00018000, 0x80000001]
        vals = array.array("f")
        vals.frombytes(array.array("I", bits).tobytes())
        for u, v in zip(bits, vals):
            if v != v:
                continue
            self.assertEqual(projd.float_to_bf16(v), projd._f32_bits_to_bf16(u), "%#010x" % u)

    def test_bulk_helpers(self):
        vals = [0.5, -1.25, 3.0, 1e-3]
        data = projd.floats_to_bf16(vals)
        self.assertEqual(len(data), 8)
        back = projd.bf16_to_floats(data)
        self.assertEqual(back[:3], [0.5, -1.25, 3.0])
        self.assertEqual(back[3], projd.bf16_to_float(projd.float_to_bf16(1e-3)))
        self.assertEqual(projd.bf16_to_floats(bytearray(data)), back)
        with self.assertRaises(ValueError):
            projd.bf16_to_floats(b"\x00\x00\x00")
        with self.assertRaises(ValueError):
            projd.bf16_to_float(0x10000)
        # 16-bit words are bf16 words; wider items (float32) or float16 are
        # refused, not read as pairs of bf16 words.
        words = array.array("H", [0x3F80, 0xC000])
        self.assertEqual(projd.bf16_to_floats(words), [1.0, -2.0])
        with self.assertRaisesRegex(TypeError, "format 'f'"):
            projd.bf16_to_floats(array.array("f", [1.0, 2.0]))
        c_words = (ctypes.c_uint16 * 2)(0x3F80, 0x4000)  # format '<H' (native)
        self.assertEqual(projd.bf16_to_floats(c_words), [1.0, 2.0])
        swapped = ctypes.c_uint16.__ctype_be__ if sys.byteorder == "little" else ctypes.c_uint16.__ctype_le__
        with self.assertRaisesRegex(TypeError, "byte order"):
            projd.bf16_to_floats((swapped * 2)(0x3F80, 0x4000))
        try:  # float16 has 2-byte items too; only numpy makes such a buffer here
            import numpy
        except ImportError:
            numpy = None
        if numpy is not None:
            with self.assertRaisesRegex(TypeError, "format 'e'"):
                projd.bf16_to_floats(numpy.ones(2, numpy.float16))

    def test_other_number_types(self):
        # numpy's scalars are not Python floats and ints: any real number
        # is a bf16 value, any integer type (through __index__) a size or
        # an index; bools and floats as sizes are still refused.
        class Index:
            def __init__(self, v):
                self.v = v

            def __index__(self):
                return self.v

        class Bool_:  # as numpy's bool_ (its type name) converts to an int
            def __index__(self):
                return 1

        Bool_.__name__ = "bool_"
        self.assertEqual(projd.float_to_bf16(fractions.Fraction(3, 2)), 0x3FC0)
        self.assertEqual(projd.floats_to_bf16([fractions.Fraction(1, 2)]), projd.floats_to_bf16([0.5]))
        self.assertEqual(projd.bf16_to_float(Index(0x3F80)), 1.0)
        self.assertEqual(projd._uint(Index(7), "m"), 7)  # what every size, offset and m goes through
        with self.assertRaisesRegex(ValueError, "m must be in"):
            projd._uint(Index(-1), "m")
        for bad in (Bool_(), True, 2.0):
            with self.assertRaises(TypeError, msg=repr(bad)):
                projd._uint(bad, "m")
        with self.assertRaises(TypeError):
            projd.float_to_bf16(Bool_())


class LibraryTests(unittest.TestCase):
    def run_py(self, code, **envs):
        e = dict(os.environ)
        e.update(envs)
        e["PYTHONPATH"] = os.path.join(REPO, "client", "python")
        e["PYTHONDONTWRITEBYTECODE"] = "1"
        return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60)

    def test_missing_library_is_named(self):
        code = (
            "import projd\n"
            "try:\n    projd.Client('ipc:///nonexistent/x.sock')\n"
            "except projd.LibraryNotFoundError as e:\n    print('LNF', e)\n"
        )
        r = self.run_py(code, PROJD_LIB="/nonexistent/libprojd.so")
        self.assertIn("LNF PROJD_LIB=/nonexistent/libprojd.so: cannot load", r.stdout + r.stderr)

    def test_nothing_found_lists_what_was_tried(self):
        import ctypes.util

        if ctypes.util.find_library("projd"):
            self.skipTest("a libprojd is installed where find_library looks")
        with tempfile.TemporaryDirectory() as d:
            deep = os.path.join(d, "a", "b", "c")
            os.makedirs(deep)
            with open(os.path.join(REPO, "client", "python", "projd.py")) as src:
                text = src.read()
            with open(os.path.join(deep, "projd.py"), "w") as dst:
                dst.write(text)
            e = dict(os.environ, PYTHONPATH=deep, PYTHONDONTWRITEBYTECODE="1")
            e.pop("PROJD_LIB", None)
            code = "import projd\ntry:\n    projd.Client()\nexcept projd.LibraryNotFoundError as e:\n    print(e)\n"
            out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60).stdout
        self.assertIn("libprojd not found; PROJD_LIB is not set", out)
        self.assertIn(os.path.join(d, "a", "lib", "libprojd.so.1") + " (absent)", out)
        self.assertIn('ctypes.util.find_library("projd") (found nothing)', out)

    def test_not_libprojd(self):
        r = self.run_py("import projd\ntry:\n    projd.load_library()\nexcept OSError as e:\n    print('ERR', e)\n",
                        PROJD_LIB="libc.so.6")
        self.assertRegex(r.stdout, r"ERR libc.so.6 is not the libprojd this module wraps: it lacks projd_connect")

    def test_directory_and_bf16_without_library(self):
        lib = env("PROJD_LIB")
        r = self.run_py("import projd\nprint(projd.float_to_bf16(1.0))\nprint(projd.load_library() is not None)\n",
                        PROJD_LIB=os.path.dirname(os.path.abspath(lib)))
        self.assertEqual(r.stdout.split(), ["16256", "True"], r.stderr)


class LayoutTests(unittest.TestCase):
    """Every mirrored struct, field by field, against the C compiler's layout."""

    def test_structs_and_constants_match_c(self):
        cc = os.environ.get("PROJD_TEST_CC") or "cc"
        lines = [
            "#include <stddef.h>",
            "#include <stdio.h>",
            '#include "client/projd.h"',
            '#include "client/projd_cuda.h"',
            '#define F(T, f) printf("%s.%s %zu %zu\\n", #T, #f, offsetof(T, f), sizeof(((T *)0)->f));',
            '#define C(name) printf("%s %lld\\n", #name, (long long)(name));',
            "int main(void) {",
        ]
        want = {}
        for cname, ctype in projd._C_STRUCTS.items():
            lines.append('printf("%s %%zu %%zu\\n", sizeof(%s), (size_t)0);' % (cname, cname))
            want[cname] = (projd.ctypes.sizeof(ctype), 0)
            for fname, _ in ctype._fields_:
                lines.append("F(%s, %s)" % (cname, fname))
                d = getattr(ctype, fname)
                want["%s.%s" % (cname, fname)] = (d.offset, d.size)
        consts = {
            "PROJD_DEFAULT_TIMEOUT_MS": projd.DEFAULT_TIMEOUT_MS,
            "PROJD_RESULT_MAX_OPS": projd.RESULT_MAX_OPS,
            "PJ_PF_WAIT_EVENT": projd.PF_WAIT_EVENT,
            "PJ_PF_SIGNAL_EVENT": projd.PF_SIGNAL_EVENT,
            "PJ_PF_ACCEPT_REPLY": projd.PF_ACCEPT_REPLY,
            "PJ_WIRE_NAME_MAX": projd._NAME_MAX,
            "PJ_WIRE_UUID_SIZE": projd._UUID_SIZE,
            "PJ_WIRE_IPC_HANDLE_SIZE": projd._IPC_HANDLE_SIZE,
            "PJ_WIRE_MAX_LAYERS": projd._MAX_LAYERS,
            "PJ_WIRE_MAX_LAYERS_ALL": projd._MAX_LAYERS_ALL,
            "PJ_WIRE_MAX_SHAPES": projd._MAX_SHAPES,
            "PJ_WIRE_OP_SIZE": projd.ctypes.sizeof(projd._Op),
        }
        for s in Status:
            consts["PJ_" + s.name] = int(s)
        for name in consts:
            lines.append("C(%s)" % name)
        lines += ["return 0;", "}"]
        with tempfile.TemporaryDirectory() as d:
            src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            cp = subprocess.run([cc, "-std=c11", "-I", REPO, src, "-o", exe], capture_output=True, text=True)
            self.assertEqual(cp.returncode, 0, "compiling the layout probe failed:\n" + cp.stderr)
            out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
        got = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3:
                got[parts[0]] = (int(parts[1]), int(parts[2]))
            else:
                self.assertEqual(int(parts[1]), consts[parts[0]], parts[0])
        self.assertEqual(got, want)
        self.assertEqual(len([line for line in out.splitlines() if len(line.split()) == 2]), len(consts))


# ---- against the daemons -----------------------------------------------------------------------------


class DaemonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.url = env("PROJD_TEST_URL")
        cls.c = projd.Client(cls.url, name="test_projd")
        cls.model = Model(env("PROJD_TEST_MODEL"))
        cls.terms = {}
        for L in cls.c.layers:
            (n, k), terms = cls.model.terms(L.name + ".weight", L.format)
            assert (n, k) == (L.n, L.k), (L, n, k)
            # The reference is exact when every product x*w is an fp32 value:
            # 16 significant bits and |x*w| >= 2**-133 (|x| >= 2**-8 here).
            smallest = min(abs(w) for term in terms for col in term for w in col if w != 0.0)
            assert smallest >= 2.0**-125, "layer %s: weight %g too small for the exact reference" % (L.name, smallest)
            cls.terms[L.name] = terms

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def buffers(self, want=None, timeout=5.0):
        """The daemon's count of registered buffers (all connections). The
        daemon releases a closed connection's buffers on its own time, and
        earlier tests close connections: with want, poll until the count is
        want (at the deadline return what it is, for the assertion to show);
        without, until two reads 50 ms apart agree."""
        deadline = time.monotonic() + timeout
        last = self.c.stats()["buffers"]["current"]
        while time.monotonic() < deadline:
            if want is not None and last == want:
                return last
            time.sleep(0.05)
            now = self.c.stats()["buffers"]["current"]
            if want is None and now == last:
                return now
            last = now
        return last

    def fresh(self):
        """The test's random source: seeded by its name, the same every run."""
        if not hasattr(self, "_rng"):
            self._rng = random.Random(zlib.crc32(self.id().encode()))
        return self._rng

    def threads_share(self, c, layer):
        """Four threads, each with its own buffers and random source, run
        six cases each on the one connection c."""
        errors = []

        def worker(seed):
            try:
                rng = random.Random(seed)
                for i in range(6):
                    self.run_case(layer, 1 + (seed + i) % 4, rng=rng, c=c)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def run_case(self, layer, m, n=None, x_off=0, x_ld=None, y_off=0, y_ld=None, y_slack=6, rng=None, c=None):
        """Stage random x at x_off / x_ld in an exactly sized buffer, poison y,
        project, and check every element of y against the reference (the
        m x n result) and the poison (everything else)."""
        c = c or self.c
        L = c.layer(layer)
        n = n or L.n
        x_ld = x_ld or L.k
        y_ld = y_ld or n
        rows = random_x(rng or self.fresh(), m, L.k)
        xbytes = x_off + ((m - 1) * x_ld + L.k) * 2
        ybytes = y_off + ((m - 1) * y_ld + n) * 2 + y_slack
        with c.shm_buffer(xbytes) as xb, c.shm_buffer(ybytes) as yb:
            for i, row in enumerate(rows):
                xb.write(row.tobytes(), x_off + i * x_ld * 2)
            yb.fill(0xFF)
            op = Op(layer=layer, m=m, n=n, x_buf=xb, x_off=x_off, x_ld=x_ld, y_buf=yb, y_off=y_off, y_ld=y_ld)
            r = c.project([op])
            got = array.array("H", yb.read())
        self.assertEqual((r.status, r.n_ops, r.failed_op, len(r.ops), r.ops[0].status), (0, 1, None, 1, 0))
        self.assertTrue(r.ok)
        self.assertGreater(r.total_ns, 0)
        self.assertGreaterEqual(r.total_ns, r.exec_ns)
        want = reference(self.terms[layer], [projd.bf16_to_floats(row.tobytes()) for row in rows], n)
        self.check_y(got, want, m, n, y_off // 2, y_ld, "%s m %d n %d" % (layer, m, n))
        return r

    def check_y(self, got, want, m, n, y_off_el, y_ld, what):
        exp = array.array("H", [POISON] * len(got))
        for i in range(m):
            at = y_off_el + i * y_ld
            exp[at : at + n] = want[i * n : (i + 1) * n]
        self.assert_words(
            got, exp, what, lambda e: "row %d col %d" % divmod(e - y_off_el, y_ld) if e >= y_off_el else "before y"
        )

    def assert_words(self, got, want, what, where=lambda e: "element %d" % e):
        """Equal bf16 words, else name the first that differs."""
        self.assertEqual(len(got), len(want), what)
        if got != want:
            e = next(j for j in range(len(got)) if got[j] != want[j])
            self.fail("%s: y element %d (%s) is %#06x, expected %#06x" % (what, e, where(e), got[e], want[e]))


class InfoTests(DaemonTest):
    def test_info_matches_projctl_layers(self):
        with open(env("PROJD_TEST_LAYERS")) as f:
            text = f.read()
        rows = re.findall(r"^(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\S+)\s*$", text, re.M)
        self.assertEqual(len(rows), 5, text)
        self.assertEqual(
            [(L.index, L.name, L.n, L.k, L.format) for L in self.c.layers],
            [(int(i), name, int(n), int(k), f) for i, name, n, k, f in rows],
        )
        # the cpu backend captures no graphs, and projctl says so
        lo, hi = re.search(r"^m: (\d+)\.\.(\d+) \(cpu backend: no CUDA graphs\)$", text, re.M).groups()
        self.assertEqual((1, self.c.info.limits.max_m), (int(lo), int(hi)))

    def test_info_fields(self):
        info = self.c.info
        self.assertEqual((info.version, info.backend, info.backend_id), (1, "cpu", 1))
        self.assertEqual(info.device_uuid, bytes(16))
        self.assertEqual(info.limits, projd.Limits(256, 64, 64, 65536))
        self.assertEqual(
            [(L.name, L.n, L.k, L.format) for L in info.layers],
            [("qkv_gate", 320, 256, "z12"), ("o", 256, 192, "z12"), ("pooler", 384, 256, "z12"),
             ("unpooler", 512, 256, "z12"), ("router", 64, 256, "split")],
        )
        o = self.c.layer("o")
        self.assertEqual((o.index, o.m_range, o.n_range), (1, range(1, 257), range(1, 257)))
        names = "qkv_gate, o, pooler, unpooler, router"
        with self.assertRaisesRegex(KeyError, r"unknown layer 'qkv' \(the daemon serves %s\)" % names):
            self.c.layer("qkv")
        with self.assertRaises(TypeError):
            self.c.layer(1)
        self.assertEqual(self.c.url, self.url)

    def test_default_url_is_projd_socket(self):
        old = os.environ.get("PROJD_SOCKET")
        os.environ["PROJD_SOCKET"] = self.url
        try:
            with projd.Client() as c2:
                self.assertEqual(c2.url, self.url)
                c2.ping()
        finally:
            if old is None:
                del os.environ["PROJD_SOCKET"]
            else:
                os.environ["PROJD_SOCKET"] = old

    def test_weight_digests(self):
        served = self.c.weight_digests()
        self.assertEqual(sorted(served), sorted(L.name for L in self.c.layers))
        stats_model = self.c.stats()["model"]
        self.assertEqual(stats_model["file_bytes"], os.path.getsize(env("PROJD_TEST_MODEL")))
        for L in self.c.layers:
            dtype, shape, raw = self.model.tensors[L.name + ".weight"]
            self.assertEqual(served[L.name], projd.weight_digest(raw), L.name)
            self.c.check_weight(L.name, raw)  # the daemon's C digest equals Python's
            other = bytearray(raw)
            other[len(other) // 2] ^= 0x40
            with self.assertRaisesRegex(ValueError, "serves other weights .*start it on the same checkpoint"):
                self.c.check_weight(L.name, other)
        with self.assertRaises(KeyError):
            self.c.check_weight("no-such-layer", b"")
        # the definition: CRC-32 of the 1 MiB pieces' CRC-32s, little-endian
        data = bytes(range(256)) * 4097  # a whole piece and a short one
        piece = projd.DIGEST_PIECE
        want = zlib.crc32(
            zlib.crc32(data[:piece]).to_bytes(4, "little") + zlib.crc32(data[piece:]).to_bytes(4, "little")
        )
        self.assertEqual(projd.weight_digest(data), want)
        self.assertEqual(projd.weight_digest(b""), 0)

    def test_ping_stats_timeout(self):
        self.assertGreater(self.c.ping(), 0)
        before = self.c.stats()
        self.assertEqual(before["backend"], "cpu")
        self.assertEqual(sorted(before["layers"]), sorted(L.name for L in self.c.layers))
        self.run_case("router", 2)
        after = self.c.stats()
        self.assertEqual(after["layers"]["router"]["ops"], before["layers"]["router"]["ops"] + 1)
        self.assertEqual(after["layers"]["router"]["rows"], before["layers"]["router"]["rows"] + 2)
        self.assertGreater(after["requests"]["PING"], 0)
        self.assertEqual(self.c.timeout_ms, projd.DEFAULT_TIMEOUT_MS)
        # connect_timeout_ms bounds the connect; timeout_ms the calls after it
        with projd.Client(self.url, connect_timeout_ms=2000, timeout_ms=1234) as c2:
            self.assertEqual(c2.timeout_ms, 1234)
        with projd.Client(self.url, connect_timeout_ms=2000) as c2:
            self.assertEqual(c2.timeout_ms, projd.DEFAULT_TIMEOUT_MS)
        with self.assertRaises(ValueError):
            projd.Client(self.url, connect_timeout_ms=0)
        with projd.Client(self.url, timeout_ms=1234) as c2:
            self.assertEqual(c2.timeout_ms, 1234)
            c2.timeout_ms = 5000
            self.assertEqual(c2.timeout_ms, 5000)
            for bad in (0, -1, 2**31):
                with self.assertRaises(ValueError):
                    c2.timeout_ms = bad
            with self.assertRaises(TypeError):
                c2.timeout_ms = 1.5

    def test_connect_errors(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(ProjdError) as cm:
                projd.Client("ipc://%s/none.sock" % d)
        e = cm.exception
        self.assertLess(e.code, 0)
        self.assertIn(e.errno, (2, 111))  # ENOENT, ECONNREFUSED
        self.assertIn("none.sock", e.message)
        self.assertEqual(e.name, os.strerror(e.errno))
        for bad, exc in ((5, TypeError), ("ipc:///x\0y", ValueError)):
            with self.assertRaises(exc):
                projd.Client(bad)
        with self.assertRaises(TypeError):
            projd.Client(self.url, name=3)
        with self.assertRaises(ValueError):
            projd.Client(self.url, timeout_ms=0)


class ProjectTests(DaemonTest):
    def test_every_layer_and_m(self):
        # Each layer at m = 1, 8, 16, 33: contiguous, then with offsets, then
        # with row strides wider than the rows.
        for L in self.c.layers:
            self.run_case(L.name, 1)
            self.run_case(L.name, 8, x_off=64, y_off=6)
            self.run_case(L.name, 16, x_ld=L.k + 3, y_ld=L.n + 7, y_off=10)
            self.run_case(L.name, 33)

    def test_row_prefix(self):
        self.run_case("unpooler", 5, n=128)
        self.run_case("router", 3, n=17, y_ld=20)
        self.run_case("o", 2, n=1)

    def test_many_ops_one_request(self):
        # One op per layer in one request, all in one x and one y buffer;
        # then o's output read by pooler in the same request (ops run in order).
        rng = self.fresh()
        m = 3
        layers = self.c.layers
        xs = {L.name: random_x(rng, m, L.k) for L in layers}
        x_at, y_at, xo, yo = {}, {}, 0, 0
        for L in layers:
            x_at[L.name], y_at[L.name] = xo, yo
            xo += m * L.k * 2
            yo += m * L.n * 2
        with self.c.shm_buffer(xo) as xb, self.c.shm_buffer(yo + 2 * m * 384) as yb:
            for L in layers:
                xb.write(b"".join(r.tobytes() for r in xs[L.name]), x_at[L.name])
            yb.fill(0xFF)
            ops = [Op(layer=L.name, m=m, x_buf=xb, x_off=x_at[L.name], y_buf=yb, y_off=y_at[L.name]) for L in layers]
            chain_off = yo
            ops.append(Op(layer="pooler", m=m, x_buf=yb, x_off=y_at["o"], y_buf=yb, y_off=chain_off))
            r = self.c.project(ops)
            got = array.array("H", yb.read())
        self.assertEqual(r.n_ops, 6)
        self.assertEqual([o.status for o in r.ops], [0] * 6)
        want = array.array("H")
        for L in layers:
            want.extend(reference(self.terms[L.name], [projd.bf16_to_floats(x.tobytes()) for x in xs[L.name]], L.n))
        o_out = want[y_at["o"] // 2 : y_at["o"] // 2 + m * 256]
        o_rows = [projd.bf16_to_floats(o_out[i * 256 : (i + 1) * 256].tobytes()) for i in range(m)]
        want.extend(reference(self.terms["pooler"], o_rows, 384))
        self.assert_words(got, want, "six ops in one request")

    def test_threads_share_a_client(self):
        # libprojd is thread-safe and ctypes drops the GIL: four threads,
        # each with its own buffers, on one connection.
        self.threads_share(self.c, "router")


class PackedOpsTests(DaemonTest):
    """project_packed: the same requests as project(), from ops packed once."""

    def test_same_results_as_project(self):
        # Every layer, m = 1 and 5, with offsets and wide rows, through one
        # reused PackedOps: each y checked against the reference and the
        # poison around it; then two ops in one request.
        rng = self.fresh()
        packed = projd.PackedOps(2)
        for L in self.c.layers:
            for m, x_off, x_ld, y_off, y_ld in ((1, 0, L.k, 0, L.n), (5, 32, L.k + 5, 6, L.n + 3)):
                rows = random_x(rng, m, L.k)
                with self.c.shm_buffer(x_off + ((m - 1) * x_ld + L.k) * 2) as xb, self.c.shm_buffer(
                    y_off + ((m - 1) * y_ld + L.n) * 2 + 4
                ) as yb:
                    for i, row in enumerate(rows):
                        xb.write(row.tobytes(), x_off + i * x_ld * 2)
                    yb.fill(0xFF)
                    packed.set(0, L.index, m, L.n, xb.id, x_off, x_ld, yb.id, y_off, y_ld)
                    self.assertIsNone(self.c.project_packed(packed, 1))
                    got = array.array("H", yb.read())
                r = packed.result()
                self.assertEqual((r.status, r.n_ops, r.failed_op, [o.status for o in r.ops]), (0, 1, None, [0]))
                want = reference(self.terms[L.name], [projd.bf16_to_floats(x.tobytes()) for x in rows], L.n)
                self.check_y(got, want, m, L.n, y_off // 2, y_ld, "packed %s m %d" % (L.name, m))
        o = self.c.layer("o")
        rows = random_x(rng, 2, o.k)
        with self.c.shm_buffer(2 * o.k * 2) as xb, self.c.shm_buffer(2 * o.n * 2) as yb:
            xb.write(b"".join(r.tobytes() for r in rows))
            yb.fill(0xFF)
            packed.set(0, o.index, 1, o.n, xb.id, 0, o.k, yb.id, 0, o.n)
            packed.set(1, o.index, 1, o.n, xb.id, o.k * 2, o.k, yb.id, o.n * 2, o.n)
            self.c.project_packed(packed)  # count None: both
            got = array.array("H", yb.read())
        self.assertEqual(packed.result().n_ops, 2)
        want = reference(self.terms["o"], [projd.bf16_to_floats(x.tobytes()) for x in rows], o.n)
        self.assert_words(got, want, "two packed ops")

    def test_errors(self):
        o = self.c.layer("o")
        packed = projd.PackedOps(2)
        with self.c.shm_buffer(o.k * 2) as xb, self.c.shm_buffer(o.n * 2) as yb:
            good = (o.index, 1, o.n, xb.id, 0, o.k, yb.id, 0, o.n)
            packed.set(0, *good)
            # The daemon's refusal: the second op past y's end, as project().
            packed.set(1, o.index, 1, o.n, xb.id, 0, o.k, yb.id, 2, o.n)
            yb.fill(0xFF)
            with self.assertRaises(ProjdError) as cm:
                self.c.project_packed(packed, 2)
            e = cm.exception
            # count: any integer type (a numpy one has __index__), in range
            for bad, err in ((0, ValueError), (3, ValueError), (2.0, TypeError), (True, TypeError)):
                with self.assertRaises(err, msg=repr(bad)):
                    self.c.project_packed(packed, bad)
            self.assertEqual((e.status, e.failed_op, e.result.n_ops), (Status.E_BOUNDS, 1, 2), str(e))
            self.assertEqual(packed.result().status, int(Status.E_BOUNDS))
            self.assertEqual(yb.read(), b"\xff" * yb.size)  # nothing ran
            # Events reach the daemon (the cpu backend refuses them whole).
            with self.assertRaises(ProjdError) as cm:
                self.c.project_packed(packed, 1, projd.PF_ACCEPT_REPLY, None, bytes(64))
            self.assertEqual(cm.exception.status, Status.E_FLAGS)
            # Refused here, before C: nothing is sent.
            for kw, exc in (
                (dict(count=0), ValueError),
                (dict(count=3), ValueError),
                (dict(flags=projd.PF_WAIT_EVENT), ValueError),
                (dict(flags=-1), ValueError),
                (dict(wait_event=bytearray(64)), ValueError),
                (dict(signal_event=b"\0" * 63), ValueError),
            ):
                with self.assertRaises(exc, msg=str(kw)):
                    self.c.project_packed(packed, **kw)
            # Values that do not fit their C field never wrap.
            for i, bad in ((0, -1), (1, 2**32), (4, 2**64), (8, -5)):
                args = list(good)
                args[i] = bad
                with self.assertRaisesRegex(ValueError, "negative or too wide", msg=str(args)):
                    packed.set(0, *args)
            with self.assertRaises(TypeError):
                packed.set(0, o.index, 1.0, o.n, xb.id, 0, o.k, yb.id, 0, o.n)
            with self.assertRaises(IndexError):
                packed.set(2, *good)
            with self.assertRaises(ValueError):
                projd.PackedOps(0)
            # The op refused by set() kept its last good value: the
            # connection and the array still serve.
            packed.set(0, *good)
            self.c.project_packed(packed, 1)
            self.assertEqual(packed.result().status, 0)
            self.assertNotEqual(yb.read(), b"\xff" * yb.size)

    def test_through_a_ring(self):
        with projd.Client(self.url, name="packed-ring", ring=True) as c:
            self.assertTrue(c.ring_active)
            before = c.stats()["ring"]["requests"]
            L = c.layer("router")
            rows = random_x(self.fresh(), 3, L.k)
            packed = projd.PackedOps()
            with c.shm_buffer(3 * L.k * 2) as xb, c.shm_buffer(3 * L.n * 2) as yb:
                xb.write(b"".join(r.tobytes() for r in rows))
                for _ in range(3):
                    yb.fill(0xFF)
                    packed.set(0, L.index, 3, L.n, xb.id, 0, L.k, yb.id, 0, L.n)
                    c.project_packed(packed)
                    got = array.array("H", yb.read())
                    want = reference(self.terms["router"], [projd.bf16_to_floats(x.tobytes()) for x in rows], L.n)
                    self.assert_words(got, want, "packed through the ring")
            self.assertGreaterEqual(c.stats()["ring"]["requests"] - before, 3)


class RingTests(DaemonTest):
    """The same projections through a shared-memory ring (projd_ring_attach)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.r = projd.Client(cls.url, name="test_projd_ring", ring=True)

    @classmethod
    def tearDownClass(cls):
        cls.r.close()
        super().tearDownClass()

    def ring_requests(self):
        return self.c.stats()["ring"]["requests"]

    def test_every_layer_through_the_ring(self):
        self.assertTrue(self.r.ring_active)
        self.assertFalse(self.c.ring_active)
        before = self.ring_requests()
        for L in self.r.layers:
            self.run_case(L.name, 1, c=self.r)
            self.run_case(L.name, 8, x_off=64, y_off=6, c=self.r)
            self.run_case(L.name, 33, x_ld=L.k + 3, y_ld=L.n + 7, c=self.r)
        self.r.ping()
        self.assertEqual(self.ring_requests() - before, 3 * len(self.r.layers) + 1)

    def test_threads_share_a_ring(self):
        self.threads_share(self.r, "o")

    def test_errors_and_a_second_ring(self):
        with self.r.shm_buffer(64) as xb, self.r.shm_buffer(64) as yb:
            with self.assertRaises(projd.ProjdError) as cm:
                self.r.project([Op(layer="o", m=1, x_buf=xb, y_buf=yb)])
            self.assertEqual(cm.exception.name, "E_BOUNDS")
        with self.assertRaises(projd.ProjdError) as cm:
            self.r.attach_ring()
        self.assertIn("has one already", str(cm.exception))
        self.assertTrue(self.r.ring_active)
        with self.assertRaises(TypeError):
            projd.Client(self.url, ring=1)
        with self.assertRaises(ValueError):
            self.c.attach_ring(5000)


class ErrorTests(DaemonTest):
    def setUp(self):
        self.o = self.c.layer("o")
        self.m = 2
        self.xb = self.c.shm_buffer(self.m * self.o.k * 2)
        self.yb = self.c.shm_buffer(self.m * self.o.n * 2)

    def tearDown(self):
        self.xb.release()
        self.yb.release()

    def op(self, **kw):
        a = dict(layer=self.o.index, m=self.m, x_buf=self.xb, y_buf=self.yb)
        a.update(kw)
        return Op(**a)

    def expect(self, ops, status, failed_op, text):
        """The request fails with status at failed_op (a tuple: any of them)."""
        allowed = failed_op if isinstance(failed_op, tuple) else (failed_op,)
        self.yb.fill(0xFF)
        with self.assertRaises(ProjdError) as cm:
            self.c.project(ops)
        e = cm.exception
        self.assertEqual((e.code, e.name, e.status), (int(status), status.name, status), str(e))
        self.assertIn(e.failed_op, allowed, str(e))
        self.assertIn(text, e.message)
        self.assertEqual((e.result.status, e.result.failed_op, e.result.n_ops), (int(status), e.failed_op, len(ops)))
        # ... no op reads as OK: each carries the request's status
        self.assertEqual([o.status for o in e.result.ops], [int(status)] * min(len(ops), projd.RESULT_MAX_OPS))
        self.assertIn(status.name, str(e))
        # Nothing ran (every op is checked before any runs) ...
        self.assertEqual(self.yb.read(), b"\xff" * self.yb.size)
        # ... and the same connection serves the next request.
        self.assertEqual(self.c.project([self.op()]).status, 0)
        self.assertNotEqual(self.yb.read(), b"\xff" * self.yb.size)

    def test_daemon_refusals(self):
        self.expect([self.op(layer=99, n=1, x_ld=1)], Status.E_LAYER, 0, "layer 99")
        # Without n the wrapper cannot take the layer's: it names the unknown
        # layer first, then what would send the op anyway; nothing is sent.
        with self.assertRaisesRegex(ValueError, r"ops\[0\]\.layer: 99 is not a layer the daemon serves "
                                    r"\(it announced %d\); ops\[0\]\.n must be given" % len(self.c.info.layers)):
            self.c.project([self.op(layer=99)])
        self.expect([self.op(m=self.c.info.limits.max_m + 1)], Status.E_SHAPE, 0, "")
        self.expect([self.op(m=0)], Status.E_SHAPE, 0, "")
        self.expect([self.op(n=self.o.n + 1)], Status.E_SHAPE, 0, "")
        self.expect([self.op(x_ld=self.o.k - 1)], Status.E_SHAPE, 0, "")
        self.expect([self.op(x_off=2)], Status.E_BOUNDS, 0, "")  # one element past the end
        self.expect([self.op(x_off=2**62)], Status.E_BOUNDS, 0, "")
        self.expect([self.op(y_off=1)], Status.E_BOUNDS, 0, "")  # misaligned
        self.expect([self.op(x_buf=12345)], Status.E_BUFFER, 0, "")
        self.expect([self.op(), self.op(y_off=self.yb.size)], Status.E_BOUNDS, 1, "")
        # op_flags are judged while decoding; the ERROR still names the op
        self.expect([self.op(op_flags=1)], Status.E_FLAGS, 0, "op 0")
        self.expect([self.op(), self.op(op_flags=2)], Status.E_FLAGS, 1, "op 1")

    def test_events_reach_the_daemon(self):
        # The cpu backend has no CUDA events: a request carrying them goes
        # out through projd_project_events, handles in the body, and the
        # daemon refuses it whole with E_FLAGS; the connection keeps serving.
        ev = bytes(range(64))
        self.yb.fill(0xFF)
        for kw, flags in ((dict(wait_event=ev), 0), (dict(signal_event=ev), projd.PF_ACCEPT_REPLY),
                          (dict(wait_event=ev, signal_event=bytearray(ev)), 0)):
            with self.assertRaises(ProjdError, msg=str(kw)) as cm:
                self.c.project([self.op()], flags=flags, **kw)
            self.assertEqual(cm.exception.status, Status.E_FLAGS)
        self.assertEqual(self.yb.read(), b"\xff" * self.yb.size)
        for bad in (b"\0" * 63, b"\0" * 65, "x" * 64, 64):
            with self.assertRaises(ValueError):
                self.c.project([self.op()], wait_event=bad)
        self.assertEqual(self.c.project([self.op()]).status, 0)

    def test_too_many_ops(self):
        ops = [self.op()] * (self.c.info.limits.max_ops_per_request + 1)
        with self.assertRaises(ProjdError) as cm:
            self.c.project(ops)
        self.assertEqual(cm.exception.status, Status.E_LIMIT)
        self.assertEqual(self.c.project([self.op()]).status, 0)

    def test_refused_before_c(self):
        bad = [
            (dict(layer=1.5), TypeError),
            (dict(layer="nope"), ValueError),
            (dict(layer=-1), ValueError),
            (dict(m=-1), ValueError),
            (dict(m=True), TypeError),
            (dict(m=2**32), ValueError),
            (dict(m="8"), TypeError),
            (dict(n=2**32), ValueError),
            (dict(x_buf="x"), TypeError),
            (dict(y_buf=None), TypeError),
            (dict(x_off=-2), ValueError),
            (dict(y_ld=2**64), ValueError),
            (dict(layer=99), ValueError),  # n and x_ld cannot default for a layer the daemon lacks
        ]
        for kw, exc in bad:
            with self.assertRaises(exc, msg=str(kw)):
                self.c.project([self.op(**kw)])
        with self.assertRaises(ValueError):
            self.c.project([])
        with self.assertRaises(TypeError):
            self.c.project("ops")
        with self.assertRaises(TypeError):
            self.c.project([("o", 1)])
        with self.assertRaises(ValueError):
            self.c.project([self.op()], flags=projd.PF_WAIT_EVENT)
        with self.assertRaises(TypeError):
            self.c.project([self.op()], flags=None)
        with projd.Client(self.url) as other, other.shm_buffer(64) as ob:
            with self.assertRaisesRegex(ValueError, "another connection"):
                self.c.project([self.op(x_buf=ob)])
        for size, exc in ((0, ValueError), (-1, ValueError), ("1", TypeError), (1.0, TypeError)):
            with self.assertRaises(exc):
                self.c.shm_buffer(size)
        with self.assertRaises(TypeError):
            self.c.unregister("1")
        # A single Op is taken as a list of one.
        self.assertEqual(self.c.project(self.op()).n_ops, 1)

    def test_cuda_paths_without_a_gpu(self):
        # The cpu backend refuses CUDA IPC buffers: the call reaches the
        # daemon and comes back as E_REGISTER, and the connection goes on.
        with self.assertRaises(ProjdError) as cm:
            self.c.register_cuda_ipc(bytes(64), bytes(16), 4096)
        self.assertEqual(cm.exception.status, Status.E_REGISTER)
        for h, u, exc in ((bytes(63), bytes(16), ValueError), (bytes(64), bytes(15), ValueError),
                          ("h", bytes(16), TypeError)):
            with self.assertRaises(exc):
                self.c.register_cuda_ipc(h, u, 4096)
        with self.assertRaises(ValueError):
            self.c.register_cuda_ipc(bytes(64), bytes(16), 0)
        with self.assertRaises(ValueError):
            projd.cuda_describe(0)
        # Host memory is no device pointer: refused (no driver: -ENOSYS; no
        # device: -EIO; a driver with a GPU: -EINVAL), never a crash.
        with self.assertRaises(ProjdError) as cm:
            self.c.register_device_pointer(self.xb.address)
        self.assertIn(cm.exception.errno, (38, 5, 22), str(cm.exception))  # ENOSYS, EIO, EINVAL
        with self.assertRaises(ProjdError) as cm:
            self.c.unregister(54321)
        self.assertEqual(cm.exception.status, Status.E_BUFFER)
        self.assertEqual(self.c.project([self.op()]).status, 0)


class BufferTests(DaemonTest):

    def test_with_block_keeps_its_exception(self):
        # A with block ending on an exception lets it through, even where
        # the release (a view open) would raise: the buffer is left, and
        # released later. Ending normally, the release's error shows.
        with self.assertRaisesRegex(KeyError, "original"):
            with self.c.shm_buffer(64) as b:
                v = b.view()
                raise KeyError("original")
        self.assertFalse(b.released)
        v.release()
        b.release()
        self.assertTrue(b.released)
        with self.assertRaisesRegex(BufferError, "memoryview"):
            with self.c.shm_buffer(64) as b2:
                v2 = b2.view()
        v2.release()
        b2.release()
        # The client likewise: left open, closed once the view is gone.
        with self.assertRaisesRegex(KeyError, "client"):
            with projd.Client(self.url, name="test_projd_with") as c2:
                b3 = c2.shm_buffer(64)
                v3 = b3.view()
                raise KeyError("client")
        self.assertFalse(c2.closed)
        v3.release()
        c2.close()
        self.assertTrue(c2.closed)

    def test_access_and_release(self):
        base = self.buffers()
        b = self.c.shm_buffer(100)
        b2 = self.c.shm_buffer(10)
        self.assertNotEqual(b.id, b2.id)
        self.assertEqual((b.size, b.released), (100, False))
        self.assertEqual(self.buffers(base + 2), base + 2)
        self.assertEqual(b.read(), bytes(100))  # zeroed
        with b.view() as v:
            self.assertEqual((v.format, v.nbytes, v.readonly), ("B", 100, False))
            v[10:13] = b"abc"
        b.write(b"xyz", 97)
        self.assertEqual(b.read(10, 3), b"abc")
        self.assertEqual(b.read(97), b"xyz")
        self.assertEqual(projd.ctypes.string_at(b.address + 10, 3), b"abc")
        b.fill(0x5A)
        self.assertEqual(b.read(), b"\x5a" * 100)
        for call, exc in (
            (lambda: b.write(b"1234", 97), ValueError),
            (lambda: b.write(b"1", 101), ValueError),
            (lambda: b.read(50, 51), ValueError),
            (lambda: b.read(-1), ValueError),
            (lambda: b.fill(256), ValueError),
            (lambda: b.write("text"), TypeError),
        ):
            with self.assertRaises(exc):
                call()
        # An open view keeps the mapping: release refuses, then goes on.
        v = b.view()
        v2 = v[1:5]
        v.release()
        with self.assertRaisesRegex(BufferError, "memoryview"):
            b.release()
        del v2
        bid = b.id
        b.release()
        b.release()  # a no-op
        self.assertTrue(b.released)
        self.assertEqual(self.buffers(base + 1), base + 1)
        for call in (b.view, b.read, lambda: b.write(b"x"), lambda: b.address):
            with self.assertRaisesRegex(ValueError, "released"):
                call()
        with self.assertRaisesRegex(ValueError, "released"):
            self.c.project([Op(layer="o", m=1, x_buf=b, y_buf=b2)])
        # The id itself is stale at the daemon.
        with self.assertRaises(ProjdError) as cm:
            self.c.project([Op(layer="router", m=1, n=1, x_buf=bid, y_buf=b2)])
        self.assertEqual(cm.exception.status, Status.E_BUFFER)
        with b2:
            pass
        self.assertTrue(b2.released)
        self.assertEqual(self.buffers(base), base)

    def test_dropped_buffer_is_released(self):
        base = self.buffers()
        b = self.c.shm_buffer(4096)
        v = b.view()
        del b
        gc.collect()
        # The view keeps the mapping (and the registration) ...
        v[0] = 7
        self.assertEqual(self.buffers(base + 1), base + 1)
        # ... until it goes.
        v.release()
        del v
        gc.collect()
        self.assertEqual(self.buffers(base), base)


class CloseTests(DaemonTest):
    def test_context_manager_closes(self):
        base = self.buffers()
        with projd.Client(self.url) as c2:
            b = c2.shm_buffer(256)
            self.assertEqual(self.buffers(base + 1), base + 1)
        self.assertTrue(c2.closed)
        self.assertTrue(b.released)
        self.assertEqual(self.buffers(base), base)
        for call in (c2.ping, c2.stats, lambda: c2.shm_buffer(8), lambda: c2.timeout_ms):
            with self.assertRaisesRegex(ValueError, "closed"):
                call()
        with self.assertRaisesRegex(ValueError, "released"):
            b.view()
        b.release()  # released by close: a no-op
        c2.close()  # idempotent
        self.assertIn("closed", repr(c2))

    def test_close_refused_while_a_view_is_open(self):
        base = self.buffers()
        c2 = projd.Client(self.url)
        b = c2.shm_buffer(64)
        v = b.view()
        with self.assertRaisesRegex(BufferError, "memoryview"):
            c2.close()
        self.assertFalse(c2.closed)
        c2.ping()
        v.release()
        c2.close()
        self.assertTrue(c2.closed and b.released)
        # the daemon let go of c2's buffer (on its own time): later tests
        # start from the count they read
        self.assertEqual(self.buffers(base), base)

    def test_views_are_counted_not_refcounted(self):
        # slices and casts of a view hold it; the buffer's own reads do not
        b = self.c.shm_buffer(32)
        v = b.view()
        part = v[4:8].cast("B")
        v.release()
        b.read()
        with self.assertRaisesRegex(BufferError, "1 memoryview"):
            b.release()
        part.release()
        del v, part
        gc.collect()
        b.release()
        self.assertTrue(b.released)


class ForkTests(DaemonTest):
    # In a fresh interpreter: the fork's normal exit must run the
    # finalizers of what it inherited, and unittest must not catch it.
    CHILD = r"""
import os, sys, projd
c = projd.Client(sys.argv[1])
b = c.shm_buffer(64)
b.write(b"\x01\x02")
r = c.project_async([projd.Op(layer=0, m=1, n=1, x_ld=1, x_buf=b, y_buf=b)])
pid = os.fork()
if pid == 0:
    for what, call in (("ping", c.ping), ("client", lambda: projd.Client(sys.argv[1])),
                       ("release", b.release), ("wait", r.wait)):
        try:
            call()
            print(what, "no error", flush=True)
        except RuntimeError as exc:
            print(what, "RuntimeError", "fork" in str(exc) and "spawn" in str(exc), flush=True)
    print("read", b.read(0, 2) == b"\x01\x02", flush=True)
    sys.exit(0)  # a normal exit: Client, buffer and request are finalized here
_, status = os.waitpid(pid, 0)
print("child status", status, flush=True)
r.close()
print("parent ping", c.ping() > 0, "buffer", b.id, b.released, flush=True)
b.release()
c.close()
"""

    def test_a_fork_refuses_and_exits_cleanly(self):
        # nng aborts a fork that calls it after the parent did: before, a
        # fork that merely exited with a Client alive died of SIGABRT
        # (Client.__del__ -> projd_close), and any call in it too.
        base = self.buffers()
        e = dict(os.environ)
        e["PYTHONPATH"] = os.path.join(REPO, "client", "python")
        r = subprocess.run([sys.executable, "-c", self.CHILD, self.url], env=e, capture_output=True,
                           text=True, timeout=60)
        out = r.stdout
        self.assertEqual(r.returncode, 0, out + r.stderr)
        for what in ("ping", "client", "release", "wait"):
            self.assertIn("%s RuntimeError True" % what, out, out + r.stderr)
        self.assertIn("read True", out)
        self.assertIn("child status 0", out, out + r.stderr)
        self.assertIn("parent ping True buffer 1 False", out, out + r.stderr)
        self.assertNotIn("panic", r.stderr)
        self.assertEqual(self.buffers(base), base)


class AsyncTests(DaemonTest):
    def test_async_results(self):
        rng = self.fresh()
        reqs = []
        for L in self.c.layers:
            rows = random_x(rng, 4, L.k)
            xb, yb = self.c.shm_buffer(4 * L.k * 2), self.c.shm_buffer(4 * L.n * 2 + 2)
            xb.write(b"".join(r.tobytes() for r in rows))
            yb.fill(0xFF)
            reqs.append((L, rows, xb, yb, self.c.project_async([Op(layer=L.index, m=4, x_buf=xb, y_buf=yb)])))
        for L, rows, xb, yb, req in reqs:
            r = req.wait()
            self.assertTrue(req.done())
            self.assertEqual((r.status, r.n_ops, r.ops[0].status), (0, 1, 0))
            self.assertEqual(req.wait(), r)  # again: the same outcome
            want = reference(self.terms[L.name], [projd.bf16_to_floats(x.tobytes()) for x in rows], L.n)
            self.check_y(array.array("H", yb.read()), want, 4, L.n, 0, L.n, "async " + L.name)
            req.close()
            req.close()
            with self.assertRaisesRegex(ValueError, "closed"):
                req.done()
            xb.release()
            yb.release()

    def test_async_error(self):
        with self.c.shm_buffer(8) as b:
            with self.c.project_async([Op(layer="o", m=1, x_buf=b, y_buf=b)]) as req:
                with self.assertRaises(ProjdError) as cm:
                    req.wait(timeout=30)
                self.assertEqual((cm.exception.status, cm.exception.failed_op), (Status.E_BOUNDS, 0))
                with self.assertRaises(ProjdError):
                    req.result()
            with self.assertRaises(ValueError):
                self.c.project_async([])
            for bad in (-1, float("nan"), -0.5, True, "1"):
                with self.assertRaises(ValueError, msg=repr(bad)):
                    self.c.project_async([Op(layer="o", m=1, x_buf=b, y_buf=b)]).wait(timeout=bad)
            # Any real number of seconds: a Fraction, and an int subclass.
            for ok in (fractions.Fraction(30, 1), _Seconds(30)):
                with self.assertRaises(ProjdError, msg=repr(ok)) as cm:
                    self.c.project_async([Op(layer="o", m=1, x_buf=b, y_buf=b)]).wait(timeout=ok)
                self.assertEqual(cm.exception.status, Status.E_BOUNDS)


class _Seconds(int):
    """An int subclass, as a caller's own unit type might be."""


def own_daemon(test, binary, cfg, d):
    """A projd of the test's own on cfg, its socket and log in d, killed at
    the test's end if still running; (process, a Client connected to it)."""
    url = "ipc://" + os.path.join(d, "projd.sock")
    log = open(os.path.join(d, "projd.log"), "w")
    test.addCleanup(log.close)
    p = subprocess.Popen([binary, "--config", cfg, "--socket", url], stdout=log, stderr=log)
    test.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
    c, deadline = None, time.monotonic() + 30
    while c is None:
        try:
            c = projd.Client(url, timeout_ms=5000)
        except projd.ProjdError:
            if time.monotonic() > deadline or p.poll() is not None:
                raise
            time.sleep(0.05)
    return p, c


def own_cpu_daemon(test, prefix, **config):
    """own_daemon on the test model and the cpu backend, with config's
    top-level sections added, in a folder of its own removed at the test's
    end; (process, a Client connected to it, the folder)."""
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix=prefix)
    test.addCleanup(shutil.rmtree, d, True)
    cfg = os.path.join(d, "projd.json")
    with open(cfg, "w") as f:
        json.dump(dict({"model": {"path": env("PROJD_TEST_MODEL")}, "device": {"backend": "cpu"}}, **config), f)
    p, c = own_daemon(test, env("PROJD_TEST_PROJD"), cfg, d)
    return p, c, d


class LostDaemonTests(unittest.TestCase):
    """A daemon of this test's own, killed under a client: the calls fail
    with -ECONNRESET, and releasing a buffer or closing the client raises
    nothing (the daemon's side went with it, the mapping goes here)."""

    def test_release_and_close_after_the_daemon_died(self):
        p, c, _ = own_cpu_daemon(self, "projd-lost-")
        buf = c.shm_buffer(4096)
        kept = c.shm_buffer(4096)
        c.ping()
        p.kill()
        p.wait()
        lost, deadline = None, time.monotonic() + 10
        while lost is None and time.monotonic() < deadline:
            try:
                c.ping()
                time.sleep(0.02)
            except projd.ProjdError as e:
                lost = e
        self.assertIsNotNone(lost, "the client did not notice the daemon died")
        self.assertEqual(lost.code, -errno.ECONNRESET, lost)
        buf.release()  # raises nothing
        self.assertTrue(buf.released)
        # The error that ends a `with` block is the one that shows, not
        # the release's on the way out.
        with self.assertRaises(projd.ProjdError) as cm:
            with kept:
                c.ping()
        self.assertEqual(cm.exception.code, -errno.ECONNRESET)
        self.assertNotIn("UNREGISTER", cm.exception.message)
        self.assertTrue(kept.released)
        c.close()


class NonUtf8PathTests(unittest.TestCase):
    """A model whose path is not UTF-8 (a file system's bytes, as Linux
    allows): STATS reports the path's bytes as they are, and stats()
    returns them as os.fsdecode would (surrogate escapes) instead of
    raising UnicodeDecodeError (which also broke weight_digests)."""

    def test_stats_with_a_latin1_model_path(self):
        import shutil
        import tempfile

        d = tempfile.mkdtemp(prefix="projd-latin1-")
        self.addCleanup(shutil.rmtree, d, True)
        model = os.fsencode(d) + b"/mod\xe9le.safetensors"
        shutil.copyfile(env("PROJD_TEST_MODEL"), model)
        cfg = os.path.join(d, "projd.json")
        with open(cfg, "wb") as f:
            f.write(b'{"model": {"path": "' + model + b'"}, "device": {"backend": "cpu"}}')
        p, c = own_daemon(self, env("PROJD_TEST_PROJD"), cfg, d)
        self.addCleanup(c.close)
        st = c.stats()
        self.assertEqual(os.fsencode(st["model"]["path"]), model)
        self.assertTrue(c.weight_digests())


class RefusedTests(unittest.TestCase):
    """A daemon at its connection limit refuses the next Client and says
    why: ProjdError with the daemon's status (E_LIMIT) and its reason, and
    the connection that got in goes on."""

    def test_refused_says_why(self):
        p, c, d = own_cpu_daemon(self, "projd-refused-", limits={"max_connections": 1})
        with self.assertRaises(projd.ProjdError) as cm:
            projd.Client("ipc://" + os.path.join(d, "projd.sock"), timeout_ms=5000)
        self.assertEqual(cm.exception.code, projd.Status.E_LIMIT, cm.exception)
        self.assertIn("projd refused this connection: connection limit 1 reached", cm.exception.message)
        c.ping()
        c.close()
        p.terminate()
        self.assertEqual(p.wait(timeout=30), 0)


def write_safetensors(path, tensors, dtype="BF16"):
    """tensors: [(name, (n, k), array of words)] into a safetensors file."""
    header, blobs, off = {}, [], 0
    for name, shape, words in tensors:
        b = words.tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class PackTests(unittest.TestCase):
    """client/python/projd_pack.py: a Hugging Face checkpoint of two
    decoder layers in two files (q/k/v and gate/up apart, as Hugging Face
    stores them) packed into one file, served by a projd of the test's
    own with the configuration it wrote, and every fused layer checked
    bit for bit against the checkpoint's own pieces, rows in SGLang's
    order."""

    SHAPES = {  # n, k: a small GQA model (4 query heads, 2 kv heads of 16)
        "self_attn.q_proj": (64, 64),
        "self_attn.k_proj": (32, 64),
        "self_attn.v_proj": (32, 64),
        "self_attn.o_proj": (64, 64),
        "mlp.gate_proj": (128, 64),
        "mlp.up_proj": (128, 64),
        "mlp.down_proj": (64, 128),
    }

    def checkpoint(self, d):
        """Two decoder layers, split over two files by an index."""
        import projd_pack  # noqa: F401  (the module under test imports alone)

        rng = random.Random(5)
        pieces, shards = {}, ([], [])
        for layer in range(2):
            for part, (n, k) in self.SHAPES.items():
                name = "model.layers.%d.%s.weight" % (layer, part)
                words = array.array("H")
                for row in random_x(rng, n, k):
                    words.extend(w if w else 0x3C00 for w in row)  # no exact zeros: exact reference
                pieces[name] = words
                shards[(layer + ("mlp" in part)) % 2].append((name, (n, k), words))
        # what SGLang's model has beside the projections: not packed
        shards[0].append(("model.embed_tokens.weight", (8, 64), array.array("H", [0x3F80] * 512)))
        shards[1].append(("model.layers.0.input_layernorm.weight", (64,), array.array("H", [0x3F80] * 64)))
        names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
        weight_map = {}
        for fname, tensors in zip(names, shards):
            write_safetensors(os.path.join(d, fname), tensors)
            weight_map.update({t[0]: fname for t in tensors})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
        return pieces

    def test_packed_checkpoint_served(self):
        import shutil

        import projd_pack

        d = tempfile.mkdtemp(prefix="projd-pack-")
        self.addCleanup(shutil.rmtree, d, True)
        ckpt = os.path.join(d, "hf")
        os.mkdir(ckpt)
        pieces = self.checkpoint(ckpt)
        out, cfg = os.path.join(d, "packed.safetensors"), os.path.join(d, "packed.json")
        tune = os.path.join(d, "tune.json")
        self.assertEqual(projd_pack.main([ckpt, out, "--config", cfg, "--tune-config", tune, "--quiet"]), 0)
        with open(cfg) as f:
            conf = json.load(f)
        # The tuner's configuration: one layer of each kind and shape, the
        # first decoder layer's; every served layer tuned as its kind.
        with open(tune) as f:
            tconf = json.load(f)
        kinds = ["self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"]
        self.assertEqual(tconf["model"]["layers"],
                         [{"name": k, "tensor": "model.layers.0.%s.weight" % k} for k in kinds])
        self.assertEqual([L["tuned_as"] for L in conf["model"]["layers"]], kinds * 2)
        names = ["model.layers.%d.%s" % (i, p) for i in range(2) for p in
                 ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")]
        self.assertEqual([L["name"] for L in conf["model"]["layers"]], names)
        self.assertEqual(conf["model"]["path"], out)
        # The bytes: each fused tensor is its pieces' rows, in SGLang's order.
        packed = Model(out)
        fused = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                 "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}
        for name in names:
            layer, part = name.split(".", 3)[2], name.split(".", 3)[3]
            want = b"".join(pieces["model.layers.%s.%s.weight" % (layer, p)].tobytes()
                            for p in fused.get(part, (part,)))
            dtype, shape, raw = packed.tensors[name + ".weight"]
            self.assertEqual((dtype, shape[1], raw), ("BF16", 64 if part != "mlp.down_proj" else 128, want), name)
        self.assertEqual(len(packed.tensors), len(names))

        # Served as written: the configuration is complete but for the backend.
        conf["device"] = {"backend": "cpu"}
        with open(cfg, "w") as f:
            json.dump(conf, f)
        _, c = own_daemon(self, env("PROJD_TEST_PROJD"), cfg, d)
        self.addCleanup(c.close)
        self.assertEqual([L.name for L in c.layers], names)
        rng = random.Random(9)
        for name in names:
            L = c.layer(name)
            (n, k), terms = packed.terms(name + ".weight", L.format)
            self.assertEqual((L.n, L.k), (n, k))
            rows = random_x(rng, 3, k)
            with c.shm_buffer(3 * k * 2) as xb, c.shm_buffer(3 * n * 2) as yb:
                for i, row in enumerate(rows):
                    xb.write(row.tobytes(), i * k * 2)
                yb.fill(0xFF)
                r = c.project([Op(layer=name, m=3, n=n, x_buf=xb, x_off=0, x_ld=k, y_buf=yb, y_off=0, y_ld=n)])
                got = array.array("H", yb.read())
            self.assertTrue(r.ok, name)
            want = reference(terms, [projd.bf16_to_floats(row.tobytes()) for row in rows], n)
            self.assertEqual(got, want, name)

    def test_refusals_say_what(self):
        import shutil

        import projd_pack

        d = tempfile.mkdtemp(prefix="projd-pack-")
        self.addCleanup(shutil.rmtree, d, True)
        words = array.array("H", [0x3F80] * (64 * 64))
        out = os.path.join(d, "out.safetensors")

        def pack(tensors, *extra):
            """A checkpoint of tensors ((name, shape) each) packed: (rc, stderr, stdout)."""
            write_safetensors(os.path.join(d, "a.safetensors"), [(n, shape, words) for n, shape in tensors])
            return io_capture(lambda: projd_pack.main([d, out, "--quiet"] + list(extra)))

        # k_proj without v_proj: refused, naming what is missing
        rc, err, _ = pack([("model.layers.0.self_attn.q_proj.weight", (64, 64)),
                           ("model.layers.0.self_attn.k_proj.weight", (64, 64))])
        self.assertEqual(rc, 1)
        self.assertIn("model.layers.0: has self_attn.q_proj, self_attn.k_proj but not self_attn.v_proj", err)
        self.assertFalse(os.path.exists(out))
        # pieces of different K
        rc, err, _ = pack([("model.layers.0.mlp.gate_proj.weight", (64, 64)),
                           ("model.layers.0.mlp.up_proj.weight", (32, 128))])
        self.assertEqual(rc, 1)
        self.assertIn("rows of one layer need one dtype and K", err)
        # nothing to pack
        rc, err, _ = pack([("lm_head.weight", (64, 64))])
        self.assertIn("no decoder-layer projections", err)
        # --only: just the attention of layer 0, to standard output
        rc, _, text = pack([("model.layers.0.self_attn.o_proj.weight", (64, 64)),
                            ("model.layers.0.mlp.down_proj.weight", (64, 64))], "--only", r"self_attn")
        self.assertEqual(rc, 0)
        self.assertEqual([L["name"] for L in json.loads(text)["model"]["layers"]], ["model.layers.0.self_attn.o_proj"])


def io_capture(fn):
    """fn()'s result, and what it wrote to standard error and output."""
    import contextlib
    import io

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = fn()
    return rc, err.getvalue(), out.getvalue()


class SglangAdapterTests(DaemonTest):
    """Only what runs without torch and a GPU: the adapter itself is untested here."""

    def test_imports_without_torch_and_refuses_the_cpu_backend(self):
        had_torch = "torch" in sys.modules
        import projd_sglang

        self.assertEqual("torch" in sys.modules, had_torch)  # torch is imported on first use only
        with self.assertRaisesRegex(ValueError, "runs the cpu backend; CUDA tensors need the cuda backend"):
            projd_sglang.ProjdLinearMethod("o", self.c)
        with self.assertRaisesRegex(KeyError, "unknown layer 'nope'"):
            projd_sglang.ProjdLinearMethod("nope", self.c)
        with self.assertRaises(TypeError):
            projd_sglang.ProjdLinearMethod("o", self.url)
        projd_sglang.release_registrations(self.c)  # none cached: a no-op

    def test_device_check(self):
        # The daemon's GPU against the worker's current one, by UUID, with a
        # stand-in for torch: another GPU refused when the layer is built;
        # the same one, or a torch that does not say, passes.
        import types
        import projd_sglang

        def fake_torch(uuid_obj):
            props = types.SimpleNamespace(uuid=uuid_obj) if uuid_obj is not None else types.SimpleNamespace()
            cuda = types.SimpleNamespace(is_available=lambda: True, current_device=lambda: 3,
                                         get_device_properties=lambda i: props)
            return types.SimpleNamespace(cuda=cuda)

        mine = bytes(range(16))
        client = types.SimpleNamespace(info=types.SimpleNamespace(device_uuid=mine), url="ipc:///x.sock")
        projd_sglang._check_device(client, fake_torch(types.SimpleNamespace(bytes=mine)))
        projd_sglang._check_device(client, fake_torch("GPU-" + mine.hex()))  # str() form
        projd_sglang._check_device(client, fake_torch(None))  # torch does not say: no check
        with self.assertRaisesRegex(ValueError, "serves another GPU than this worker's cuda:3"):
            projd_sglang._check_device(client, fake_torch(types.SimpleNamespace(bytes=bytes(16 * [7]))))
        cpu = types.SimpleNamespace(info=types.SimpleNamespace(device_uuid=bytes(16)), url="u")
        projd_sglang._check_device(cpu, fake_torch(types.SimpleNamespace(bytes=mine)))  # zeros: no GPU said

class SglangRegistrationCacheTests(unittest.TestCase):
    """The adapter's cache of CUDA IPC registrations, with the driver and
    the daemon replaced by fakes that record what was asked of them: a
    known allocation costs one cuda_allocation and nothing else, a new one
    at a freed allocation's address unregisters the freed one, the least
    recently used goes first when the limit is reached."""

    class FakeClient:
        def __init__(self, max_buffers):
            self.info = type("I", (), {"limits": type("L", (), {"max_buffers": max_buffers})()})()
            self.closed = False
            self.next, self.live, self.log = 1, {}, []

        def register_cuda_ipc(self, handle, uuid, size):
            self.live[self.next] = handle
            self.log.append(("register", handle))
            self.next += 1
            return self.next - 1

        def unregister(self, buf):
            if buf not in self.live:  # as the daemon answers it
                raise ProjdError(Status.E_BUFFER, "E_BUFFER",
                                 "buffer %d is not registered on this connection" % buf)
            self.log.append(("unregister", self.live.pop(buf)))

    def setUp(self):
        import projd_sglang

        self.mod = projd_sglang
        self.allocs = {}  # base -> (id, size): the fake driver's live allocations
        self.calls = []
        saved = (projd.cuda_allocation, projd.cuda_describe)
        self.addCleanup(lambda: (setattr(projd, "cuda_allocation", saved[0]),
                                 setattr(projd, "cuda_describe", saved[1])))

        def find(ptr):
            for base, (aid, size) in self.allocs.items():
                if base <= ptr < base + size:
                    return base, aid, size
            return 0, 0, 0

        def allocation(ptr):
            self.calls.append("allocation")
            base, aid, _ = find(ptr)
            return aid, base

        def describe(ptr):
            self.calls.append("describe")
            base, aid, size = find(ptr)
            if not base:
                raise ProjdError(-22, "E_INVAL", "%#x is not CUDA memory" % ptr)
            return projd.CudaRegion(base, size, ptr - base, 0, b"h%d" % aid, bytes(16))

        projd.cuda_allocation, projd.cuda_describe = allocation, describe

    def test_hits_stale_addresses_and_eviction(self):
        c = self.FakeClient(max_buffers=11)  # the cache keeps 11 - 8 = 3
        reg = self.mod._Registrations(c)
        self.assertEqual(reg.limit, 3)
        self.allocs[0x1000] = (1, 0x1000)
        self.assertEqual(reg.lookup(0x1010), (1, 0x10))
        self.calls.clear()
        for _ in range(5):  # known: one driver call each, nothing sent
            self.assertEqual(reg.lookup(0x1800), (1, 0x800))
        self.assertEqual(self.calls, ["allocation"] * 5)
        self.assertEqual(c.log, [("register", b"h1")])
        # freed, and the address handed to a new allocation: the old
        # registration goes at once, the new one is made
        del self.allocs[0x1000]
        self.allocs[0x1000] = (2, 0x2000)
        self.assertEqual(reg.lookup(0x1004), (2, 4))
        self.assertEqual(c.log[1:], [("unregister", b"h1"), ("register", b"h2")])
        self.assertEqual(list(c.live.values()), [b"h2"])
        # three more allocations: the least recently used (h2, unless touched) goes
        for aid, base in ((3, 0x10000), (4, 0x20000)):
            self.allocs[base] = (aid, 0x100)
            reg.lookup(base)
        reg.lookup(0x1000)  # h2 used again: h3 is now the oldest
        self.allocs[0x30000] = (5, 0x100)
        reg.lookup(0x30000)
        self.assertEqual(sorted(c.live.values()), [b"h2", b"h4", b"h5"])
        self.assertEqual(c.log[-2:], [("unregister", b"h3"), ("register", b"h5")])
        # unknown memory: refused by describe, nothing registered or dropped
        with self.assertRaisesRegex(ProjdError, "not CUDA memory"):
            reg.lookup(0x99999999)
        self.assertEqual(len(c.live), 3)
        reg.clear()
        self.assertEqual(c.live, {})


    def test_freed_allocations_are_dropped_at_the_next_registration(self):
        # PyTorch frees cached segments on its own (empty_cache, an
        # out-of-memory retry); the address may stay unused or go to an
        # allocation at another base. The next registration drops every
        # cached allocation whose base no longer holds it.
        c = self.FakeClient(max_buffers=64)
        reg = self.mod._Registrations(c)
        self.allocs[0x1000] = (1, 0x1000)
        self.allocs[0x8000] = (2, 0x1000)
        reg.lookup(0x1000)
        reg.lookup(0x8000)
        del self.allocs[0x1000]  # freed, its address unused
        self.allocs[0x20000] = (3, 0x4000)  # a new one elsewhere
        reg.lookup(0x20010)
        self.assertEqual(c.log[2:], [("unregister", b"h1"), ("register", b"h3")])
        self.assertEqual(sorted(c.live.values()), [b"h2", b"h3"])
        # a freed one whose range went to a larger allocation at a lower base
        del self.allocs[0x8000]
        self.allocs[0x6000] = (4, 0x4000)
        reg.lookup(0x8000)
        self.assertEqual(c.log[4:], [("unregister", b"h2"), ("register", b"h4")])
        self.assertEqual(sorted(c.live.values()), [b"h3", b"h4"])


    @staticmethod
    def time_out_next_unregister(c, done=False):
        """c's next UNREGISTER raises ETIMEDOUT, the daemon keeping the
        buffer or (done) having let it go, the reply late; the ones after
        it work again."""
        real = c.unregister

        def timeout(buf):
            c.unregister = real
            if done:
                c.live.pop(buf)
            raise ProjdError(-errno.ETIMEDOUT, "ETIMEDOUT", "UNREGISTER timed out")

        c.unregister = timeout

    def two_cached_of_three(self):
        """A cache of limit 2 holding allocations 1 and 2 (h1 the least
        recently used); allocation 3 at 0x3000 is known to the driver."""
        c = self.FakeClient(max_buffers=10)  # the cache keeps 10 - 8 = 2
        reg = self.mod._Registrations(c)
        for aid in (1, 2, 3):
            self.allocs[0x1000 * aid] = (aid, 0x100)
        reg.lookup(0x1000)
        reg.lookup(0x2000)
        return c, reg

    def test_failed_unregister_stays_cached(self):
        # An UNREGISTER that fails (a timeout) leaves the entry, tried again
        # at the next eviction, instead of a daemon buffer nothing names.
        c, reg = self.two_cached_of_three()
        self.time_out_next_unregister(c)
        with self.assertRaises(ProjdError):
            reg.lookup(0x3000)  # evicts h1: its UNREGISTER times out
        self.assertEqual(list(reg.ids), [1, 2])
        self.assertEqual(reg.lookup(0x3000), (3, 0))
        self.assertEqual(sorted(c.live.values()), [b"h2", b"h3"])
        self.assertEqual(list(reg.ids), [2, 3])

    def test_failed_unregister_in_clear_stays_cached(self):
        # clear() too: an UNREGISTER that times out keeps its entry (the
        # daemon still maps the allocation), and a later clear() ends it.
        c = self.FakeClient(max_buffers=64)
        reg = self.mod._Registrations(c)
        for aid in (1, 2):
            self.allocs[0x1000 * aid] = (aid, 0x100)
            reg.lookup(0x1000 * aid)
        self.time_out_next_unregister(c)
        with self.assertRaises(ProjdError):
            reg.clear()
        self.assertEqual(list(reg.ids), [1, 2])
        self.assertEqual(len(c.live), 2)
        reg.clear()
        self.assertEqual((dict(reg.ids), c.live), ({}, {}))

    def test_timed_out_unregister_the_daemon_did_is_dropped_on_retry(self):
        # The common timeout: the daemon did the UNREGISTER, its reply came
        # late. The retry meets E_BUFFER, which releases the entry instead
        # of raising on every later clear() or eviction, with every entry
        # behind it stuck.
        for how in ("clear", "evict"):
            c, reg = self.two_cached_of_three()
            self.time_out_next_unregister(c, done=True)
            with self.assertRaises(ProjdError):
                reg.clear() if how == "clear" else reg.lookup(0x3000)
            self.assertEqual(list(reg.ids), [1, 2], how)
            self.assertEqual(sorted(c.live.values()), [b"h2"], how)
            if how == "clear":
                reg.clear()
                self.assertEqual((list(reg.ids), c.live), ([], {}))
            else:
                self.assertEqual(reg.lookup(0x3000), (3, 0))
                self.assertEqual(list(reg.ids), [2, 3])
                self.assertEqual(sorted(c.live.values()), [b"h2", b"h3"])

    def test_apply_refused_before_sending_keeps_nothing(self):
        # A tensor CUDA cannot share (PyTorch's expandable segments): the
        # lookup refuses it before any request is sent, so apply() keeps
        # none of its tensors for the daemon (a caller that falls back on
        # every call would otherwise pile up one x and one y per call).
        import contextlib
        import types

        class Tensor:
            dtype, is_cuda, device = "bf16", True, "cuda:0"

            def __init__(self, rows, cols):
                self.shape = (rows, cols)

            def reshape(self, *shape):
                return self

            def stride(self, dim):
                return 1 if dim in (-1, 1) else self.shape[1]

            def contiguous(self):
                return self

            def get_device(self):
                return 0

            def data_ptr(self):
                return 0x5000  # no allocation of the fake driver: describe refuses

        torch = types.SimpleNamespace(
            bfloat16="bf16",
            empty=lambda m, n, dtype, device: Tensor(m, n),
            cuda=types.SimpleNamespace(
                is_current_stream_capturing=lambda: False,
                device=lambda d: contextlib.nullcontext(),
            ),
        )
        saved = sys.modules.get("torch")
        sys.modules["torch"] = torch
        self.addCleanup(lambda: sys.modules.__setitem__("torch", saved) if saved is not None
                        else sys.modules.pop("torch", None))
        c = self.FakeClient(max_buffers=64)
        L = types.SimpleNamespace(k=8, name="o", index=0)
        meth = object.__new__(self.mod.ProjdLinearMethod)
        meth._conn = (c, L)
        layer = types.SimpleNamespace(projd_n=4)
        for _ in range(3):
            with self.assertRaisesRegex(ProjdError, "not CUDA memory"):
                meth.apply(layer, Tensor(2, 8))
        reg = self.mod._registry(c)
        self.assertEqual(reg.orphans, {})
        self.assertEqual(c.log, [])

    def test_allocations_without_a_driver_id(self):
        # A driver that gives no allocation id: the registration is keyed by
        # the IPC handle, found again by it (one REGISTER, not one per
        # apply), and dropped when another allocation comes at its base.
        c = self.FakeClient(max_buffers=64)
        reg = self.mod._Registrations(c)
        handles = {0x1000: b"first"}
        described = []

        def allocation(ptr):
            return 0, 0

        def describe(ptr):
            described.append(ptr)
            base = 0x1000
            return projd.CudaRegion(base, 0x1000, ptr - base, 0, handles[base], bytes(16))

        projd.cuda_allocation, projd.cuda_describe = allocation, describe
        for i in range(5):
            self.assertEqual(reg.lookup(0x1000 + 16 * i), (1, 16 * i))
        self.assertEqual(c.log, [("register", b"first")])
        # one describe per lookup, the registering one's too (the region
        # found for the key is the one registered)
        self.assertEqual(len(described), 5)
        handles[0x1000] = b"second"  # freed, and a new allocation there
        self.assertEqual(reg.lookup(0x1004), (2, 4))
        self.assertEqual(c.log[1:], [("unregister", b"first"), ("register", b"second")])
        self.assertEqual(list(c.live.values()), [b"second"])
        self.assertEqual(len(described), 6)


class SglangPackingTests(unittest.TestCase):
    """How apply() cuts m rows into ops and requests (no torch, no daemon):
    at most max_m rows per op and max_ops_per_request ops per request, each
    op's x and y offsets at its first row."""

    def test_rows_ops_and_requests(self):
        import projd_sglang

        limits = type("L", (), {"max_m": 4, "max_ops_per_request": 2, "max_buffers": 64})()
        client = type("C", (), {"info": type("I", (), {"limits": limits})(), "closed": False})()
        meth = object.__new__(projd_sglang.ProjdLinearMethod)
        meth.client, meth.L = client, type("Lay", (), {"index": 3})()
        reg = projd_sglang._Registrations(client)
        xb, xo, ld, yb, yo, n = 7, 100, 10, 9, 6, 5
        for m, want in (
            (1, [[(0, 1)]]),
            (4, [[(0, 4)]]),
            (11, [[(0, 4), (4, 4)], [(8, 3)]]),
            (16, [[(0, 4), (4, 4)], [(8, 4), (12, 4)]]),
        ):
            got = []
            for ops, count in meth._requests(reg, client, meth.L, (xb, xo, ld, yb, yo, n), m):
                req = []
                for i in range(count):
                    o = ops._arr[i]
                    row = (o.x_off - xo) // (ld * 2)
                    self.assertEqual((o.layer, o.n, o.x_buf, o.x_ld, o.y_buf, o.y_ld, o.op_flags),
                                     (3, n, xb, ld, yb, n, 0))
                    self.assertEqual((o.x_off, o.y_off), (xo + row * ld * 2, yo + row * n * 2))
                    req.append((row, o.m))
                got.append(req)
            self.assertEqual(got, want, "m %d" % m)


class SglangApplyTests(unittest.TestCase):
    """ProjdLinearMethod.apply() with stand-ins for torch (2-D tensors over
    fake CUDA allocations, a stream that logs), the driver and the daemon
    (a client that records registrations and requests): what
    release_registrations() does to an apply() it races, and the refusal
    of an apply() under CUDA graph capture."""

    class Tensor:
        def __init__(self, ptr, m, k):
            self.ptr, self.shape = ptr, (m, k)
            self.dtype, self.is_cuda, self.device = "bf16", True, "cuda:0"

        def stride(self, d=None):
            st = (self.shape[1], 1)
            return st if d is None else st[d]

        def data_ptr(self):
            return self.ptr

        def get_device(self):
            return 0

        def reshape(self, *shape):
            assert shape[-1] == self.shape[1] and len(shape) == 2, shape
            return self

    class Event:
        def __init__(self, interprocess=False):
            self.name = "ev%x" % id(self)
            self.done = True  # what query() says: the last record has run

        def query(self):
            return self.done

        def record(self, stream):
            stream.log.append(("record", self.name))

        def ipc_handle(self):
            return self.name.encode().ljust(64, b"\0")

    class Stream:
        def __init__(self):
            self.log = []

        def wait_event(self, ev):
            self.log.append(("wait", ev.name))

        def synchronize(self):
            self.log.append(("sync",))

    class Client:
        """What apply() uses of a projd.Client."""

        def __init__(self):
            limits = type("L", (), {"max_m": 256, "max_ops_per_request": 64, "max_buffers": 64})()
            self.info = type("I", (), {"limits": limits, "backend": "cuda"})()
            self.closed = False
            self.next, self.live, self.requests = 1, {}, []
            self.on_project = None  # called during a request, before it is answered

        # REGISTERs refused with E_LIMIT from now on (the daemon still
        # counting buffers unregistered while launched work reads them).
        refuse = 0

        # Set: the connection is lost at the next refusal's end (projd
        # restarted while apply() waited for the held buffers).
        lose_after_refusal = False

        def register_cuda_ipc(self, handle, uuid, size):
            self._check_lost()
            if self.refuse > 0:
                self.refuse -= 1
                if self.lose_after_refusal:
                    self.lost = True
                raise projd.ProjdError(projd.Status.E_LIMIT, "E_LIMIT", "REGISTER: connection already holds buffers")
            self.live[self.next] = handle
            self.next += 1
            return self.next - 1

        def unregister(self, buf):
            self._check_lost()
            del self.live[buf]

        def project_packed(self, ops, count, flags=0, wait_event=None, signal_event=None):
            self._check_lost()
            for i in range(count):
                o = ops._arr[i]
                assert o.x_buf in self.live and o.y_buf in self.live, "an unregistered buffer was used"
            self.requests.append(count)
            if self.on_project:
                self.on_project()

        # What a reconnect uses.
        lost = False
        url = "ipc:///run/projd/projd.sock"

        # Set: the daemon is stopping (SIGTERM, a restart): it answers E_SHUTDOWN.
        stopping = False

        def _check_lost(self):
            if self.lost:
                raise projd.ProjdError(-errno.ECONNRESET, "ECONNRESET", "the connection to projd was lost")
            if self.stopping:
                raise projd.ProjdError(projd.Status.E_SHUTDOWN, "E_SHUTDOWN", "projd is shutting down")

        def layer(self, name):
            return type("Lay", (), {"index": 0, "k": 192, "n": 256, "name": name})()

        def ping(self):
            self._check_lost()
            return 0.0

        def close(self):
            self.closed = True

    def setUp(self):
        import contextlib
        import projd_sglang

        self.mod = projd_sglang
        self.allocs = {}  # base -> (allocation id, size)
        self.next_base = 0x7F0000000000
        self.capturing = False
        self.stream = self.Stream()
        t = self

        def empty(m, n, dtype=None, device=None):
            return t.alloc(m, n)

        cuda = type("cuda", (), {})()
        cuda.device = lambda d: contextlib.nullcontext()
        cuda.current_stream = lambda d=None: t.stream
        cuda.Event = self.Event
        cuda.is_current_stream_capturing = lambda: t.capturing
        nn = type("nn", (), {"Parameter": staticmethod(lambda t, requires_grad=True: t)})()
        self.torch = type("torch", (), {"bfloat16": "bf16", "empty": staticmethod(empty), "cuda": cuda, "nn": nn})()

        def find(ptr):
            for base, (aid, size) in self.allocs.items():
                if base <= ptr < base + size:
                    return base, aid, size
            return 0, 0, 0

        def allocation(ptr):
            base, aid, _ = find(ptr)
            return aid, base

        def describe(ptr):
            base, aid, size = find(ptr)
            return projd.CudaRegion(base, size, ptr - base, 0, b"h%d" % aid, bytes(16))

        saved = (projd.cuda_allocation, projd.cuda_describe, projd_sglang._torch, projd_sglang._registry)
        self.addCleanup(
            lambda: (
                setattr(projd, "cuda_allocation", saved[0]),
                setattr(projd, "cuda_describe", saved[1]),
                setattr(projd_sglang, "_torch", saved[2]),
                setattr(projd_sglang, "_registry", saved[3]),
            )
        )
        projd.cuda_allocation, projd.cuda_describe = allocation, describe
        projd_sglang._torch = lambda: t.torch
        self.client = self.Client()
        self.meth = object.__new__(projd_sglang.ProjdLinearMethod)
        self.meth.client = self.client
        self.meth.L = type("Lay", (), {"index": 0, "k": 192, "n": 256, "name": "o"})()
        self.layer = type("Layer", (), {"projd_n": 256})()

    def alloc(self, m, k):
        base = self.next_base
        size = max(2 * m * k, 512)
        self.next_base += (size + 0xFFFFF) & ~0xFFFFF
        self.allocs[base] = (len(self.allocs) + 1, size)
        return self.Tensor(base, m, k)

    def use_connect(self, connect, url="ipc:///x", timeout_ms=1000):
        """For this test, reconnects call connect(url, timeout_ms, ring),
        and self.meth connects with url and timeout_ms."""
        saved = self.mod._connect
        self.addCleanup(setattr, self.mod, "_connect", saved)
        self.mod._connect = connect
        self.meth._settings = (url, timeout_ms, False)

    def use_new_clients(self, url="ipc:///x", timeout_ms=1000):
        """use_connect with a connect that makes a new Client each time; the
        list of those made, in order."""
        made = []

        def connect(url, timeout_ms, ring):
            made.append(self.Client())
            return made[-1]

        self.use_connect(connect, url, timeout_ms)
        return made

    def test_create_weights_makes_apply_opaque_to_torch_compile(self):
        # Traced by Dynamo, apply() put y's allocation into a compiled part
        # (a CUDA graph's pool under mode="reduce-overhead"); create_weights
        # wraps the method's apply in torch.compiler.disable, once.
        wrapped = []

        def disable(fn):
            def opaque(*a, **kw):
                wrapped.append(fn)
                return fn(*a, **kw)

            opaque._torchdynamo_disable = True
            return opaque

        self.torch.compiler = type("compiler", (), {"disable": staticmethod(disable)})()
        layer = type("Layer", (), {"register_parameter": lambda self, name, p: setattr(self, name, p)})()
        for _ in range(2):
            self.meth.create_weights(layer, 192, [256], 192, 256, "bf16")
        self.assertTrue(getattr(self.meth.apply, "_torchdynamo_disable", False))
        y = self.meth.apply(layer, self.alloc(4, 192))
        self.assertEqual(y.shape, (4, 256))
        self.assertEqual(len(wrapped), 1, "apply() not called through the wrapper, or wrapped twice")
        # A torch without torch.compiler.disable: apply() stays as it is.
        other = object.__new__(self.mod.ProjdLinearMethod)
        other.client, other.L = self.client, self.meth.L
        del self.torch.compiler
        other.create_weights(layer, 192, [256], 192, 256, "bf16")
        self.assertNotIn("apply", other.__dict__)
        # SGLang's LinearBase wraps apply on the instance before
        # create_weights when its kernel API logging is on
        # (SGLANG_KERNEL_API_LOGLEVEL): that wrapper is made opaque too.
        self.torch.compiler = type("compiler", (), {"disable": staticmethod(disable)})()
        logged = object.__new__(self.mod.ProjdLinearMethod)
        logged.client, logged.L = self.client, self.meth.L
        calls = []
        inner = logged.apply

        def logging_wrapper(*a, **kw):
            calls.append(1)
            return inner(*a, **kw)

        logged.apply = logging_wrapper
        logged.create_weights(layer, 192, [256], 192, 256, "bf16")
        self.assertTrue(getattr(logged.apply, "_torchdynamo_disable", False), "an instance's wrapped apply stays traceable")
        del wrapped[:]
        logged.apply(layer, self.alloc(4, 192))
        self.assertEqual((len(wrapped), len(calls)), (1, 1), "apply() not called through both wrappers")

    def fail_next_project(self, code, name, then=None):
        """The next request fails here with code (once sent, as a timeout
        does); then() runs first."""
        def fail():
            self.client.on_project = None
            if then:
                then()
            raise projd.ProjdError(code, name, "%s in the test" % name)

        self.client.on_project = fail

    def test_failed_request_keeps_its_tensors_until_a_later_one(self):
        # A request that timed out here may still run in the daemon (it has
        # no cancel): x, its copy and y stay referenced, not handed back to
        # torch's allocator for another tensor the daemon would then write,
        # until a later request on the connection is waited for (requests
        # of a connection run in order).
        x = self.alloc(4, 192)
        self.fail_next_project(-errno.ETIMEDOUT, "ETIMEDOUT")
        with self.assertRaises(projd.ProjdError) as cm:
            self.meth.apply(self.layer, x)
        self.assertEqual(cm.exception.code, -errno.ETIMEDOUT)
        reg = self.mod._registry(self.client)
        kept = reg.orphans[0]
        self.assertEqual(len(kept), 1)
        self.assertIs(kept[0][0], x)
        self.assertEqual(kept[0][2].shape, (4, 256))
        # A refusal (a status) ran nothing: nothing more kept.
        self.fail_next_project(projd.Status.E_LAYER, "E_LAYER")
        with self.assertRaises(projd.ProjdError):
            self.meth.apply(self.layer, x)
        self.assertEqual(len(reg.orphans[0]), 1)
        self.stream.log.clear()
        y = self.meth.apply(self.layer, x)
        self.assertEqual(y.shape, (4, 256))
        self.assertEqual(self.stream.log[-1], ("wait", reg.events[0].y_done.name))
        self.assertNotIn(0, reg.orphans, "kept past a request that was waited for")

    def test_dropped_ring_retried_on_the_same_connection(self):
        # ECONNRESET from a daemon that still answers (it dropped the ring):
        # no reconnect; the request goes again on the same connection.
        connects = []
        self.use_connect(lambda *a: connects.append(a))
        self.fail_next_project(-errno.ECONNRESET, "ECONNRESET")
        y = self.meth.apply(self.layer, self.alloc(4, 192))
        self.assertEqual(y.shape, (4, 256))
        self.assertEqual(connects, [])
        self.assertIs(self.meth.client, self.client)
        self.assertEqual(self.client.requests, [1, 1])  # the dropped one, then again

    def test_connection_closed_by_another_threads_move(self):
        # Another thread found the connection lost, moved this method to a
        # successor and closed it between this apply()'s read of the
        # connection and its request: the ValueError of the closed client
        # sends the request to the successor.
        new = self.Client()

        def moved():
            self.meth._conn = (new, self.meth.L)
            self.client.closed = True

        def closed():
            self.client.on_project = None
            moved()
            raise ValueError("projd client is closed")

        self.client.on_project = closed
        y = self.meth.apply(self.layer, self.alloc(4, 192))
        self.assertEqual(y.shape, (4, 256))
        self.assertEqual(new.requests, [1])
        # A ValueError of a connection still in use is the caller's.
        new.on_project = lambda: (_ for _ in ()).throw(ValueError("something else"))
        with self.assertRaises(ValueError):
            self.meth.apply(self.layer, self.alloc(4, 192))

    def test_release_racing_apply_leaves_nothing_registered(self):
        x = self.alloc(4, 192)
        real = self.mod._registry

        def racing(client):
            # apply() has fetched the registry and is about to take its
            # lock: another thread releases the registrations now.
            r = real(client)
            self.mod.release_registrations(client)
            return r

        self.mod._registry = racing
        self.meth.apply(self.layer, x)
        self.mod._registry = real
        self.assertEqual(len(self.client.live), 2)  # x and y of that apply
        self.mod.release_registrations(self.client)
        self.assertEqual(self.client.live, {}, "registrations of the racing apply() were never released")
        # The next apply registers again, and a release releases that too.
        self.meth.apply(self.layer, x)
        self.assertEqual(len(self.client.live), 2)
        self.mod.release_registrations(self.client)
        self.assertEqual(self.client.live, {})

    def test_release_waits_for_an_apply_in_flight(self):
        x = self.alloc(4, 192)
        released = threading.Event()
        during = []

        def in_request():
            # apply() holds the cache's lock until its request is answered:
            # a release from another thread waits for it.
            th = threading.Thread(target=lambda: (self.mod.release_registrations(self.client), released.set()))
            th.start()
            during.append(released.wait(0.2))
            self.threads.append(th)

        self.threads = []
        self.client.on_project = in_request
        self.meth.apply(self.layer, x)
        for th in self.threads:
            th.join(10)
        self.assertEqual(during, [False])
        self.assertTrue(released.is_set())
        self.assertEqual(self.client.live, {})

    def test_registration_refused_for_held_buffers_waits_for_the_work(self):
        # Evicted registrations that launched work still reads stay counted
        # by the daemon: REGISTER meets E_LIMIT with the cache under its
        # limit. apply() polls the connection's last y_done until it reads
        # done, then registers again until the daemon has let them go.
        import time as _time

        x = self.alloc(4, 192)
        self.meth.apply(self.layer, x)
        reg = self.mod._registry(self.client)
        reg.limit = 2  # the next apply's new x and y evict this one's
        y_done = reg.events[0].y_done
        polls = []

        def query():
            polls.append(len(polls))
            return len(polls) >= 3  # the work ends at the third look

        y_done.query = query
        self.client.refuse = 2  # refused before the wait and once after
        y = self.meth.apply(self.layer, self.alloc(8, 192))
        self.assertEqual(y.shape, (8, 256))
        self.assertEqual(len(polls), 3)
        self.assertEqual((self.client.refuse, self.client.requests), (0, [1, 1]))
        # An E_LIMIT no wait mends (a byte limit): after an eviction, the
        # work reads done and REGISTER is tried for HELD_RELEASE_S; with
        # nothing unregistered since, it is raised at once, nothing polled.
        self.client.refuse = 10**9
        t0 = _time.monotonic()
        with self.assertRaises(ProjdError) as cm:
            self.meth.apply(self.layer, self.alloc(2, 192))
        self.assertEqual(cm.exception.status, projd.Status.E_LIMIT)
        self.assertLess(_time.monotonic() - t0, self.mod.HELD_RELEASE_S + 0.5)
        self.assertEqual(len(polls), 4)
        reg.limit = 64
        t0 = _time.monotonic()
        with self.assertRaises(ProjdError) as cm:
            self.meth.apply(self.layer, self.alloc(2, 192))
        self.assertEqual(cm.exception.status, projd.Status.E_LIMIT)
        self.assertLess(_time.monotonic() - t0, 0.1)
        self.assertEqual(len(polls), 4)
        # Evicted while the work never ends (another client's wait ahead of
        # it on the daemon's lane): E_LIMIT after HELD_WAIT_S, not a hang.
        self.addCleanup(setattr, self.mod, "HELD_WAIT_S", self.mod.HELD_WAIT_S)
        self.mod.HELD_WAIT_S = 0.05
        self.client.refuse = 0
        self.meth.apply(self.layer, self.alloc(2, 192))  # x and y registered
        reg.limit = len(reg.ids)  # at least those two: the next registration evicts one
        y_done.query = lambda: polls.append("busy") and False
        self.client.refuse = 10**9
        t0 = _time.monotonic()
        with self.assertRaises(ProjdError) as cm:
            self.meth.apply(self.layer, self.alloc(2, 192))
        self.assertEqual(cm.exception.status, projd.Status.E_LIMIT)
        self.assertLess(_time.monotonic() - t0, 1.0)
        self.assertIn("busy", polls)
        self.assertEqual(self.client.requests, [1, 1, 1])
        # and the connection serves again once there is room
        self.client.refuse = 0
        y_done.query = lambda: True
        self.meth.apply(self.layer, self.alloc(2, 192))
        self.assertEqual(self.client.requests, [1, 1, 1, 1])

    def test_reconnects_once_projd_is_back(self):
        # projd restarted: the first client's calls all fail with
        # -ECONNRESET. apply() connects again (once for every method that
        # shared the lost client), registers anew and runs the request there.
        made = []

        def connect(url, timeout_ms, ring):
            c = self.Client()
            made.append((c, url, timeout_ms, ring))
            return c

        self.use_connect(connect, "ipc:///run/projd/projd.sock", 1234)
        other = object.__new__(self.mod.ProjdLinearMethod)
        other.client, other.L, other._settings = self.client, self.meth.L, self.meth._settings
        x = self.alloc(4, 192)
        self.meth.apply(self.layer, x)
        self.assertEqual(self.client.requests, [1])
        self.client.lost = True
        y = self.meth.apply(self.layer, x)
        self.assertEqual(y.shape, (4, 256))
        self.assertEqual(len(made), 1)
        new, url, timeout_ms, ring = made[0]
        self.assertEqual((url, timeout_ms, ring), ("ipc:///run/projd/projd.sock", 1234, False))
        self.assertIs(self.meth.client, new)
        self.assertEqual((new.requests, len(new.live)), ([1], 2))
        self.assertEqual(self.meth.L.name, "o")
        # The other method finds the same new connection, not a third one.
        other.apply(self.layer, x)
        self.assertIs(other.client, new)
        self.assertEqual((len(made), new.requests), (1, [1, 1]))
        # Releasing by the lost client releases what its successor holds,
        # and the lost client's own registrations raise nothing.
        self.mod.release_registrations(self.client)
        self.assertEqual(new.live, {})

    def test_tensors_kept_for_the_lost_connection_go_at_the_reconnect(self):
        # A request that timed out keeps its tensors on its connection's
        # registry; once that connection is lost and its work read done,
        # the reconnect lets them go (the caller's own client keeps its
        # registry, never used again).
        made = self.use_new_clients()
        x = self.alloc(4, 192)
        self.fail_next_project(-errno.ETIMEDOUT, "ETIMEDOUT")
        with self.assertRaises(projd.ProjdError):
            self.meth.apply(self.layer, x)
        reg = self.mod._registry(self.client)
        self.assertEqual(len(reg.orphans[0]), 1)
        self.client.lost = True
        self.assertEqual(self.meth.apply(self.layer, x).shape, (4, 256))
        self.assertIs(self.meth.client, made[0])
        self.assertNotIn(0, reg.orphans, "kept on the lost connection's registry after the reconnect")

    def test_connection_lost_at_registration(self):
        # projd restarted between two apply() calls, found by the REGISTER
        # of a new allocation: connected again, registered and run there.
        made = self.use_new_clients("ipc:///run/projd/projd.sock", 1234)
        self.meth.apply(self.layer, self.alloc(4, 192))
        self.client.lost = True
        y = self.meth.apply(self.layer, self.alloc(4, 192))
        self.assertEqual(y.shape, (4, 256))
        self.assertEqual(len(made), 1)
        self.assertIs(self.meth.client, made[0])
        self.assertEqual((made[0].requests, len(made[0].live)), ([1], 2))
        # Lost while apply() waited for held buffers (E_LIMIT after an
        # eviction, then the connection gone): the wait ends at once with
        # the lost connection, whose work read done, and apply() moves to
        # the next one instead of raising the E_LIMIT or waiting it out.
        new = made[0]
        reg = self.mod._registry(new)
        reg.limit = 2  # the next apply's new x and y evict the last ones
        reg.events[0].y_done.query = lambda: True
        new.refuse, new.lose_after_refusal = 1, True
        t0 = time.monotonic()
        y = self.meth.apply(self.layer, self.alloc(8, 192))
        self.assertLess(time.monotonic() - t0, self.mod.HELD_WAIT_S / 2)
        self.assertEqual(y.shape, (8, 256))
        self.assertEqual(len(made), 2)
        self.assertIs(self.meth.client, made[1])
        self.assertEqual((new.requests, made[1].requests), ([1], [1]))

    def two_methods(self):
        """Reconnects made by fake clients (listed in the first return
        value, in order) and a second method sharing self.meth's client."""
        made = self.use_new_clients()
        other = object.__new__(self.mod.ProjdLinearMethod)
        other.client, other.L, other._settings = self.client, self.meth.L, self.meth._settings
        return made, other

    def test_a_lost_successor_is_closed_when_its_last_method_leaves(self):
        # Two restarts: the connection made at the first is closed at the
        # second, once both methods have moved off it; the caller's client
        # is never closed here, and releasing by it reaches the newest.
        made, other = self.two_methods()
        x = self.alloc(4, 192)
        self.client.lost = True
        self.meth.apply(self.layer, x)
        other.apply(self.layer, x)
        self.assertEqual(len(made), 1)
        first = made[0]
        self.assertIs(other.client, first)
        self.assertFalse(self.client.closed, "the caller's own client was closed")
        self.assertEqual(len(first.live), 3)  # x (one allocation, cached) and each apply's y
        first.lost = True
        self.meth.apply(self.layer, x)
        self.assertEqual(len(made), 2)
        self.assertFalse(first.closed, "closed while another method was still on it")
        other.apply(self.layer, x)
        self.assertEqual(len(made), 2)
        self.assertTrue(first.closed, "the abandoned successor was never closed")
        self.assertFalse(made[1].closed or self.client.closed)
        self.assertIsNone(getattr(first, "_projd_sglang_registrations", None))
        self.assertEqual(len(made[1].live), 3)
        self.mod.release_registrations(self.client)
        self.assertEqual(made[1].live, {})

    def test_a_method_that_missed_a_restart_joins_the_newest_connection(self):
        # A runs across two restarts; B runs only after the second. B must
        # land on A's connection (not a third one the chain cannot reach),
        # so that releasing by the first client releases both.
        made, other = self.two_methods()
        x = self.alloc(4, 192)
        self.client.lost = True
        self.meth.apply(self.layer, x)  # C0 -> S1
        made[0].lost = True
        self.meth.apply(self.layer, x)  # S1 -> S2; S1 had only this method
        self.assertEqual(len(made), 2)
        self.assertTrue(made[0].closed)
        other.apply(self.layer, x)  # C0 lost: follows C0 -> S1 (closed) -> S2
        self.assertEqual(len(made), 2, "a third connection was made for the method that missed a restart")
        self.assertIs(other.client, made[1])
        self.assertIs(self.meth.client, made[1])
        self.assertEqual(len(made[1].live), 3)  # x and the two applies' y
        self.mod.release_registrations(self.client)
        self.assertEqual(made[1].live, {})

    def test_a_method_idle_across_two_quick_restarts_follows_on(self):
        # A reconnects after the first restart; the second comes before B
        # runs again, so the successor B joins is lost too. B's apply()
        # moves on to a third connection (which A then joins) instead of
        # raising.
        made, other = self.two_methods()
        x = self.alloc(4, 192)
        self.client.lost = True
        self.meth.apply(self.layer, x)  # C0 -> S1
        made[0].lost = True  # S1 lost before anyone used it again
        y = other.apply(self.layer, x)  # C0 -> S1 (lost) -> S2
        self.assertEqual(y.shape, (4, 256))
        self.assertEqual(len(made), 2)
        self.assertIs(other.client, made[1])
        self.assertEqual(made[1].requests, [1])
        self.meth.apply(self.layer, x)  # S1 lost -> S2, no fourth connection
        self.assertEqual(len(made), 2)
        self.assertIs(self.meth.client, made[1])
        self.assertTrue(made[0].closed)
        # A third restart in a row within one apply(): it raises, once the
        # tries are spent, as a lost connection.
        def connect(url, timeout_ms, ring):
            made.append(self.Client())
            made[-1].lost = True
            return made[-1]

        self.use_connect(connect)
        made[1].lost = True
        with self.assertRaises(ProjdError) as cm:
            self.meth.apply(self.layer, x)
        self.assertEqual(cm.exception.code, -errno.ECONNRESET)
        self.assertEqual(len(made), 2 + self.mod.RECONNECT_TRIES - 1)
        # S3 (no method left on it) is closed; S2 keeps the other method.
        self.assertTrue(made[2].closed, "an abandoned successor was left open")
        self.assertFalse(made[1].closed or made[3].closed)

    def test_a_refused_successor_is_left_again(self):
        # The restarted daemon runs another backend: apply() raises, the
        # method stays on its old client, and the new connection (which no
        # method took) is closed.
        made = []

        def connect(url, timeout_ms, ring):
            c = self.Client()
            c.info = type("I", (), {"limits": c.info.limits, "backend": "cpu"})()
            made.append(c)
            return c

        self.use_connect(connect)
        self.client.lost = True
        with self.assertRaisesRegex(ValueError, "came back with the cpu backend"):
            self.meth.apply(self.layer, self.alloc(4, 192))
        self.assertIs(self.meth.client, self.client)
        self.assertEqual(len(made), 1)
        self.assertTrue(made[0].closed)

    def test_weight_updates_are_judged_by_what_they_carry(self):
        # The daemon serves the weights it loaded; SGLang's weight updates
        # copy into the dropped meta weight. The loader is watched: the
        # same weights again (a rollback) pass, other ones make the layer
        # stale (apply() and post-processing raise) until the daemon's
        # weights are loaded again. The fingerprint is a stand-in here (the
        # tensor's value); tests/python/test_torch_gpu.py checks the real
        # one with torch.
        saved = self.mod._fingerprint
        self.addCleanup(setattr, self.mod, "_fingerprint", saved)
        self.mod._fingerprint = lambda torch, t: ("seen", t)
        loads = []
        layer = type("Layer", (), {"register_parameter": lambda self, name, p: setattr(self, name, p)})()
        self.meth.create_weights(
            layer, 192, [128, 64, 64], 192, 256, "bf16", weight_loader=lambda p, w, *a: loads.append((w, a))
        )
        self.assertIn("restart the daemon on the new file", layer._derived_weight_cache_error)
        wl = layer.weight.weight_loader

        def load(*parts):
            for part, w in zip(("q", "k", "v"), parts):
                wl(layer.weight, w, part)

        load(1, 2, 3)
        self.meth.process_weights_after_loading(layer)  # the first load
        self.assertEqual(loads[:3], [(1, ("q",)), (2, ("k",)), (3, ("v",))])  # SGLang's loader still runs
        x = self.alloc(4, 192)
        self.assertEqual(self.meth.apply(layer, x).shape, (4, 256))
        # The same weights again (a reload of the same file): nothing changes.
        load(1, 2, 3)
        self.meth.process_weights_after_loading(layer)
        self.meth.apply(layer, x)
        # update_weights_from_tensor of k alone (SGLang 0.5.10 runs no
        # post-processing after it): the load itself fails, naming the
        # shard, and so does the next apply(), instead of computing with
        # the old weights.
        n_loads = len(loads)
        with self.assertRaisesRegex(RuntimeError, r"layer 'o' cannot be updated: .*\(shard 'k'\)"):
            wl(layer.weight, 20, "k")
        self.assertEqual(len(loads), n_loads, "SGLang's loader ran for a refused part")
        with self.assertRaisesRegex(RuntimeError, r"layer 'o' is stale: .*\(shard 'k'\)"):
            self.meth.apply(layer, x)
        # update_weights_from_disk: fails at its first other part ...
        with self.assertRaisesRegex(RuntimeError, r"'o' cannot be updated: .*shard 'k', shard 'q'"):
            load(10, 20, 30)
        with self.assertRaisesRegex(RuntimeError, "cannot be reloaded"):
            self.meth.process_weights_after_loading(layer)
        # ... and SGLang's rollback, the old weights loaded again, passes.
        load(1, 2, 3)
        self.meth.process_weights_after_loading(layer)
        self.meth.apply(layer, x)
        self.meth.restore_weights_before_loading(layer)  # nothing to restore
        # A refusal that no rollback follows leaves nothing armed: the next
        # update is refused as well (it once passed silently).
        for _ in range(2):
            with self.assertRaises(RuntimeError):
                load(10, 20, 30)
            with self.assertRaises(RuntimeError):
                self.meth.process_weights_after_loading(layer)
        with self.assertRaises(RuntimeError):
            self.meth.apply(layer, x)
        # Two layers are judged each on its own.
        other = type("Layer", (), {"register_parameter": lambda self, name, p: setattr(self, name, p)})()
        self.meth.create_weights(other, 192, [256], 192, 256, "bf16", weight_loader=lambda p, w, *a: None)
        other.weight.weight_loader(other.weight, 7)
        self.meth.process_weights_after_loading(other)
        other.weight.weight_loader(other.weight, 7)
        self.meth.process_weights_after_loading(other)
        self.meth.apply(other, x)

    def test_a_restart_on_other_weights_is_refused(self):
        # The daemon came back serving other weights for the layer (started
        # on another model file): the worker's other weights are the old
        # model's, so apply() raises instead of mixing the two.
        made = []

        def connect(url, timeout_ms, ring):
            c = self.Client()
            c.weight_digests = lambda: {"o": 0x2222}
            made.append(c)
            return c

        self.use_connect(connect)
        self.meth._digest = 0x1111
        self.client.lost = True
        with self.assertRaisesRegex(ValueError, "serving other weights for layer 'o' .digest 00002222, was 00001111"):
            self.meth.apply(self.layer, self.alloc(4, 192))
        self.assertIs(self.meth.client, self.client)
        self.assertTrue(made[0].closed)
        # The same weights: the apply goes on, on the new connection.
        self.meth._digest = 0x2222
        self.meth.apply(self.layer, self.alloc(4, 192))
        self.assertIsNot(self.meth.client, self.client)

    def test_a_layer_sharded_by_tensor_parallelism_is_refused(self):
        # Each rank's rows of a column-parallel or QKV layer are its own
        # heads, not the first rows of the daemon's whole layer.
        layer = type("Layer", (), {"register_parameter": lambda self, name, p: setattr(self, name, p)})()
        with self.assertRaisesRegex(ValueError, "tensor parallelism 1"):
            self.meth.create_weights(layer, 192, [64, 32, 32], 192, 256, "bf16")  # QKV, tp 2
        with self.assertRaisesRegex(ValueError, "tensor parallelism 1"):
            self.meth.create_weights(layer, 96, [256], 192, 256, "bf16")  # row parallel, tp 2
        self.assertFalse(hasattr(layer, "weight"))
        # tp 1: the whole layer, QKV parts included, as the daemon holds it
        self.meth.create_weights(layer, 192, [128, 64, 64], 192, 256, "bf16", weight_loader="wl")
        self.assertEqual((layer.projd_n, layer.weight.shape), (256, (256, 192)))
        self.assertEqual((layer.weight.input_dim, layer.weight.output_dim, layer.weight.weight_loader), (1, 0, "wl"))

    def test_not_retried_when_the_lost_connection_had_work_unfinished(self):
        # The daemon died with an earlier apply()'s work answered but not
        # run (its y_done never done): running this one again would read
        # memory that work never wrote, so apply() raises instead.
        def connect(url, timeout_ms, ring):
            raise AssertionError("connected again although the lost work was unfinished")

        self.use_connect(connect)
        x = self.alloc(4, 192)
        self.meth.apply(self.layer, x)
        self.mod._registry(self.client).events[0].y_done.done = False
        self.client.lost = True
        with self.assertRaisesRegex(RuntimeError, "still unfinished.*not retried") as cm:
            self.meth.apply(self.layer, x)
        self.assertEqual(cm.exception.__cause__.code, -errno.ECONNRESET)
        self.assertIs(self.meth.client, self.client)

    def test_a_reconnect_waits_for_projd_to_be_back(self):
        # Between the exit and systemd's restart there is no socket file:
        # the reconnect tries again until projd answers, within
        # RECONNECT_WAIT_S; past it, the last refusal is raised.
        tries = []

        def connect(url, timeout_ms, ring):
            tries.append(url)
            if len(tries) < 3:
                raise projd.ProjdError(-errno.ENOENT, "ENOENT", "no socket file")
            return self.Client()

        self.use_connect(connect)
        self.addCleanup(setattr, self.mod, "RECONNECT_WAIT_S", self.mod.RECONNECT_WAIT_S)
        x = self.alloc(4, 192)
        self.client.lost = True
        self.meth.apply(self.layer, x)
        self.assertEqual(len(tries), 3)
        self.assertIsNot(self.meth.client, self.client)
        self.assertEqual(self.meth.client.requests, [1])
        # projd never comes back: refused after the wait, the method stays
        self.meth.client.lost = True
        tries.clear()
        def refused(url, timeout_ms, ring):
            tries.append(url)
            raise projd.ProjdError(-errno.ECONNREFUSED, "ECONNREFUSED", "refused")

        self.mod._connect = refused
        self.mod.RECONNECT_WAIT_S = 0.5
        lost = self.meth.client
        t0 = time.monotonic()
        with self.assertRaises(projd.ProjdError) as cm:
            self.meth.apply(self.layer, x)
        self.assertEqual(cm.exception.code, -errno.ECONNREFUSED)
        self.assertGreaterEqual(time.monotonic() - t0, 0.4)
        self.assertGreaterEqual(len(tries), 2)
        self.assertIs(self.meth.client, lost)

    def test_a_daemon_without_events_is_said_once(self):
        # A daemon that takes no client events (E_FLAGS for the event
        # flags): apply() falls back to synchronizing the stream, and says
        # so once, not silently and not at every call.
        import warnings

        plain = self.client.project_packed

        def project_packed(ops, count, flags=0, wait_event=None, signal_event=None):
            if flags:
                raise projd.ProjdError(projd.Status.E_FLAGS, "E_FLAGS", "no client events here")
            return plain(ops, count)

        self.client.project_packed = project_packed
        x = self.alloc(4, 192)
        with self.assertWarnsRegex(RuntimeWarning, "takes no client events.*synchronizes the stream"):
            self.meth.apply(self.layer, x)
        self.assertEqual(self.client.requests, [1])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.meth.apply(self.layer, x)
        self.assertEqual(self.client.requests, [1, 1])

    def test_reconnects_through_a_stopping_daemon(self):
        # systemctl restart: the daemon drains first, answering E_SHUTDOWN
        # for half a second, new connections included (or closing them
        # before WELCOME without a word, past 16 refusals or before
        # projd said why). apply() waits for the work the daemon accepted
        # (its y_done), then connects again once the new daemon answers,
        # and runs there.
        tries = []

        def connect(url, timeout_ms, ring):
            tries.append(url)
            if len(tries) == 1:
                raise projd.ProjdError(projd.Status.E_SHUTDOWN, "E_SHUTDOWN",
                                       "projd refused this connection: the daemon is shutting down")
            if len(tries) == 2:
                raise projd.ProjdError(-errno.ECONNRESET, "ECONNRESET", "projd closed the connection before WELCOME")
            if len(tries) == 3:
                raise projd.ProjdError(-errno.ENOENT, "ENOENT", "no socket file")
            return self.Client()

        self.use_connect(connect)
        x = self.alloc(4, 192)
        self.meth.apply(self.layer, x)
        y_done = self.mod._registry(self.client).events[0].y_done
        y_done.done = False
        polls = []

        def query():
            polls.append(1)
            return len(polls) >= 3  # the draining daemon finishes it

        y_done.query = query
        self.client.stopping = True
        y = self.meth.apply(self.layer, x)
        self.assertEqual(y.shape, (4, 256))
        self.assertGreaterEqual(len(polls), 3)
        self.assertEqual(len(tries), 4)  # E_SHUTDOWN, ECONNRESET, ENOENT, then in
        self.assertIsNot(self.meth.client, self.client)
        self.assertEqual(self.meth.client.requests, [1])
        # Unregistering on the stopping daemon raises nothing either.
        self.mod.release_registrations(self.client)

    def test_a_stopping_daemons_unfinished_work_is_not_retried(self):
        # The drain's work never finishes within DRAIN_WAIT_S: apply() raises
        # rather than running again over memory that work never wrote.
        def connect(url, timeout_ms, ring):
            raise AssertionError("connected again although the drained work was unfinished")

        self.use_connect(connect)
        self.addCleanup(setattr, self.mod, "DRAIN_WAIT_S", self.mod.DRAIN_WAIT_S)
        self.mod.DRAIN_WAIT_S = 0.2
        x = self.alloc(4, 192)
        self.meth.apply(self.layer, x)
        self.mod._registry(self.client).events[0].y_done.done = False
        self.client.stopping = True
        with self.assertRaisesRegex(RuntimeError, "still unfinished.*not retried") as cm:
            self.meth.apply(self.layer, x)
        self.assertEqual(cm.exception.__cause__.code, projd.Status.E_SHUTDOWN)
        self.assertIs(self.meth.client, self.client)

    def test_one_move_for_two_threads(self):
        # Two threads of one method both found the connection lost: the
        # first moves it, the second finds it moved and stays (it must not
        # dial again and leave the first's new connection under it).
        made = self.use_new_clients()
        lost = self.client
        lost.lost = True
        self.meth._reconnect(lost)
        self.meth._reconnect(lost)
        self.assertEqual(len(made), 1)
        self.assertIs(self.meth.client, made[0])
        self.assertFalse(made[0].closed)

    def test_a_successor_of_another_shape_is_refused(self):
        # projd came back with a config whose layer of that name has
        # another k (or fewer rows): reading it with the old strides would
        # give wrong results without an error, so apply() raises.
        made = []

        def connect(url, timeout_ms, ring):
            c = self.Client()
            c.layer = lambda name: type("Lay", (), {"index": 0, "k": 128, "n": 256, "name": name})()
            made.append(c)
            return c

        self.use_connect(connect)
        self.client.lost = True
        with self.assertRaisesRegex(ValueError, "came back with layer 'o' of 256 x 128"):
            self.meth.apply(self.layer, self.alloc(4, 192))
        self.assertIs(self.meth.client, self.client)
        self.assertTrue(made[0].closed)

    def test_other_errors_do_not_reconnect(self):
        def connect(url, timeout_ms, ring):
            raise AssertionError("connected again for an error that is not a lost connection")

        self.use_connect(connect)

        def timed_out():
            raise projd.ProjdError(-errno.ETIMEDOUT, "ETIMEDOUT", "timed out")

        self.client.on_project = timed_out
        with self.assertRaises(projd.ProjdError) as cm:
            self.meth.apply(self.layer, self.alloc(4, 192))
        self.assertEqual(cm.exception.code, -errno.ETIMEDOUT)
        self.assertIs(self.meth.client, self.client)
        # Lost twice in a row (projd down still): the second loss raises.
        self.client.on_project = None
        self.client.lost = True
        lost_again = self.Client()
        lost_again.lost = True
        self.mod._connect = lambda url, timeout_ms, ring: lost_again
        with self.assertRaises(projd.ProjdError) as cm:
            self.meth.apply(self.layer, self.alloc(4, 192))
        self.assertEqual(cm.exception.code, -errno.ECONNRESET)

    def test_apply_under_graph_capture_is_refused(self):
        x = self.alloc(4, 192)
        self.capturing = True
        with self.assertRaisesRegex(RuntimeError, "CUDA graph.*--disable-cuda-graph"):
            self.meth.apply(self.layer, x)
        # Refused before anything was recorded, registered or sent.
        self.assertEqual((self.stream.log, self.client.live, self.client.requests), ([], {}, []))
        self.capturing = False
        y = self.meth.apply(self.layer, x)
        self.assertEqual(y.shape, (4, 256))
        self.assertEqual(self.client.requests, [1])
        self.assertEqual([e[0] for e in self.stream.log], ["record", "wait"])


class SglangQuantConfigTests(unittest.TestCase):
    """projd_sglang.quant_config with stand-ins for SGLang's modules (the
    three names it imports) and a client that never connected: which
    method each prefix gets. tests/gpu/python_sglang.sh runs the same with
    SGLang's own layers on the GPU host."""

    class OfflineClient(projd.Client):
        """A projd.Client (quant_config checks) that serves names, on the
        cuda backend, without a daemon."""

        timeout_ms = 1000
        ring_active = False

        def __init__(self, names):
            import types
            import weakref

            self._h = None
            self._guard = projd._Guard("offline client")
            self._guard.closed = True
            self._mappings = weakref.WeakSet()
            self.url = "ipc:///offline"
            layers = tuple(projd.LayerInfo(i, n, 256, 192, "z12", 2, 256) for i, n in enumerate(names))
            self.info = types.SimpleNamespace(backend="cuda", layers=layers)
            self._by_name = {L.name: L for L in layers}

    def setUp(self):
        import abc
        import types

        import projd_sglang

        self.mod = projd_sglang

        class LinearBase:
            pass

        class LinearMethodBase(abc.ABC):
            pass

        class QuantizationConfig(abc.ABC):
            pass

        class UnquantizedLinearMethod:
            pass

        self.LinearBase, self.LinearMethodBase = LinearBase, LinearMethodBase
        self.Unquantized = UnquantizedLinearMethod
        mods = {}
        for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.linear",
                     "sglang.srt.layers.quantization", "sglang.srt.layers.quantization.base_config",
                     "sglang.srt.layers.quantization.unquant"):
            mods[name] = types.ModuleType(name)
        mods["sglang.srt.layers.linear"].LinearBase = LinearBase
        mods["sglang.srt.layers.quantization.base_config"].QuantizationConfig = QuantizationConfig
        mods["sglang.srt.layers.quantization.base_config"].LinearMethodBase = LinearMethodBase
        mods["sglang.srt.layers.quantization.unquant"].UnquantizedLinearMethod = UnquantizedLinearMethod
        saved = {name: sys.modules.get(name) for name in mods}

        def restore():
            for name, m in saved.items():
                if m is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = m

        self.addCleanup(restore)
        sys.modules.update(mods)
        self.client = self.OfflineClient(["model.layers.0.self_attn.qkv_proj", "o"])

    def test_default_maps_served_prefixes(self):
        cfg = self.mod.quant_config(self.client)
        linear = self.LinearBase()
        m = cfg.get_quant_method(linear, "model.layers.0.self_attn.qkv_proj")
        self.assertIsInstance(m, self.mod.ProjdLinearMethod)
        self.assertEqual(m.L.name, "model.layers.0.self_attn.qkv_proj")
        self.assertIsInstance(m, self.LinearMethodBase)  # registered with SGLang's ABC
        again = cfg.get_quant_method(linear, "model.layers.0.self_attn.qkv_proj")
        self.assertIsNot(again, m, "layers must not share a method")
        # a linear layer the daemon does not serve keeps SGLang's method;
        # other layers get None (SGLang's default for them)
        self.assertIsInstance(cfg.get_quant_method(linear, "model.layers.0.mlp.down_proj"), self.Unquantized)
        self.assertIsNone(cfg.get_quant_method(object(), "o"))
        self.assertEqual(cfg.get_name(), "projd")
        self.assertEqual(cfg.get_min_capability(), 90)
        self.assertEqual(cfg.get_config_filenames(), [])
        self.assertEqual(cfg.get_scaled_act_names(), [])
        with self.assertRaisesRegex(ValueError, "quant_config"):
            type(cfg).from_config({})

    def test_dict_and_callable_mappings(self):
        linear = self.LinearBase()
        cfg = self.mod.quant_config(self.client, {"a.o_proj": "o", "c.o_proj": ""})
        self.assertEqual(cfg.get_quant_method(linear, "a.o_proj").L.name, "o")
        self.assertIsInstance(cfg.get_quant_method(linear, "o"), self.Unquantized)  # not in the dict
        self.assertIsInstance(cfg.get_quant_method(linear, "c.o_proj"), self.Unquantized)  # ""
        # a dict's names are checked when the config is made
        with self.assertRaisesRegex(KeyError, "unknown layer 'nope' \\(the daemon serves model.layers.0.self_attn.qkv_proj, o\\)"):
            self.mod.quant_config(self.client, {"a.o_proj": "o", "b.o_proj": "nope"})
        # a callable's when the layer is built
        cfg = self.mod.quant_config(self.client, lambda p: {"x.o_proj": "o", "y.o_proj": "nope"}.get(p, ""))
        self.assertEqual(cfg.get_quant_method(linear, "x.o_proj").L.name, "o")
        self.assertIsInstance(cfg.get_quant_method(linear, "x.qkv_proj"), self.Unquantized)
        with self.assertRaisesRegex(KeyError, "unknown layer 'nope'"):
            cfg.get_quant_method(linear, "y.o_proj")

    def test_bad_arguments(self):
        with self.assertRaisesRegex(TypeError, "layers must be None, a dict or a callable, not int"):
            self.mod.quant_config(self.client, 3)
        with self.assertRaisesRegex(TypeError, "client must be a projd.Client, not str"):
            self.mod.quant_config("ipc:///x")


class ManyLayersTests(DaemonTest):
    """A daemon of 300 layers named as SGLang names them (more than the 64
    the C struct holds inline), each the small model's o or router tensor
    again: every layer is listed and usable, bit for bit."""

    @classmethod
    def setUpClass(cls):
        cls.url = env("PROJD_TEST_MANY_URL")
        cls.c = projd.Client(cls.url, name="test_projd many")
        cls.model = Model(env("PROJD_TEST_MODEL"))
        by_tensor = {}
        cls.terms = {}
        for L in cls.c.layers:
            tensor = ("o", "router")[L.index % 2] + ".weight"
            if (tensor, L.format) not in by_tensor:
                by_tensor[(tensor, L.format)] = cls.model.terms(tensor, L.format)[1]
            cls.terms[L.name] = by_tensor[(tensor, L.format)]

    def test_every_layer_listed(self):
        layers = self.c.layers
        self.assertEqual(len(layers), 300)
        self.assertEqual([L.index for L in layers], list(range(300)))
        self.assertEqual(layers[299].name, "model.layers.299.proj")
        self.assertEqual(self.c.layer("model.layers.64.proj").index, 64)
        o, router = self.c.layer("model.layers.0.proj"), self.c.layer("model.layers.1.proj")
        for L in layers:
            want = (o, router)[L.index % 2]
            self.assertEqual((L.n, L.k, L.format), (want.n, want.k, want.format), L.name)

    def test_layers_past_the_first_64_project(self):
        for i in (63, 64, 65, 298, 299):
            for m in (1, 3):
                self.run_case("model.layers.%d.proj" % i, m)
        self.assertEqual(self.c.stats()["layers"]["model.layers.299.proj"]["ops"], 2)

    def test_layer_find_versions(self):
        # PROJD_1's projd_layer_find (what programs built before 0.3 bind)
        # searches the 64 layers projd_info holds inline: those programs
        # index info->layers with its answer. PROJD_1.2's searches all.
        lib = projd.load_library()
        libc = ctypes.CDLL(None)
        libc.dlvsym.restype = ctypes.c_void_p
        libc.dlvsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
        v1 = proto(libc.dlvsym(lib._handle, b"projd_layer_find", b"PROJD_1"))
        v12 = proto(libc.dlvsym(lib._handle, b"projd_layer_find", b"PROJD_1.2"))
        h = self.c._h
        self.assertEqual(v1(h, b"model.layers.63.proj"), 63)
        self.assertEqual(v1(h, b"model.layers.64.proj"), -1)
        self.assertEqual(v12(h, b"model.layers.64.proj"), 64)
        self.assertEqual(v12(h, b"model.layers.299.proj"), 299)
        self.assertEqual(lib.projd_layer_count(h), 300)
        self.assertFalse(lib.projd_layer_get(h, 300))

    def test_check_weight_asks_once(self):
        # A worker checks each of its layers' weights: the served model is
        # asked for once a connection, not once a layer.
        c = projd.Client(self.url, name="test_projd check_weight")
        self.addCleanup(c.close)
        before = self.c.stats()["requests"]["STATS"]
        for L in c.layers:
            raw = self.model.tensors[("o", "router")[L.index % 2] + ".weight"][2]
            c.check_weight(L.name, raw)
        with self.assertRaises(ValueError):
            c.check_weight("model.layers.0.proj", self.model.tensors["router.weight"][2])
        after = self.c.stats()["requests"]["STATS"]
        self.assertEqual(after - before, 2, "STATS requests during 301 check_weight calls")

    def test_unknown_name_says_how_many(self):
        with self.assertRaises(KeyError) as cm:
            self.c.layer("model.layers.300.proj")
        text = str(cm.exception)
        self.assertIn("model.layers.0.proj", text)
        self.assertIn("300 in all", text)
        self.assertLess(len(text), 1000)


class SlowDaemonTests(unittest.TestCase):
    """Against the daemon that holds every op for 300 ms."""

    @classmethod
    def setUpClass(cls):
        cls.url = env("PROJD_TEST_SLOW_URL")

    def test_in_flight(self):
        with projd.Client(self.url) as c:
            with c.shm_buffer(2 * 256 * 2) as xb, c.shm_buffer(2 * 64 * 2) as yb:
                req = c.project_async([Op(layer="router", m=2, x_buf=xb, y_buf=yb)])
                self.assertFalse(req.done())
                with self.assertRaises(TimeoutError):
                    req.wait(timeout=0.01)
                with self.assertRaisesRegex(BufferError, "unfinished request"):
                    yb.release()
                r = req.wait()
                self.assertEqual(r.status, 0)
                # The hold counts from when the op was queued in the daemon.
                self.assertGreaterEqual(r.total_ns, 250 * 10**6)
                self.assertLessEqual(r.queue_ns + r.exec_ns, r.total_ns)
                req.close()

    def test_timeout_then_usable(self):
        with projd.Client(self.url, timeout_ms=100) as c, c.shm_buffer(256 * 2) as xb, c.shm_buffer(64 * 2) as yb:
            op = Op(layer="router", m=1, x_buf=xb, y_buf=yb)
            t0 = time.monotonic()
            with self.assertRaises(ProjdError) as cm:
                c.project([op])
            self.assertEqual(cm.exception.errno, 110, str(cm.exception))  # ETIMEDOUT
            # no reply came: the result must not read as ok, nor its op
            r = cm.exception.result
            self.assertFalse(r.ok)
            self.assertEqual((r.status, [o.status for o in r.ops]), (-110, [-110]))
            self.assertLess(time.monotonic() - t0, 5)
            c.timeout_ms = 30000
            self.assertEqual(c.project([op]).status, 0)

    def test_close_and_cancel_with_requests_in_flight(self):
        c = projd.Client(self.url)
        xb, yb = c.shm_buffer(256 * 2), c.shm_buffer(64 * 2)
        op = Op(layer="router", m=1, x_buf=xb, y_buf=yb)
        cancelled = c.project_async([op])
        orphan = c.project_async([op])
        cancelled.close()  # cancels a running request: no crash, no result
        with self.assertRaisesRegex(ValueError, "closed"):
            cancelled.wait()
        c.close()
        # A request outstanding at close completes with a local error:
        # cancelled, as on a ring (not the -ECONNRESET of a lost daemon).
        with self.assertRaises(ProjdError) as cm:
            orphan.wait()
        self.assertEqual(cm.exception.code, -125, str(cm.exception))  # ECANCELED
        orphan.close()

    def test_wait_after_close_on_a_new_thread(self):
        # close() joins the ring's reaper thread; glibc gives its thread id
        # to the next thread, which must not be taken for the reaper.
        c = projd.Client(self.url, ring=True)
        self.assertTrue(c.ring_active)
        xb, yb = c.shm_buffer(256 * 2), c.shm_buffer(64 * 2)
        req = c.project_async([Op(layer="router", m=1, x_buf=xb, y_buf=yb)])
        c.close()
        out = {}

        def wait():
            try:
                req.wait()
                out["code"] = 0
            except ProjdError as e:
                out["code"] = e.code

        t = threading.Thread(target=wait)
        t.start()
        t.join()
        self.assertEqual(out["code"], -125)  # ECANCELED, not -EDEADLK (-35)
        req.close()

    def test_packed_result_after_a_local_failure(self):
        with projd.Client(self.url, timeout_ms=50) as c, c.shm_buffer(256 * 2) as xb, c.shm_buffer(64 * 2) as yb:
            L = c.layer("router")
            ops = projd.PackedOps(1)
            ops.set(0, L.index, 1, L.n, xb.id, 0, L.k, yb.id, 0, L.n)
            with self.assertRaises(ProjdError) as cm:
                c.project_packed(ops)
            self.assertEqual(cm.exception.code, -110)  # ETIMEDOUT
            r = ops.result()
            self.assertFalse(r.ok)
            self.assertEqual((r.status, r.failed_op, [o.status for o in r.ops]), (-110, None, [-110]))
            time.sleep(0.5)  # the daemon finishes the op that timed out


if __name__ == "__main__":
    unittest.main()
