"""test_sglang_gpu.py — projd_sglang inside SGLang's own linear layers.

test_torch_gpu.py calls ProjdLinearMethod as the docstring of
projd_sglang says SGLang does; this suite lets SGLang do it: its layer
classes (sglang.srt.layers.linear) built with projd_sglang.quant_config,
their parameters filled by SGLang's own weight loaders the way a
checkpoint's q/k/v and gate/up tensors are loaded, and their forward() run
at several m against a float64 reference of the model file.

Run by tests/gpu/python_sglang.sh on the GPU host, with SGLang's Python
package importable and tensor parallelism 1 (one process, SGLang's
parallel state set up by the suite). The script starts projd on the cuda
backend with the small generated model, its layers named by the SGLang
prefixes below, and sets PROJD_LIB, PROJD_TEST_URL and PROJD_TEST_MODEL.
SGLANG_STAND_INS=sgl_kernel,flashinfer (set by the script for those of
SGLang's kernel packages that do not import here) puts an empty stand-in
for each in sys.modules: on a CUDA machine SGLang's modules import them at
load time for kernels this path never calls (sampling, fp8 quantisation,
fused MoE); a call into a stand-in raises.
"""

import importlib.abc
import importlib.machinery
import os
import socket
import sys
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402  (the script checked it imports)

import projd  # noqa: E402
import projd_sglang  # noqa: E402
from test_torch_gpu import assert_within_bound, load_weights, raw_tensors  # noqa: E402

DEVICE = "cuda"

# The daemon's layers (python_sglang.sh's config): SGLang prefix -> the
# small model's tensor (rows x inputs).
QKV = "model.layers.0.self_attn.qkv_proj"  # qkv_gate.weight 320 x 256
O_PROJ = "model.layers.0.self_attn.o_proj"  # o.weight 256 x 192
GATE_UP = "model.layers.0.mlp.gate_up_proj"  # pooler.weight 384 x 256
UNPOOL = "model.layers.0.mlp.unpool"  # unpooler.weight 512 x 256
GATE = "model.layers.0.mlp.gate"  # router.weight 64 x 256 (f32: split)
TENSOR = {QKV: "qkv_gate", O_PROJ: "o", GATE_UP: "pooler", UNPOOL: "unpooler", GATE: "router"}


class _Stand:
    """Whatever SGLang's imports take from a kernel package: functions, names of
    names (scalar_types.uint4b8), classes to subclass. Called, it says
    what it is."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stand(self._name + "." + name)

    def __call__(self, *a, **k):
        raise RuntimeError("%s is a stand-in: SGLang's compiled kernels are not installed" % self._name)

    def __mro_entries__(self, bases):
        return (object,)


class _AbsentModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stand(self.__name__ + "." + name)


class _AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _AbsentModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


STAND_INS = [n for n in os.environ.get("SGLANG_STAND_INS", "").split(",") if n]
if STAND_INS:
    sys.meta_path.insert(0, _AbsentFinder(STAND_INS))

from sglang.srt.distributed import parallel_state  # noqa: E402
from sglang.srt.layers import linear as sgl_linear  # noqa: E402
from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod  # noqa: E402


def init_tp1():
    """SGLang's parallel state for one process (its linear layers ask it
    for the tensor-parallel rank and size)."""
    if parallel_state.model_parallel_is_initialized():
        return
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    parallel_state.init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method="tcp://127.0.0.1:%d" % port,
        backend="nccl" if DEVICE == "cuda" else "gloo",
    )
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)


class SglangLayers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        init_tp1()
        cls.client = projd.Client(os.environ["PROJD_TEST_URL"], name="test_sglang_gpu")
        cls.weights = load_weights(os.environ["PROJD_TEST_MODEL"])
        cls.raw = raw_tensors(os.environ["PROJD_TEST_MODEL"])
        cls.gen = torch.Generator(device="cpu").manual_seed(11)
        cls.config = projd_sglang.quant_config(cls.client)
        L = sgl_linear
        bf16 = torch.bfloat16
        # As SGLang's model loader does: built on the GPU (the default
        # device), never moved after (a meta weight cannot be).
        with torch.device(DEVICE):
            cls.qkv = L.QKVParallelLinear(
                hidden_size=256, head_size=32, total_num_heads=8, total_num_kv_heads=1, bias=True,
                params_dtype=bf16, quant_config=cls.config, prefix=QKV,
            )
            cls.o_proj = L.RowParallelLinear(
                192, 256, bias=False, params_dtype=bf16, quant_config=cls.config, prefix=O_PROJ
            )
            cls.gate_up = L.MergedColumnParallelLinear(
                256, [192, 192], bias=False, params_dtype=bf16, quant_config=cls.config, prefix=GATE_UP
            )
            # 500 of the daemon's 512 rows, with a bias SGLang returns
            # instead of adding (skip_bias_add, as some MLPs use it)
            cls.unpool = L.ReplicatedLinear(
                256, 500, bias=True, skip_bias_add=True, params_dtype=bf16, quant_config=cls.config,
                prefix=UNPOOL,
            )
            cls.gate = L.ReplicatedLinear(
                256, 64, bias=False, params_dtype=bf16, quant_config=cls.config, prefix=GATE
            )
            # not served by the daemon: SGLang's own method, its weights here
            cls.local = L.ReplicatedLinear(
                256, 24, bias=False, params_dtype=bf16, quant_config=cls.config,
                prefix="model.layers.0.mlp.shared_expert_gate",
            )
        cls.load_checkpoint()

    @classmethod
    def tearDownClass(cls):
        projd_sglang.release_registrations(cls.client)
        cls.client.close()

    @classmethod
    def load_checkpoint(cls):
        """Each parameter through its SGLang weight_loader, from tensors cut
        the way a checkpoint stores them (q, k, v; gate, up)."""
        raw = cls.raw

        def load(param, tensor, *shard):
            param.weight_loader(param, tensor, *shard)

        w = raw["qkv_gate.weight"]
        load(cls.qkv.weight, w[:256], "q")
        load(cls.qkv.weight, w[256:288], "k")
        load(cls.qkv.weight, w[288:], "v")
        cls.qkv_bias = torch.randn(320, generator=cls.gen).to(torch.bfloat16)
        load(cls.qkv.bias, cls.qkv_bias[:256], "q")
        load(cls.qkv.bias, cls.qkv_bias[256:288], "k")
        load(cls.qkv.bias, cls.qkv_bias[288:], "v")
        load(cls.o_proj.weight, raw["o.weight"])
        w = raw["pooler.weight"]
        load(cls.gate_up.weight, w[:192], 0)
        load(cls.gate_up.weight, w[192:], 1)
        load(cls.unpool.weight, raw["unpooler.weight"][:500])
        cls.unpool_bias = torch.randn(500, generator=cls.gen).to(torch.bfloat16)
        load(cls.unpool.bias, cls.unpool_bias)
        # the router's checkpoint tensor is f32; SGLang's parameter is bf16
        # and on the meta device, so nothing is converted
        load(cls.gate.weight, raw["router.weight"])
        cls.local_w = torch.randn(24, 256, generator=cls.gen).to(torch.bfloat16)
        load(cls.local.weight, cls.local_w)
        for layer in (cls.qkv, cls.o_proj, cls.gate_up, cls.unpool, cls.gate, cls.local):
            layer.quant_method.process_weights_after_loading(layer)

    def x(self, *shape):
        return torch.randn(*shape, generator=self.gen).to(torch.bfloat16).to(DEVICE)

    def test_methods_and_parameters(self):
        for layer, prefix in ((self.qkv, QKV), (self.o_proj, O_PROJ), (self.gate_up, GATE_UP),
                              (self.unpool, UNPOOL), (self.gate, GATE)):
            with self.subTest(prefix=prefix):
                self.assertIsInstance(layer.quant_method, projd_sglang.ProjdLinearMethod)
                self.assertEqual(layer.quant_method.L.name, prefix)
                self.assertEqual(layer.weight.device.type, "meta")  # nothing allocated here
                self.assertTrue(callable(getattr(layer.weight, "weight_loader", None)))
        self.assertIsInstance(self.local.quant_method, UnquantizedLinearMethod)
        self.assertEqual(self.local.weight.device.type, DEVICE)
        self.assertEqual(tuple(self.qkv.weight.shape), (320, 256))
        self.assertEqual(self.qkv.output_partition_sizes, [256, 32, 32])
        self.assertEqual(tuple(self.unpool.weight.shape), (500, 256))

    def test_daemon_serves_the_checkpoint(self):
        for prefix, tensor in TENSOR.items():
            w = self.raw[tensor + ".weight"]
            projd_sglang.check_weight(self.client, prefix, w)
        other = self.raw["o.weight"].clone()
        other.view(-1)[7] += 1.0
        with self.assertRaisesRegex(ValueError, "serves other weights"):
            projd_sglang.check_weight(self.client, O_PROJ, other)

    def forward_checked(self, layer, tensor, n, k, bias_added=None, bias_returned=None):
        W = self.weights[tensor + ".weight"][:n]
        for m in (1, 8, 16, 33, 128, 256):
            with self.subTest(layer=tensor, m=m):
                x = self.x(m, k)
                y, out_bias = layer(x)
                self.assertEqual(tuple(y.shape), (m, n))
                self.assertEqual(y.dtype, torch.bfloat16)
                self.assertEqual(y.device.type, DEVICE)
                assert_within_bound(self, "%s n=%d" % (tensor, n), W, x, y, bias_added)
                if bias_returned is None:
                    self.assertIsNone(out_bias)
                else:
                    self.assertTrue(torch.equal(out_bias.cpu(), bias_returned))

    def test_qkv_with_bias(self):
        self.forward_checked(self.qkv, "qkv_gate", 320, 256, bias_added=self.qkv_bias)

    def test_row_parallel(self):
        self.forward_checked(self.o_proj, "o", 256, 192)

    def test_merged_column(self):
        self.forward_checked(self.gate_up, "pooler", 384, 256)

    def test_rows_prefix_and_skip_bias_add(self):
        self.forward_checked(self.unpool, "unpooler", 500, 256, bias_returned=self.unpool_bias)

    def test_router(self):
        self.forward_checked(self.gate, "router", 64, 256)

    def test_batch_and_sequence_dims(self):
        x = self.x(3, 5, 256)
        y, _ = self.qkv(x)
        self.assertEqual(tuple(y.shape), (3, 5, 320))
        assert_within_bound(self, "qkv_gate 3-D", self.weights["qkv_gate.weight"], x, y, self.qkv_bias)

    def test_unserved_layer_runs_here(self):
        x = self.x(4, 256)
        y, _ = self.local(x)
        assert_within_bound(self, "local", self.local_w.double(), x, y)

    def test_mapping_by_dict_and_unknown_names(self):
        with self.assertRaisesRegex(KeyError, "no_such_layer"):
            projd_sglang.quant_config(self.client, {"a.proj": O_PROJ, "b.proj": "no_such_layer"})
        config = projd_sglang.quant_config(self.client, {"a.proj": O_PROJ})
        named = projd_sglang.quant_config(self.client, lambda p: "no_such_layer" if p == "b.proj" else None)
        with torch.device(DEVICE):
            a = sgl_linear.RowParallelLinear(192, 256, bias=False, params_dtype=torch.bfloat16,
                                             quant_config=config, prefix="a.proj")
            self.assertIsInstance(a.quant_method, projd_sglang.ProjdLinearMethod)
            with self.assertRaisesRegex(KeyError, "no_such_layer"):
                sgl_linear.RowParallelLinear(192, 256, bias=False, params_dtype=torch.bfloat16,
                                             quant_config=named, prefix="b.proj")
            c = sgl_linear.RowParallelLinear(192, 256, bias=False, params_dtype=torch.bfloat16,
                                             quant_config=config, prefix="c.proj")
            self.assertIsInstance(c.quant_method, UnquantizedLinearMethod)
        x = self.x(8, 192)
        y, _ = a(x)  # weights never loaded here: the daemon's o
        assert_within_bound(self, "a.proj", self.weights["o.weight"], x, y)
        with self.assertRaises(TypeError):
            projd_sglang.quant_config(self.client, 42)


if __name__ == "__main__":
    unittest.main()
