"""projd_sglang — run an SGLang linear layer through projd.

Checked on the GPU host by tests/gpu/python_torch.sh (make test-gpu):
projd on the cuda backend, torch tensors, every layer and m = 1-256,
against a float64 reference; skipped where torch or a GPU is missing (CI).
It has not run inside SGLang itself. It is written against SGLang's
LinearMethodBase (python/sglang/srt/layers/quantization/base_config.py:
create_weights(layer, input_size_per_partition, output_partition_sizes,
input_size, output_size, params_dtype, **extra_weight_attrs) and
apply(layer, x, bias=None)) and kept small so that it can be read whole.

What it assumes:
  - projd runs the cuda backend on the GPU that holds x, and serves a layer
    whose k equals the SGLang layer's input_size_per_partition and whose n
    is at least sum(output_partition_sizes) (requests use the first n rows).
    In practice: tensor parallelism 1, the daemon loading the same
    checkpoint's weights (under its own config's layer names).
  - x is a bf16 CUDA tensor whose allocation has a legacy CUDA IPC handle:
    PyTorch's caching allocator without expandable segments
    (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False); cudaMallocAsync
    pools and VMM memory are refused with a message saying so.
  - apply() orders the daemon's work on the GPU with CUDA IPC events, not
    by waiting on the host: it records an event on the current stream
    after x's producers, the daemon's stream waits on it before reading x,
    the daemon records a second event after writing y and replies once the
    work is launched (PROJECT flags WAIT_EVENT, SIGNAL_EVENT, ACCEPT_REPLY),
    and the current stream waits on that event before anything after
    apply() runs; y (and x's memory, should the caller free it) is safe to
    use in stream order. A daemon that refuses the events (E_FLAGS) gets
    the synchronous form: the current stream synchronized first, the reply
    after the GPU finished. apply() cannot be captured in a CUDA graph (it
    calls the daemon): run SGLang with --disable-cuda-graph.
  - The weights live in the daemon. create_weights registers `weight` on
    the meta device (shape and loader attributes as SGLang's unquantized
    method), so the model's loader finds the parameter and nothing is
    allocated; what the loader copies into it is dropped.

Each allocation x or y lives in is registered with the daemon once (the
whole allocation, by its IPC handle; the tensor is addressed as an offset
in it) and cached per connection, keyed by the driver's buffer id of the
allocation (projd.cuda_allocation: one driver call per tensor and apply
once the allocation is known). A new cudaMalloc that gets a freed
allocation's address gets a new id, and the registration of the freed one
is dropped then. The daemon keeps registered allocations mapped (and
their memory alive) until they are evicted (least recently used, when the
connection's buffer limit comes near), released, or their address comes
back: PyTorch also frees cached segments on its own (an out-of-memory
retry, its garbage collection threshold), so call release_registrations()
after torch.cuda.empty_cache() and when memory is tight. A request keeps
its registrations from eviction until it is answered (the cache's lock is
held across the request: one client's applies run one at a time).

Use: one projd.Client shared by every layer, one method per layer, e.g.
from a QuantizationConfig's get_quant_method(layer, prefix)::

    client = projd.Client(ring=True)            # $PROJD_SOCKET or the default
    method = ProjdLinearMethod("o", client)     # the daemon's layer name

ring=True sends each projection through a shared-memory ring instead of
nng (PROTOCOL.md, "The ring"): the same requests and results without
nng's ~80-100 µs round trip, at the cost of a client thread that spins for
the daemon's ring.spin_us (50 µs) after each reply on machines of 4 or more
cores. Without it (or against a daemon that refuses the ring) every apply
goes over nng.

torch is imported on first use, so this module imports without it.
"""

import collections
import threading

import projd

__all__ = ["ProjdLinearMethod", "release_registrations"]


def _torch():
    import torch  # lazily: the module must import where torch is absent

    return torch


def _sglang_register(cls) -> None:
    # Make isinstance(method, LinearMethodBase) hold without importing
    # SGLang (and torch) when this module is imported. LinearMethodBase is
    # an ABC, so registering is enough.
    try:
        from sglang.srt.layers.quantization.base_config import LinearMethodBase
    except ImportError:
        return
    LinearMethodBase.register(cls)


class _Registrations:
    """CUDA IPC registrations of one connection: handle -> buffer id, oldest
    evicted when the daemon's per-connection buffer limit comes near."""

    def __init__(self, client: "projd.Client"):
        self.client = client
        self.lock = threading.Lock()
        # allocation id (projd.cuda_allocation) -> (its base, buffer id)
        self.ids = collections.OrderedDict()
        # room for the caller's other buffers; at least x and y of one request
        self.limit = max(2, client.info.limits.max_buffers - 8)
        self.events = {}  # device index -> _Events
        self.events_ok = True  # until the daemon refuses them (E_FLAGS)

    def lookup(self, ptr: int):
        """(buffer id, offset) for a device pointer, registering its
        allocation once. The caller holds self.lock until its request is
        answered, so no other thread evicts the ids it uses meanwhile."""
        aid, base = projd.cuda_allocation(ptr)
        known = self.ids.get(aid) if aid else None
        if known is not None:
            self.ids.move_to_end(aid)
            return known[1], ptr - known[0]
        # A new allocation. One registered at the same base was freed and
        # its address handed out again: unregister it now, so the daemon
        # stops holding memory the caller no longer has.
        for stale in [a for a, (b, _) in self.ids.items() if base and b == base]:
            self.client.unregister(self.ids.pop(stale)[1])
        region = projd.cuda_describe(ptr)  # refuses what cannot be shared, saying why
        while len(self.ids) >= self.limit:
            _, (_, old) = self.ids.popitem(last=False)
            self.client.unregister(old)
        buf = self.client.register_cuda_ipc(region.handle, region.uuid, region.alloc_size)
        self.ids[aid or region.handle] = (region.base, buf)
        return buf, region.offset

    def events_for(self, device: int, torch) -> "_Events":
        """The connection's events on device, made on first use."""
        ev = self.events.get(device)
        if ev is None:
            ev = self.events[device] = _Events(torch)
        return ev

    def clear(self) -> None:
        with self.lock:
            while self.ids:
                _, (_, buf) = self.ids.popitem()
                if not self.client.closed:
                    self.client.unregister(buf)


class _Events:
    """The two interprocess events of one connection and device: x_ready
    (recorded by apply(), waited on by the daemon), y_done (recorded by the
    daemon, waited on by the caller's stream). Reused by every apply(): a
    wait is bound to the record before it, and the lock of the cache keeps
    one apply() at a time per connection."""

    def __init__(self, torch):
        self.x_ready = torch.cuda.Event(interprocess=True)
        self.y_done = torch.cuda.Event(interprocess=True)
        self.x_handle = bytes(self.x_ready.ipc_handle())
        self.y_handle = bytes(self.y_done.ipc_handle())


# The cache lives on the Client it belongs to (an attribute), so it goes
# with the client: a table keyed by clients would hold them through the
# cache's own reference.
_registries_lock = threading.Lock()


def _registry(client: "projd.Client") -> _Registrations:
    with _registries_lock:
        r = getattr(client, "_projd_sglang_registrations", None)
        if r is None:
            r = _Registrations(client)
            client._projd_sglang_registrations = r
        return r


def release_registrations(client: "projd.Client") -> None:
    """Unregister every allocation cached for client (after empty_cache)."""
    with _registries_lock:
        r = getattr(client, "_projd_sglang_registrations", None)
        client._projd_sglang_registrations = None
    if r is not None:
        r.clear()


class ProjdLinearMethod:
    """An SGLang linear method whose matmul runs in projd (layer `layer`)."""

    def __init__(self, layer: str, client: "projd.Client"):
        if not isinstance(client, projd.Client):
            raise TypeError("client must be a projd.Client, not %s" % type(client).__name__)
        self.client = client
        self.L = client.layer(layer)  # KeyError naming the daemon's layers
        if client.info.backend != "cuda":
            raise ValueError(
                "projd at %s runs the %s backend; CUDA tensors need the cuda backend"
                % (client.url, client.info.backend)
            )
        _sglang_register(type(self))

    def create_weights(
        self,
        layer,
        input_size_per_partition,
        output_partition_sizes,
        input_size,
        output_size,
        params_dtype,
        **extra_weight_attrs,
    ):
        torch = _torch()
        n, k = sum(output_partition_sizes), input_size_per_partition
        if k != self.L.k or not 1 <= n <= self.L.n:
            raise ValueError(
                "SGLang layer of %d x %d (rows x input) does not fit projd layer %r (%d x %d): k must "
                "match and the rows be a prefix (tensor parallelism 1?)" % (n, k, self.L.name, self.L.n, self.L.k)
            )
        if params_dtype != torch.bfloat16:
            raise ValueError("projd computes in bf16; params_dtype is %s" % params_dtype)
        weight = torch.nn.Parameter(torch.empty(n, k, dtype=params_dtype, device="meta"), requires_grad=False)
        for key, value in dict({"input_dim": 1, "output_dim": 0}, **extra_weight_attrs).items():
            setattr(weight, key, value)
        layer.register_parameter("weight", weight)
        layer.projd_n = n

    def process_weights_after_loading(self, layer) -> None:
        return  # the daemon holds the weights

    def apply(self, layer, x, bias=None):
        torch = _torch()
        L, n = self.L, layer.projd_n
        if x.dtype != torch.bfloat16 or not x.is_cuda:
            raise TypeError("projd takes a bf16 CUDA tensor; x is %s on %s" % (x.dtype, x.device))
        if x.shape[-1] != L.k:
            raise ValueError("x has %d columns, projd layer %r takes %d" % (x.shape[-1], L.name, L.k))
        lead = x.shape[:-1]
        x2 = x.reshape(-1, L.k)
        if x2.stride(-1) != 1 or (x2.shape[0] > 1 and x2.stride(0) < L.k):
            x2 = x2.contiguous()
        m = x2.shape[0]
        y = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
        if m:
            ld = x2.stride(0) if m > 1 else L.k
            reg = _registry(self.client)
            lim = self.client.info.limits
            with reg.lock, torch.cuda.device(x.device):
                xb, xo = reg.lookup(x2.data_ptr())
                yb, yo = reg.lookup(y.data_ptr())
                ops = [
                    projd.Op(
                        layer=L.index, m=min(lim.max_m, m - i), n=n,
                        x_buf=xb, x_off=xo + i * ld * 2, x_ld=ld,
                        y_buf=yb, y_off=yo + i * n * 2, y_ld=n,
                    )
                    for i in range(0, m, lim.max_m)
                ]
                self._run(reg, torch, x.device.index, ops)
        y = y.reshape(*lead, n)
        if bias is not None:
            y += bias
        return y

    def _run(self, reg, torch, device, ops) -> None:
        """Send ops in requests of at most max_ops_per_request, after the
        work queued on the current stream (x is written by it, and y's block
        may have been in use by it) and before what follows on it: by the
        connection's events, or, where the daemon has none, a sync here and
        replies at completion. The caller holds reg.lock."""
        stream = torch.cuda.current_stream()
        per = self.client.info.limits.max_ops_per_request
        chunks = [ops[j : j + per] for j in range(0, len(ops), per)]
        if not reg.events_ok:
            stream.synchronize()
            for chunk in chunks:
                self.client.project(chunk)
            return
        ev = reg.events_for(device, torch)
        ev.x_ready.record(stream)
        launched = False
        try:
            for chunk in chunks:
                try:
                    self.client.project(chunk, flags=projd.PF_ACCEPT_REPLY,
                                        wait_event=ev.x_handle, signal_event=ev.y_handle)
                    launched = True
                except projd.ProjdError as e:
                    if e.status != projd.Status.E_FLAGS or launched:
                        raise
                    # No events here, and nothing ran: from now on the
                    # synchronous form, for this connection.
                    reg.events_ok = False
                    self._run(reg, torch, device, ops)
                    return
        finally:
            if launched:  # even on an error: what was launched reads x, writes y
                stream.wait_event(ev.y_done)
