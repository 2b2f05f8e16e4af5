"""test_torch_gpu.py — the SGLang linear method (client/python/projd_sglang.py)
and the binding's CUDA IPC path against projd's cuda backend, with torch.

Run by tests/gpu/python_torch.sh on the GPU host, which starts two projd
(cuda backend, the small generated model; the second with max_m 40, two ops
per request and ten buffers per connection, so that the method splits m
over ops and requests and evicts registrations) and sets PROJD_LIB,
PROJD_TEST_URL, PROJD_TEST_SMALL_URL, PROJD_TEST_MODEL and PROJD_TEST_PROJD (the binary, for the
restart test's own daemon). Every result is compared with a float64 reference of the
model file's weights computed by torch on the CPU; the bound is the bf16
rounding of y plus fp32 accumulation over K (|y - ref| <= 2^-8 |ref| +
K 2^-23 (|x| @ |W|^T)), the same whatever engine the daemon picked.
"""

import functools
import json
import os
import struct
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python"))

import torch  # noqa: E402  (the script checked it imports)

import projd  # noqa: E402
import projd_sglang  # noqa: E402


@functools.lru_cache(maxsize=None)
def raw_tensors(path):
    """name -> CPU tensor of every bf16 / f32 tensor of a safetensors file,
    as stored (what a checkpoint loader hands over)."""
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8 : 8 + hlen].decode("utf-8"))
    dtypes = {"BF16": torch.bfloat16, "F32": torch.float32}
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] not in dtypes:
            continue
        a, b = t["data_offsets"]
        raw = bytearray(data[8 + hlen + a : 8 + hlen + b])
        out[name] = torch.frombuffer(raw, dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out


@functools.lru_cache(maxsize=None)
def load_weights(path):
    """name -> float64 CPU tensor of every 2-D tensor of a safetensors file."""
    return {name: w.double() for name, w in raw_tensors(path).items() if w.dim() == 2}


def assert_within_bound(tc, what, W, x, y, bias=None):
    """y (any shape, m x n rows) against the float64 x @ W^T (+ bias): no
    NaN (the poison, or an element never written), every element within
    the bf16 rounding of y plus fp32 accumulation over K."""
    k = W.shape[1]
    xd = x.double().cpu().reshape(-1, k)
    ref = xd @ W.T
    bound = ref.abs() * 2.0**-8 + k * 2.0**-23 * (xd.abs() @ W.abs().T)
    if bias is not None:
        ref = ref + bias.double().cpu()
        bound = bound + ref.abs() * 2.0**-8
    got = y.double().cpu().reshape(-1, W.shape[0])
    tc.assertFalse(torch.isnan(got).any().item(), "%s: NaN in y (an element never written?)" % what)
    bad = ((got - ref).abs() > bound + 1e-30).nonzero()
    tc.assertEqual(
        bad.shape[0], 0,
        "%s m=%d: %d elements out of bound, first at %s: got %r, want %r"
        % (what, xd.shape[0], bad.shape[0], bad[:1].tolist(),
           got[tuple(bad[0])].item() if bad.shape[0] else None,
           ref[tuple(bad[0])].item() if bad.shape[0] else None),
    )


class SglangMethod(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = projd.Client(os.environ["PROJD_TEST_URL"], name="test_torch_gpu")
        cls.weights = load_weights(os.environ["PROJD_TEST_MODEL"])
        cls.gen = torch.Generator(device="cpu").manual_seed(7)

    @classmethod
    def tearDownClass(cls):
        projd_sglang.release_registrations(cls.client)
        cls.client.close()

    def method(self, L, n):
        m = projd_sglang.ProjdLinearMethod(L.name, self.client)
        layer = torch.nn.Module()
        m.create_weights(layer, L.k, [n], L.k, n, torch.bfloat16)
        self.assertEqual(layer.weight.device.type, "meta")
        self.assertEqual(tuple(layer.weight.shape), (n, L.k))
        return m, layer

    def x(self, *shape):
        return torch.randn(*shape, generator=self.gen).to(torch.bfloat16)

    def check(self, L, n, x, y, bias=None):
        W = self.weights[L.name + ".weight"][:n]
        assert_within_bound(self, "%s n=%d" % (L.name, n), W, x, y, bias)

    def test_weights_are_the_daemons(self):
        # the checkpoint's own tensors, raw (bf16 / f32 as stored), on the GPU
        raw = raw_tensors(os.environ["PROJD_TEST_MODEL"])
        for L in self.client.layers:
            w = raw[L.name + ".weight"].clone().cuda()
            projd_sglang.check_weight(self.client, L.name, w)
            w.view(-1)[w.numel() // 3] += 1.0  # another checkpoint: one weight differs
            with self.assertRaisesRegex(ValueError, "serves other weights"):
                projd_sglang.check_weight(self.client, L.name, w)

    def test_weight_updates_are_seen_by_the_watched_loader(self):
        # The real fingerprint: the checkpoint's tensor loaded again from
        # the CPU or the GPU, or a non-contiguous shard of it, passes; a
        # training step's change (every weight) or one weight in a sampled
        # row and column makes the layer stale until the daemon's weights
        # come back. SGLang's loader is torch's copy, as its unquantized
        # method's (into the meta weight: nothing).
        raw = raw_tensors(os.environ["PROJD_TEST_MODEL"])
        L = next(L for L in self.client.layers if L.name != "router")
        meth = projd_sglang.ProjdLinearMethod(L.name, self.client)
        layer = torch.nn.Module()
        calls = []
        meth.create_weights(layer, L.k, [L.n], L.k, L.n, torch.bfloat16,
                            weight_loader=lambda p, w, *a: calls.append(tuple(w.shape)))
        w = raw[L.name + ".weight"]
        load = layer.weight.weight_loader
        load(layer.weight, w)
        meth.process_weights_after_loading(layer)
        x = self.x(4, L.k).cuda()
        self.check(L, L.n, x, meth.apply(layer, x))
        wide = torch.zeros(L.n, 2 * L.k, dtype=torch.bfloat16)
        wide[:, ::2] = w  # the same values through a strided view
        for again in (w.cuda(), w.float(), wide[:, ::2]):
            load(layer.weight, again)
            meth.process_weights_after_loading(layer)
        self.check(L, L.n, x, meth.apply(layer, x))
        step = w.float() + 1e-2 * torch.randn(w.shape, generator=self.gen)
        picked = w.clone()
        picked[L.n - 1, L.k - 1] += 1.0  # the last row and column are always sampled
        for other in (step.cuda(), picked):
            with self.assertRaisesRegex(RuntimeError, "cannot be updated"):
                load(layer.weight, other)
            with self.assertRaisesRegex(RuntimeError, "is stale"):
                meth.apply(layer, x)
            with self.assertRaisesRegex(RuntimeError, "cannot be reloaded"):
                meth.process_weights_after_loading(layer)
            load(layer.weight, w)  # the rollback
            meth.process_weights_after_loading(layer)
            self.check(L, L.n, x, meth.apply(layer, x))
        self.assertEqual(len(calls), 6)  # a refused load never reaches SGLang's loader

    def test_every_layer_and_m(self):
        self.assertEqual(self.client.info.backend, "cuda")
        for L in self.client.layers:
            for m in (1, 8, 16, 33, 128, min(256, L.max_m)):
                if m > L.max_m:
                    continue
                with self.subTest(layer=L.name, m=m):
                    meth, layer = self.method(L, L.n)
                    x = self.x(m, L.k).cuda()
                    y = meth.apply(layer, x)
                    self.assertEqual(tuple(y.shape), (m, L.n))
                    self.assertEqual(y.dtype, torch.bfloat16)
                    self.check(L, L.n, x, y)

    def test_prefix_bias_views_and_batches(self):
        L = max(self.client.layers, key=lambda l: l.n)
        n = max(8, L.n // 2)
        meth, layer = self.method(L, n)
        # x a view at an offset inside a larger allocation, 3-D, with bias
        big = self.x(3 * 40 + 5, L.k).cuda()
        x = big[5:125].reshape(3, 40, L.k)
        bias = self.x(n).cuda()
        y = meth.apply(layer, x, bias)
        self.assertEqual(tuple(y.shape), (3, 40, n))
        self.check(L, n, x, y, bias)
        # every other row: a row stride of 2k, passed to the daemon as x_ld
        x2 = big[::2]
        self.check(L, n, x2, meth.apply(layer, x2))
        # a transposed view (column stride k, not 1) goes through a copy
        xt = self.x(L.k, 24).cuda().t()
        self.assertNotEqual(xt.stride(-1), 1)
        self.check(L, n, xt, meth.apply(layer, xt))

    def test_registrations_are_reused(self):
        L = self.client.layers[0]
        meth, layer = self.method(L, L.n)
        x = self.x(8, L.k).cuda()
        meth.apply(layer, x)
        before = len(projd_sglang._registry(self.client).ids)
        for _ in range(20):
            meth.apply(layer, x)
        self.assertLessEqual(len(projd_sglang._registry(self.client).ids), before + 1)

    def test_a_freed_allocation_is_unregistered_when_its_address_comes_back(self):
        L = self.client.layers[0]
        meth, layer = self.method(L, L.n)
        reg = projd_sglang._registry(self.client)
        rows = (64 << 20) // (2 * L.k)  # 64 MB: a segment of its own in PyTorch's allocator
        big = torch.empty(rows, L.k, dtype=torch.bfloat16, device="cuda")
        big[:8] = self.x(8, L.k).cuda()
        self.check(L, L.n, big[:8], meth.apply(layer, big[:8]))
        aid, base = projd.cuda_allocation(big.data_ptr())
        self.assertIn(aid, reg.ids)
        self.assertNotEqual(aid, 0)
        self.assertEqual(base, reg.ids[aid][0])
        del big
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # cudaFree: the daemon still maps the old allocation
        again = torch.empty(rows, L.k, dtype=torch.bfloat16, device="cuda")
        again[:8] = self.x(8, L.k).cuda()
        aid2, base2 = projd.cuda_allocation(again.data_ptr())
        self.assertNotEqual(aid2, aid)  # a new allocation, whatever its address
        self.check(L, L.n, again[:8], meth.apply(layer, again[:8]))
        self.assertIn(aid2, reg.ids)
        if base2 == base:  # the address came back: the freed one was unregistered
            self.assertNotIn(aid, reg.ids)
        else:
            self.assertIn(aid, reg.ids)
        print("address %s" % ("reused: the freed allocation's registration dropped" if base2 == base
                              else "not reused: the freed allocation stays registered until evicted"))
        self.assertEqual(self.client.stats()["buffers"]["current"], len(reg.ids))

    def test_apply_orders_the_daemon_by_events(self):
        # Each request carries the two events and is answered at launch
        # (the cuda backend counts those as accepted); y is read on the
        # caller's stream after the daemon's event, and is right.
        L = max(self.client.layers, key=lambda l: l.n)
        meth, layer = self.method(L, L.n)
        before = self.client.stats()["backend_stats"]["accepted"]
        for m in (1, 8, 100):
            x = self.x(m, L.k).cuda()
            y = meth.apply(layer, x)
            self.check(L, L.n, x, y)
        self.assertGreaterEqual(self.client.stats()["backend_stats"]["accepted"] - before, 3)
        self.assertTrue(projd_sglang._registry(self.client).events_ok)

    def test_under_torch_compile(self):
        # SGLang can run its model under torch.compile. apply() is Python
        # around calls into libprojd, which Dynamo cannot trace: whatever
        # it makes of it, the results must be the daemon's, apply() must
        # not run inside a captured CUDA graph (its guard would raise), and
        # a y already returned must not be overwritten by the next call
        # (memory of a graph's pool would be). Two backends that need no
        # compiler: aot_eager, and cudagraphs, which replays the traced
        # parts around apply() as CUDA graphs.
        import torch._dynamo

        L = self.client.layers[0]
        meth, layer = self.method(L, L.n)

        def f(x):
            y = meth.apply(layer, x * 2)  # x * 2 is exact in bf16
            return y, y.float().abs().sum()

        print("torch %s" % torch.__version__)
        for backend in ("aot_eager", "cudagraphs"):
            torch._dynamo.reset()
            cf = torch.compile(f, backend=backend)
            kept = []
            for m in (4, 4, 9, 4):
                with self.subTest(backend=backend, m=m):
                    x = self.x(m, L.k).cuda()
                    y, total = cf(x)
                    self.check(L, L.n, x * 2, y)
                    self.assertEqual(total.item(), y.float().abs().sum().item())
                    kept.append((y, y.clone()))
            torch.cuda.synchronize()
            for i, (y, copy) in enumerate(kept):
                with self.subTest(backend=backend, kept=i):
                    self.assertTrue(torch.equal(y, copy), "a returned y changed later")

    def test_without_events_apply_synchronizes_instead(self):
        # A daemon that refuses the events (E_FLAGS) gets the synchronous
        # form from then on, with the same results.
        with projd.Client(os.environ["PROJD_TEST_URL"], name="test_torch_gpu-noevents") as c:
            real = c.project_packed
            sent = []

            def no_events(ops, count=None, flags=0, wait_event=None, signal_event=None):
                sent.append(wait_event is not None or signal_event is not None)
                if sent[-1]:
                    raise projd.ProjdError(int(projd.Status.E_FLAGS), "E_FLAGS", "no events here")
                return real(ops, count, flags)

            c.project_packed = no_events
            L = c.layers[0]
            meth = projd_sglang.ProjdLinearMethod(L.name, c)
            layer = torch.nn.Module()
            meth.create_weights(layer, L.k, [L.n], L.k, L.n, torch.bfloat16)
            for m in (4, 33):
                x = self.x(m, L.k).cuda()
                self.check(L, L.n, x, meth.apply(layer, x))
            self.assertFalse(projd_sglang._registry(c).events_ok)
            # Events were tried once, then never again.
            self.assertEqual(sent[0], True)
            self.assertNotIn(True, sent[1:])
            projd_sglang.release_registrations(c)

    def test_bad_inputs_are_refused_and_the_client_keeps_working(self):
        L = self.client.layers[0]
        meth, layer = self.method(L, L.n)
        with self.assertRaises(TypeError):
            meth.apply(layer, self.x(4, L.k))  # on the CPU
        with self.assertRaises(TypeError):
            meth.apply(layer, self.x(4, L.k).float().cuda())
        with self.assertRaises(ValueError):
            meth.apply(layer, self.x(4, L.k + 8).cuda())
        with self.assertRaises(ValueError):
            self.method(L, L.n + 1)
        x = self.x(4, L.k).cuda()
        self.check(L, L.n, x, meth.apply(layer, x))


class SmallLimits(unittest.TestCase):
    """A daemon with max_m 40, two ops per request and ten buffers per
    connection: m = 100 takes three ops in two requests, and a run of new
    allocations evicts the oldest registrations (the cache keeps two)."""

    def test_split_and_evict(self):
        with projd.Client(os.environ["PROJD_TEST_SMALL_URL"], name="test_torch_gpu-small") as c:
            self.assertEqual((c.info.limits.max_m, c.info.limits.max_ops_per_request), (40, 2))
            W = load_weights(os.environ["PROJD_TEST_MODEL"])
            g = torch.Generator(device="cpu").manual_seed(5)
            L = c.layers[0]
            meth = projd_sglang.ProjdLinearMethod(L.name, c)
            layer = torch.nn.Module()
            meth.create_weights(layer, L.k, [L.n], L.k, L.n, torch.bfloat16)
            reg = projd_sglang._registry(c)
            keep = []  # distinct allocations: each apply registers new ones
            for m in (100, 40, 41, 7, 100, 3):
                x = torch.randn(m, L.k, generator=g).to(torch.bfloat16).cuda()
                keep.append(x)
                y = meth.apply(layer, x)
                assert_within_bound(self, L.name, W[L.name + ".weight"], x, y)
                self.assertLessEqual(len(reg.ids), reg.limit)
            self.assertEqual(reg.limit, 2)
            projd_sglang.release_registrations(c)
            # Unregistered, a buffer stays counted until the daemon sees the
            # device done with it (at each completion, and every 100 ms:
            # daemon/DAEMON.md, "Buffers"), which can come after the reply,
            # so polled. It once read 1 at the first look (session 40).
            deadline = time.monotonic() + 5
            while c.stats()["buffers"]["current"] and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(c.stats()["buffers"]["current"], 0)


class RestartedDaemon(unittest.TestCase):
    """projd killed and started again on the same socket under a live
    method (what Restart=on-failure does after a sticky CUDA error): the
    next apply() connects again, registers its tensors anew and returns the
    right y; release_registrations() on the first client releases what its
    successor holds. A daemon of this test's own (PROJD_TEST_PROJD)."""

    def start(self, d, url):
        import subprocess

        cfg = os.path.join(d, "projd.json")
        with open(cfg, "w") as f:
            json.dump({"model": {"path": os.environ["PROJD_TEST_MODEL"]}, "device": {"backend": "cuda"},
                       "log": {"level": "warn"}}, f)
        log = open(os.path.join(d, "projd-%d.log" % len(self.procs)), "w")
        self.addCleanup(log.close)
        p = subprocess.Popen([os.environ["PROJD_TEST_PROJD"], "--config", cfg, "--socket", url],
                             stdout=log, stderr=log)
        self.procs.append(p)
        deadline = time.monotonic() + 60
        while True:
            try:
                return projd.Client(url, name="test_torch_gpu-restart", timeout_ms=10000)
            except projd.ProjdError:
                if time.monotonic() > deadline or p.poll() is not None:
                    raise
                time.sleep(0.1)

    def test_apply_goes_on_after_a_restart(self):
        import shutil
        import signal
        import tempfile

        if not os.environ.get("PROJD_TEST_PROJD"):
            self.skipTest("PROJD_TEST_PROJD (the projd binary) is not set")
        d = tempfile.mkdtemp(prefix="projd-restart-")
        self.addCleanup(shutil.rmtree, d, True)
        self.procs = []
        self.addCleanup(lambda: [(p.kill(), p.wait()) for p in self.procs if p.poll() is None])
        url = "ipc://" + os.path.join(d, "projd.sock")
        first = self.start(d, url)
        self.addCleanup(first.close)
        W = load_weights(os.environ["PROJD_TEST_MODEL"])
        g = torch.Generator(device="cpu").manual_seed(13)
        L = max(first.layers, key=lambda l: l.n)
        meth = projd_sglang.ProjdLinearMethod(L.name, first)
        other = projd_sglang.ProjdLinearMethod(L.name, first)
        layer = torch.nn.Module()
        meth.create_weights(layer, L.k, [L.n], L.k, L.n, torch.bfloat16)
        x = torch.randn(8, L.k, generator=g).to(torch.bfloat16).cuda()
        assert_within_bound(self, "before", W[L.name + ".weight"], x, meth.apply(layer, x))

        self.procs[0].send_signal(signal.SIGKILL)
        self.procs[0].wait()
        probe = self.start(d, url)  # the same socket, a new daemon: up and serving
        probe.close()
        x2 = torch.randn(33, L.k, generator=g).to(torch.bfloat16).cuda()
        for what, m_, xx in (("after", meth, x), ("after, new x", meth, x2), ("other method", other, x2)):
            y = m_.apply(layer, xx)
            assert_within_bound(self, what, W[L.name + ".weight"], xx, y)
        self.assertIsNot(meth.client, first)
        self.assertIs(other.client, meth.client)  # one successor for both
        new = meth.client
        self.assertGreater(new.stats()["buffers"]["current"], 0)
        projd_sglang.release_registrations(first)  # follows to the successor, raises nothing
        self.assertEqual(new.stats()["buffers"]["current"], 0)
        new.close()


class DevicePointer(unittest.TestCase):
    """The binding without the adapter: y poisoned with NaN, written by the
    daemon through a registered device pointer, every element checked."""

    def test_poisoned_y_is_fully_written(self):
        with projd.Client(os.environ["PROJD_TEST_URL"], name="test_torch_gpu-ptr") as c:
            W = load_weights(os.environ["PROJD_TEST_MODEL"])
            g = torch.Generator(device="cpu").manual_seed(11)
            for L in c.layers:
                m, n = 16, L.n
                x = torch.randn(m, L.k, generator=g).to(torch.bfloat16).cuda()
                y = torch.full((m + 2, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                rx, ry = c.register_device_pointer(x.data_ptr()), c.register_device_pointer(y.data_ptr())
                torch.cuda.synchronize()
                res = c.project([projd.Op(layer=L.index, m=m, n=n, x_buf=rx.id, x_off=rx.offset, x_ld=L.k,
                                          y_buf=ry.id, y_off=ry.offset + n * 2, y_ld=n)])
                self.assertTrue(res.ok)
                got = y.double().cpu()
                self.assertTrue(torch.isnan(got[0]).all().item(), "%s: the row before y was written" % L.name)
                self.assertTrue(torch.isnan(got[m + 1]).all().item(), "%s: the row after y was written" % L.name)
                assert_within_bound(self, L.name, W[L.name + ".weight"], x, y[1 : m + 1])
                c.unregister(rx.id)
                c.unregister(ry.id)


if __name__ == "__main__":
    unittest.main()
