"""projd_sglang — run an SGLang linear layer through projd.

Checked on the GPU host (make test-gpu) by tests/gpu/python_torch.sh:
projd on the cuda backend, torch tensors, every layer and m = 1-256,
against a float64 reference; and by tests/gpu/python_sglang.sh inside
SGLang's own linear layers (QKVParallelLinear with bias, RowParallel,
MergedColumnParallel, Replicated with skip_bias_add; SGLang 0.5.10),
built with quant_config() and loaded by SGLang's weight loaders, at
tensor parallelism 1. Both are skipped where torch, a GPU or SGLang is
missing (CI). SGLang's server itself has not run with it (its compiled
kernels need another torch than the GPU host's). It is written against
SGLang's LinearMethodBase (python/sglang/srt/layers/quantization/
base_config.py: create_weights(layer, input_size_per_partition,
output_partition_sizes, input_size, output_size, params_dtype,
**extra_weight_attrs) and apply(layer, x, bias=None)) and kept small so
that it can be read whole.

What it assumes:
  - projd runs the cuda backend on the GPU that holds x, and serves a layer
    whose k equals the SGLang layer's input_size_per_partition and whose n
    is at least sum(output_partition_sizes) (requests use the first n rows).
    Tensor parallelism 1: create_weights refuses a sharded layer (inputs or
    rows fewer than the layer's), whose rank's rows are not a prefix of the
    daemon's whole weights. The daemon loads the same checkpoint's weights
    (under its own config's layer names); check_weight(client, layer,
    tensor) says whether it does. projd_pack.py writes a Hugging Face
    checkpoint's projections fused as SGLang fuses them (qkv_proj,
    gate_up_proj), with a config that names each layer as SGLang names its
    module, which quant_config() maps by default.
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
    calls the daemon): run SGLang without CUDA graphs, decode's and the
    piecewise prefill graphs both (0.5.10: --disable-cuda-graph
    --disable-piecewise-cuda-graph, the second on by default there; later
    releases: --cuda-graph-backend-decode=disabled
    --cuda-graph-backend-prefill=disabled). An apply() while the current
    stream is capturing raises RuntimeError saying so (before anything is
    recorded, registered or sent).
  - Under torch.compile without fullgraph, apply() runs eagerly between
    the compiled parts (SGLang's piecewise CUDA graphs compile the model
    with fullgraph=True, which refuses it: that is one more reason to turn
    them off):
    create_weights makes the method's apply opaque to Dynamo
    (torch.compiler.disable). Traced, apply() broke the graph at its
    first call into libprojd and Dynamo resumed inside it, putting y's
    torch.empty into a compiled part: with CUDA graphs (the cudagraphs
    backend, mode="reduce-overhead") y then lived in the graph's pool and
    the next call overwrote a y already returned (measured, torch 2.11;
    tests/python/test_torch_gpu.py test_under_torch_compile).
  - The weights live in the daemon. create_weights registers `weight` on
    the meta device (shape and loader attributes as SGLang's unquantized
    method), so the model's loader finds the parameter and nothing is
    allocated; what the loader copies into it is dropped.
  - So the worker cannot change them. The loader is watched: each part it
    loads (a fused layer's shards) is fingerprinted at the first load
    (FINGERPRINT_LINES rows x columns of it); a later load of other
    weights (update_weights_from_disk, _from_tensor, _from_distributed)
    raises there, so the update fails (update_weights_from_disk then rolls
    back, loading the old weights, which passes), and marks the layer
    stale: its apply() and process_weights_after_loading raise until the
    daemon's weights are loaded again. SGLang used to report such an
    update a success while the daemon served the old weights. SGLang
    after 0.5.10 refuses every such update up front (the layer's
    _derived_weight_cache_error). Not seen: the "direct" load format of
    update_weights_from_tensor, which copies into the parameter without
    its loader. A daemon restarted on another model file (other weight
    digests for the layer) is refused at the reconnect: the worker's other
    weights are the old model's.
  - A bias is added to y after the daemon rounded x·Wᵀ to bf16 (one bf16
    add on the current stream): y = bf16(bf16(x·Wᵀ) + b). SGLang's own path
    (F.linear: cuBLASLt's bias epilogue, or a GEMM with beta = 1 on a
    bias-filled output) adds b to the fp32 sum and rounds once, so an
    element can differ from it by up to half a bf16 step of x·Wᵀ: many
    steps of y where b cancels most of x·Wᵀ (x·Wᵀ = 100.3, b = -100: 0.5
    here, 0.30078 there). The daemon serves y = x·W[:n]ᵀ only; a layer with
    a bias (Qwen2's qkv_proj) takes that second rounding.

Each allocation x or y lives in is registered with the daemon once (the
whole allocation, by its IPC handle; the tensor is addressed as an offset
in it) and cached per connection, keyed by the driver's buffer id of the
allocation (projd.cuda_allocation: one driver call per tensor and apply
once the allocation is known). A new cudaMalloc gets a new id; each new
registration first drops the registrations of allocations freed since
(one driver call per cached allocation). The daemon keeps registered
allocations mapped (and their memory alive) until they are evicted (least
recently used, when the connection's buffer limit comes near), released,
or freed (seen at the next registration): PyTorch also frees cached
segments on its own (an out-of-memory retry, its garbage collection
threshold), and a registration of a freed one holds its memory until the
next apply() registers something, so call release_registrations() after
torch.cuda.empty_cache() and when memory is tight. PyTorch's own retry
after an out-of-memory error frees its cached segments inside the
allocator, where nothing here runs: a segment the daemon holds does not
come back, so an allocation that the retry would have satisfied can still
fail. Leave that much headroom (SGLang's --mem-fraction-static), or call
release_registrations() before large allocations. A request keeps
its registrations from eviction until it is answered (the cache's lock is
held across the request: one client's applies run one at a time). An
evicted registration stays counted by the daemon while launched work still
reads it; a registration refused (E_LIMIT) after an eviction waits for the
connection's work to finish and is tried again (HELD_WAIT_S = 2 s at most).

When projd restarts (systemd's Restart=on-failure after a sticky CUDA
error), the connection is lost and every call on it fails with
-ECONNRESET. apply() then connects again (the same url, timeout and ring;
one new connection for all the methods that shared the lost one; while
projd is not back, no socket file or a refused one, it tries every 0.2 s
for RECONNECT_WAIT_S = 60 s), finds its layer there, registers x and y
anew and runs the request once more; y is written whole on the new
connection. Not when the lost connection had work unfinished (its last
y_done not done: the daemon replies at launch, so an earlier apply()'s y
may never have been written): then apply() raises RuntimeError, since
running again would compute from that memory, for as long as that work
reads unfinished; the caller's stream is then waiting on the y_done the
dead daemon was to record, so the worker itself needs a restart.
release_registrations(client) also releases what the connections that
replaced client registered. A
connection made here for a restart is closed when the last method leaves
it (at the next restart); the client passed in stays open, its owner's
to close. A method idle across two quick restarts finds the connection
it joins lost as well and moves on once more: one apply() tries at most
RECONNECT_TRIES = 3 connections. An apply() that fails for another
reason, or on its last try, raises.

Use: one projd.Client shared by every layer, one method per layer. With
SGLang's layers, quant_config(client) makes the QuantizationConfig that
hands them out by prefix (the daemon's layers named as SGLang's prefixes,
or a dict or function from prefix to the daemon's name)::

    client = projd.Client(ring=True)            # $PROJD_SOCKET or the default
    qc = quant_config(client)                   # or quant_config(client, {prefix: name})
    qkv = QKVParallelLinear(4096, 128, 32, 2, quant_config=qc,  # 4608 rows
                            prefix="model.layers.0.self_attn.qkv_proj")
    method = ProjdLinearMethod("o", client)     # or one method by hand

ring=True sends each projection through a shared-memory ring instead of
nng (PROTOCOL.md, "The ring"): the same requests and results without
nng's ~80-100 µs round trip, at the cost of spinning on machines of 4 or
more cores: apply()'s own thread while it waits for the reply (it takes
the reply off the ring itself), and a client thread for the daemon's
ring.spin_us (50 µs) after each reply. A model's other work between two
projections longer than ring.spin_us lets the daemon's ring threads sleep:
the next projection then pays their wake-ups (~40 µs on the H200 host;
bench/results/2026-12-01-s21-reap/). Without ring=True (or against a daemon
that refuses the ring) every apply goes over nng.

torch is imported on first use, so this module imports without it.
"""

import collections
import errno
import hashlib
import struct
import threading
import time
import warnings
import weakref

import projd

# The daemon's weight digests (STATS model.layers) by connection, read once
# per connection: what a method checks a restarted daemon against.
_digests = weakref.WeakKeyDictionary()

# Up to this many rows and columns of a loaded weight, evenly spaced, make
# its fingerprint (_fingerprint): enough that any real update (a training
# step moves every weight) changes it, cheap enough for every load.
FINGERPRINT_LINES = 64

__all__ = ["ProjdLinearMethod", "check_weight", "quant_config", "release_registrations"]


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


def _fingerprint(torch, t):
    """What a loaded weight (a tensor SGLang's weight loader is given)
    looks like: its shape and a hash of up to FINGERPRINT_LINES rows x
    columns of it, evenly spaced (the first and the last among them), as
    the bf16 the layer holds. Equal for the same weights loaded again (a
    rollback), from the host or a GPU; different for an update. The rows
    are picked by integer arithmetic, the same on every device (a float
    linspace may round an index differently on the GPU)."""
    t = t.detach()
    picked = t
    for dim in range(min(t.dim(), 2)):
        size = t.shape[dim]
        if size > FINGERPRINT_LINES:
            idx = torch.arange(FINGERPRINT_LINES) * (size - 1) // (FINGERPRINT_LINES - 1)
            picked = picked.index_select(dim, idx.to(t.device))
    values = picked.to(torch.bfloat16).view(torch.int16).cpu().reshape(-1).tolist()
    digest = hashlib.blake2b(struct.pack("<%dh" % len(values), *values), digest_size=16).digest()
    return (tuple(t.shape), digest)


def _part_name(args, kwargs) -> str:
    """Which part of a layer's weight a loader call loads, from its
    arguments after the tensor: a fused layer's shard ("q", 0), else the
    whole weight."""
    if not args and not kwargs:
        return "the whole weight"
    if len(args) == 1 and not kwargs:
        return "shard %r" % (args[0],)
    return "shard %r" % ((args, sorted(kwargs.items())),)


def _served_digests(client) -> dict:
    """client's weight digests by layer name, read once per connection
    ({} from a daemon, or a stand-in, that does not report them)."""
    try:
        return _digests[client]
    except (KeyError, TypeError):
        pass
    read = getattr(client, "weight_digests", None)
    try:
        found = dict(read()) if callable(read) else {}
    except (projd.ProjdError, ValueError, OSError):
        return {}  # unreadable now (a closed or lost connection): no check, not cached
    try:
        _digests[client] = found
    except TypeError:  # not weakly referable: read again next time
        pass
    return found


# How long a registration that met E_LIMIT waits, for the connection's work
# to finish and the daemon to let go of the evicted buffers that work held
# (it releases them off its event loop, soon after).
HELD_WAIT_S = 2.0
# ... and, once that work is done, how long REGISTER is tried again.
HELD_RELEASE_S = 0.25


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
        self.ops = None  # projd.PackedOps, made on first use
        # device -> tensors of requests that failed here once sent (a
        # timeout): the daemon may still run them, reading x and writing
        # y, so their memory must not go back to torch's allocator until a
        # later request on the connection has been waited for (it runs the
        # connection's requests in order).
        self.orphans = {}
        # Something was unregistered since the connection's work last read
        # done: the daemon may still count it (held by launched work).
        self.may_hold = False

    def lookup(self, ptr: int, device: "int | None" = None):
        """(buffer id, offset) for a device pointer, registering its
        allocation once (with device, the CUDA device that holds it, made
        current meanwhile). The caller holds self.lock until its request is
        answered, so no other thread evicts the ids it uses meanwhile."""
        aid, base = projd.cuda_allocation(ptr)
        key, region = aid, None
        if not aid:
            # No id from the driver: the IPC handle names the allocation
            # (what _register keys it by), and its base is the region's.
            region = projd.cuda_describe(ptr)
            key, base = region.handle, region.base
        known = self.ids.get(key)
        if known is not None:
            self.ids.move_to_end(key)
            return known[1], ptr - known[0]
        if device is not None:
            # Only a registration needs the device current (the IPC handle
            # is the current context's): switching costs ~5 µs per apply.
            with _torch().cuda.device(device):
                return self._register(ptr, aid, base)
        return self._register(ptr, aid, base, region)

    def _register(self, ptr: int, aid: int, base: int, region: "projd.CudaRegion | None" = None):
        # A new allocation, so others may have been freed (PyTorch frees
        # cached segments on its own: an out-of-memory retry, empty_cache),
        # their addresses unused or handed out again at any base.
        # Unregister every cached one whose base no longer holds it, so the
        # daemon stops holding memory the caller no longer has. One driver
        # call per cached allocation, only on this rare path.
        # (Entries keyed by their IPC handle, where the driver gave no id,
        # are dropped only when their base comes back.)
        for stale in [
            a
            for a, (b, _) in self.ids.items()
            if (base and b == base) or (isinstance(a, int) and projd.cuda_allocation(b)[0] != a)
        ]:
            self._unregister(stale)
        if region is None:  # described already where no device had to be made current
            region = projd.cuda_describe(ptr)  # refuses what cannot be shared, saying why
        while len(self.ids) >= self.limit:
            self._unregister(next(iter(self.ids)))  # the least recently used
        buf = self._register_region(region)
        self.ids[aid or region.handle] = (region.base, buf)
        return buf, region.offset

    def _unregister(self, key) -> None:
        """UNREGISTER the cached allocation key; dropped from the cache once
        the daemon has let it go (or lost it with the connection): one whose
        UNREGISTER failed otherwise (a timeout) stays, to be tried again,
        rather than be held by the daemon with nothing here naming it."""
        try:
            self.client.unregister(self.ids[key][1])
        except projd.ProjdError as e:
            if not (_lost(e) or _not_registered(e)):
                raise
        del self.ids[key]
        self.may_hold = True

    def _register_region(self, region: "projd.CudaRegion") -> int:
        """REGISTER region. A buffer this cache unregistered while launched
        work still reads it stays counted by the daemon until that work is
        done, so REGISTER can meet E_LIMIT with the cache under its limit
        (replies come at launch). Then, and only then (another E_LIMIT, such
        as a byte limit, no wait can mend): wait until the connection's
        last y_done on every device reads done (its work runs in order) and
        try again while the daemon lets the held buffers go, HELD_WAIT_S in
        all; then raise the E_LIMIT. Polled, not synchronized: y_done can
        sit behind another client's wait on the daemon's lane, and the
        caller holds the cache's lock meanwhile."""
        def register():
            return self.client.register_cuda_ipc(region.handle, region.uuid, region.alloc_size)

        try:
            return register()
        except projd.ProjdError as e:
            if e.status != projd.Status.E_LIMIT or not (self.may_hold and self.events):
                raise
            refused = e
        deadline = time.monotonic() + HELD_WAIT_S
        pause = 0.0005
        waiting = list(self.events.values())
        while True:
            waiting = [ev for ev in waiting if not _event_done(ev.y_done)]
            if not waiting and self.may_hold:
                # What was held is done with; the daemon lets it go within
                # milliseconds, so a refusal that outlasts HELD_RELEASE_S
                # is another limit.
                self.may_hold = False
                deadline = min(deadline, time.monotonic() + HELD_RELEASE_S)
            if not waiting:
                try:
                    return register()
                except projd.ProjdError as e:
                    if e.status != projd.Status.E_LIMIT:
                        raise
                    refused = e
            if time.monotonic() >= deadline:
                raise refused
            time.sleep(pause)
            pause = min(2 * pause, 0.02)

    def events_for(self, device: int, torch) -> "_Events":
        """The connection's events on device, made on first use."""
        ev = self.events.get(device)
        if ev is None:
            with torch.cuda.device(device):  # an event belongs to the current device
                ev = self.events[device] = _Events(torch)
        return ev

    def packed(self, count: int) -> "projd.PackedOps":
        """The connection's op array of at least count ops (reused: the
        caller holds self.lock)."""
        if self.ops is None or self.ops.capacity < count:
            self.ops = projd.PackedOps(count)
        return self.ops

    def clear(self) -> None:
        """Unregister every cached allocation, in place: the registry stays
        the client's, so an apply() that fetched it and waits for the lock
        registers into this one, which a later clear() releases."""
        with self.lock:
            while self.ids:
                key = next(iter(self.ids))
                if not self.client.closed:
                    try:
                        self.client.unregister(self.ids[key][1])
                        self.may_hold = True
                    except projd.ProjdError as e:
                        if not (_lost(e) or _not_registered(e)):
                            # Kept, as _unregister keeps it: the daemon
                            # may still map it (a timeout), and a later
                            # clear() or eviction tries again.
                            raise
                        # The daemon that held it is gone, and so is the
                        # registration: nothing left to release.
                    except ValueError:
                        if not self.client.closed:
                            raise
                        # A lost successor closed meanwhile (_leave): its
                        # registrations went with it.
                del self.ids[key]


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
# cache's own reference. It is made once per client and kept for good:
# release_registrations() empties it under its lock rather than replacing
# it, so an apply() that fetched it just before cannot register into a
# registry nobody releases any more.
_registries_lock = threading.Lock()


def _registry(client: "projd.Client") -> _Registrations:
    with _registries_lock:
        r = getattr(client, "_projd_sglang_registrations", None)
        if r is None:
            r = _Registrations(client)
            client._projd_sglang_registrations = r
        return r


def check_weight(client: "projd.Client", layer: str, weight) -> None:
    """Raise ValueError when the daemon's layer is not weight: the tensor
    as the checkpoint stores it (its dtype and shape; any device), e.g.
    from the model's safetensors file while SGLang loads it. The weights
    live in the daemon (create_weights keeps none here), so a daemon
    started on another checkpoint of the same shapes would otherwise serve
    wrong results without any error. Costs one copy of the tensor to the
    host and a CRC over it (about 1 GB/s)."""
    torch = _torch()
    raw = weight.detach().contiguous().cpu().view(torch.uint8)
    client.check_weight(layer, raw.reshape(-1).numpy())


def release_registrations(client: "projd.Client") -> None:
    """Unregister every allocation cached for client (after empty_cache).
    An apply() in progress on client finishes first (it holds the cache's
    lock until its request is answered); later ones register again."""
    while client is not None:
        with _registries_lock:
            r = getattr(client, "_projd_sglang_registrations", None)
            after = getattr(client, "_projd_sglang_successor", None)
        if r is not None:
            r.clear()
        client = after  # the connections that replaced it (reconnects)


def _answers(client: "projd.Client") -> bool:
    """Does the daemon still answer on client (a PING)?"""
    try:
        client.ping()
        return True
    except (projd.ProjdError, ValueError):
        return False


def _lost(e: "projd.ProjdError") -> bool:
    """Is e the error of a connection that projd dropped (it exited or
    restarted), or of one whose daemon is stopping (E_SHUTDOWN: it
    finishes the work it accepted, answers nothing new, and closes the
    connection half a second after its last reply)? Every later call on
    that Client fails the same way; a restart (systemctl restart, or a
    fatal device error's stop) always passes through the second."""
    return e.code == -errno.ECONNRESET or e.code == projd.Status.E_SHUTDOWN


def _not_registered(e: "projd.ProjdError") -> bool:
    """Is e an UNREGISTER's E_BUFFER: the connection holds no such buffer?
    What an UNREGISTER tried again after a timeout meets when the daemon
    had done the first one (it answers UNREGISTER on its event loop, so a
    timeout is mostly a late reply): the entry is released, not stuck."""
    return e.status == projd.Status.E_BUFFER


# How long a stopping daemon's accepted work may take to finish: its own
# bound on a drain (daemon/DAEMON.md: 60 s, then it exits 1).
DRAIN_WAIT_S = 60.0


def _drained(reg: "_Registrations", device: int) -> bool:
    """Wait (polled, DRAIN_WAIT_S at most) for the last request of reg's
    connection on device to finish on a daemon that is stopping: it runs
    what it accepted to the end. True once done; False if the wait ran
    out or the daemon died with it unfinished."""
    ev = reg.events.get(device)
    if ev is None:
        return True
    deadline = time.monotonic() + DRAIN_WAIT_S
    pause = 0.0005
    while not _event_done(ev.y_done):
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(2 * pause, 0.05)
    return True


def _event_done(event) -> bool:
    """Has the last record of event (never recorded: yes) run? An error of
    the recording daemon's work reads as not done."""
    try:
        return bool(event.query())
    except Exception:
        return False


def _lost_work_done(reg: "_Registrations", device: int) -> bool:
    """Had every request of the lost connection reg on device finished?
    Its y_done event was recorded by the daemon after each request's work;
    never recorded, it reads done."""
    ev = reg.events.get(device)
    return ev is None or _event_done(ev.y_done)


# How long a reconnect waits for projd to be back: systemd restarts it
# RestartSec=2 s after it exits, and its start (model, graphs) takes a few
# seconds more; meanwhile its socket file is missing or refuses.
RECONNECT_WAIT_S = 60.0
# How many connections one apply() tries: its own, then successors (a
# method idle across two quick restarts finds the first successor lost too).
RECONNECT_TRIES = 3


def _connect_when_back(url: str, timeout_ms: int, ring: bool) -> "projd.Client":
    """_connect, retried every 0.2 s for RECONNECT_WAIT_S while projd is
    not there (no socket file, or one nobody listens on), is still
    stopping (it answers new connections E_SHUTDOWN, or closes them) or
    still counts the lost connection against its limits (E_LIMIT)."""
    deadline = time.monotonic() + RECONNECT_WAIT_S
    while True:
        try:
            return _connect(url, timeout_ms, ring)
        except projd.ProjdError as e:
            # E_SHUTDOWN: the old daemon, still draining, refused the new
            # connection and said so; E_LIMIT: a daemon that goes on counts
            # the lost connection until its running work is done;
            # ECONNRESET: it closed it without a word (a daemon from before
            # it said why, or one with many refusals waiting).
            back_soon = (-errno.ENOENT, -errno.ECONNREFUSED, -errno.ECONNRESET, projd.Status.E_SHUTDOWN,
                         projd.Status.E_LIMIT)
            if e.code not in back_soon or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)


def _connect(url: str, timeout_ms: int, ring: bool) -> "projd.Client":
    c = projd.Client(url, name="projd_sglang", timeout_ms=timeout_ms)
    if ring and not c.ring_active:
        try:
            c.attach_ring()
        except projd.ProjdError as e:
            # nng serves the same requests, at a longer round trip: said,
            # not silent
            warnings.warn("projd at %s refused the ring (%s): requests go over nng" % (url, e.message), RuntimeWarning)
    return c


def _successor(client: "projd.Client", settings) -> "projd.Client":
    """The connection that replaces client (lost), with the caller's method
    counted on it. One is made per restart and shared by every method that
    was on the lost one (each with its own registrations and events on it);
    a method that missed restarts (the successor it would take has been
    closed since, its methods gone on to the next) follows the chain to the
    newest open connection, so all methods end up on one. settings: (url,
    timeout_ms, ring) to connect with."""
    with _successors_lock:
        last, new = client, getattr(client, "_projd_sglang_successor", None)
        while new is not None and new.closed:
            last, new = new, getattr(new, "_projd_sglang_successor", None)
        if new is None:
            new = _connect_when_back(*settings)
            # Made here, so closed here once no method is on it any more
            # (_leave); the client the caller passed in stays the caller's.
            new._projd_sglang_users = 0
            # On the chain's end: release_registrations(first client) walks
            # the chain to reach it.
            last._projd_sglang_successor = new
        # Counted under the same lock as the lookup: another method leaving
        # new meanwhile cannot close it under this one.
        new._projd_sglang_users += 1
        return new


def _leave(client: "projd.Client") -> None:
    """One method left client (lost, or refused after a restart). A
    successor this module made is closed when its last method leaves it:
    each restart would otherwise keep one dead socket (and its registry)
    for the life of the process. Counting methods, not closing at the first
    move, keeps the others' calls on it failing as a lost connection (and
    so reconnecting) instead of as a closed client."""
    with _successors_lock:
        users = getattr(client, "_projd_sglang_users", None)
        if users is None:
            return  # the caller's own client
        client._projd_sglang_users = users - 1
        if users > 1:
            return
    # The successor chain stays on client: release_registrations(first
    # client) and _successor walk through it. What it registered went with
    # its daemon; its registry (and the interprocess events in it) goes now.
    client.close()
    with _registries_lock:
        client.__dict__.pop("_projd_sglang_registrations", None)


_successors_lock = threading.Lock()


def _device_uuid(torch, index):
    """The 16 bytes of CUDA device index's UUID as torch reports it, or None
    where this torch does not say (the check below is then left out)."""
    try:
        u = torch.cuda.get_device_properties(index).uuid
    except (AttributeError, RuntimeError, AssertionError):
        return None
    raw = getattr(u, "bytes", None)
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        return bytes(raw)
    text = str(u).replace("GPU-", "").replace("-", "")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return None
    return raw if len(raw) == 16 else None


def _check_device(client, torch):
    """The daemon's GPU must be the worker's current one (a data-parallel
    worker's schedulers share one $PROJD_SOCKET but each has its own GPU):
    said when the layer is built, not as E_REGISTER at the first forward."""
    want = bytes(getattr(client.info, "device_uuid", b""))
    if not any(want) or not torch.cuda.is_available():
        return
    here = torch.cuda.current_device()
    have = _device_uuid(torch, here)
    if have is not None and have != want:
        raise ValueError(
            "projd at %s serves another GPU than this worker's cuda:%d: give each GPU's worker its "
            "own instance (projd@N, PROJD_SOCKET=ipc:///run/projd/projd-N.sock)" % (client.url, here)
        )


class ProjdLinearMethod:
    """An SGLang linear method whose matmul runs in projd (layer `layer`)."""

    # The connection and the daemon's layer on it, one attribute: apply()
    # reads both at once while another thread's reconnect may replace
    # them (two attributes could be read as the old connection with the
    # new daemon's layer index).
    _conn = (None, None)

    @property
    def client(self) -> "projd.Client":
        return self._conn[0]

    @client.setter
    def client(self, client) -> None:
        self._conn = (client, self._conn[1])

    @property
    def L(self):
        return self._conn[1]

    @L.setter
    def L(self, L) -> None:
        self._conn = (self._conn[0], L)

    def __init__(self, layer: str, client: "projd.Client"):
        if not isinstance(client, projd.Client):
            raise TypeError("client must be a projd.Client, not %s" % type(client).__name__)
        self.client = client
        self.L = client.layer(layer)  # KeyError naming the daemon's layers
        # How to connect again when projd restarts (Restart=on-failure
        # after a sticky CUDA error): the lost connection fails every call.
        self._settings = (client.url, client.timeout_ms, client.ring_active)
        # One move to a successor at a time: two threads applying this
        # method through a restart must not each move (the second would
        # leave the first's new connection under it).
        self._move_lock = threading.Lock()
        if client.info.backend != "cuda":
            raise ValueError(
                "projd at %s runs the %s backend; CUDA tensors need the cuda backend"
                % (client.url, client.info.backend)
            )
        # What a restarted daemon must still serve for the layer (_reconnect).
        self._digest = _served_digests(client).get(self.L.name)
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
        if k != input_size or n != output_size:
            # A shard of a layer split over GPUs: this rank's rows (its q, k
            # and v heads) are not the first rows of the daemon's weights,
            # which hold the whole layer, so a prefix would be wrong rows.
            raise ValueError(
                "SGLang layer sharded by tensor parallelism (this rank: %d of %d rows, %d of %d inputs); "
                "projd serves whole layers: run with tensor parallelism 1" % (n, output_size, k, input_size)
            )
        if k != self.L.k or not 1 <= n <= self.L.n:
            raise ValueError(
                "SGLang layer of %d x %d (rows x input) does not fit projd layer %r (%d x %d): k must "
                "match and the rows be a prefix (tensor parallelism 1?)" % (n, k, self.L.name, self.L.n, self.L.k)
            )
        if params_dtype != torch.bfloat16:
            raise ValueError("projd computes in bf16; params_dtype is %s" % params_dtype)
        _check_device(self.client, torch)
        weight = torch.nn.Parameter(torch.empty(n, k, dtype=params_dtype, device="meta"), requires_grad=False)
        attrs = dict({"input_dim": 1, "output_dim": 0}, **extra_weight_attrs)
        if callable(attrs.get("weight_loader")):
            attrs["weight_loader"] = self._watched_loader(layer, attrs["weight_loader"])
        for key, value in attrs.items():
            setattr(weight, key, value)
        layer.register_parameter("weight", weight)
        layer.projd_n = n
        layer._projd_parts = {}  # the first load's fingerprint of each part
        layer._projd_stale = set()  # parts loaded since with other weights
        # SGLang (after 0.5.10) refuses every online weight update of a model
        # holding a module with this attribute, before it changes anything.
        layer._derived_weight_cache_error = (
            "projd serves layer %r's weights from its own model file; to change them, restart "
            "the daemon on the new file and the worker with it" % self.L.name
        )
        self._rows = n  # what a successor's layer must still hold (_reconnect)
        self._opaque_to_compile(torch)

    def _opaque_to_compile(self, torch) -> None:
        """Make this method's apply() one Dynamo runs as it is instead of
        tracing into it (see the module's notes). Once per method; a torch
        without torch.compiler.disable (before 2.2) has nothing to trace."""
        disable = getattr(getattr(torch, "compiler", None), "disable", None)
        # A marker, not "apply" in __dict__: SGLang's LinearBase may have
        # wrapped apply on the instance already (its kernel API logging,
        # SGLANG_KERNEL_API_LOGLEVEL), and that wrapper must be opaque too.
        if disable is not None and not self.__dict__.get("_projd_opaque", False):
            self.apply = disable(self.apply)
            self._projd_opaque = True

    def _watched_loader(self, layer, load):
        """SGLang's weight loader for layer's meta weight (what it copies
        there is dropped: the daemon holds the weights), watching what it
        is given. The first load records each part's fingerprint (a part:
        the loader's arguments after the tensor, as a QKV layer's "q", "k",
        "v"); a later load of a part with another fingerprint marks the
        layer stale, since the daemon goes on serving the weights it
        loaded: update_weights_from_disk, _from_tensor or _from_distributed
        would otherwise report success while the worker computed with the
        old projections beside the new rest of the model. That load raises
        (so does the update), and the stale layer's apply() and
        process_weights_after_loading raise too, until the same parts are
        loaded with the daemon's weights again (SGLang's rollback of the
        failed update does)."""
        ref = weakref.ref(layer)

        def load_watched(param, loaded_weight, *args, **kwargs):
            lay = ref()
            if lay is not None and hasattr(lay, "_projd_parts"):
                part = _part_name(args, kwargs)
                seen = _fingerprint(_torch(), loaded_weight)
                if not getattr(lay, "projd_loaded", False):
                    lay._projd_parts[part] = seen
                elif lay._projd_parts.get(part) == seen:
                    lay._projd_stale.discard(part)
                else:
                    # The update fails here, at its first part the daemon
                    # does not serve: update_weights_from_disk then rolls
                    # back; _from_tensor / _from_distributed (SGLang 0.5.10,
                    # which runs no post-processing after them) would
                    # otherwise have reported success.
                    lay._projd_stale.add(part)
                    raise self._stale_error(lay, "cannot be updated")
            return load(param, loaded_weight, *args, **kwargs)

        load_watched.__wrapped__ = load
        return load_watched

    def _stale_error(self, layer, what: str) -> RuntimeError:
        return RuntimeError(
            "projd: layer %r %s: the worker was given other weights for it (%s) than the daemon "
            "serves from its model file, which the worker cannot change; to use new weights, "
            "restart the daemon on the new file and the worker with it"
            % (self.L.name, what, ", ".join(sorted(layer._projd_stale)))
        )

    def process_weights_after_loading(self, layer) -> None:
        # The first call ends the first load (the parts' fingerprints are
        # recorded). A later one ends a reload (update_weights_from_disk):
        # refused when it loaded other weights (the layer is stale), so
        # that SGLang answers with a rollback, loading the old weights
        # again, which clears the mark and calls this once more (then it
        # passes, or the rollback would fail too and end the engine).
        if not getattr(layer, "projd_loaded", False):
            layer.projd_loaded = True
            return
        if getattr(layer, "_projd_stale", None):
            raise self._stale_error(layer, "cannot be reloaded")

    def restore_weights_before_loading(self, layer) -> None:
        # SGLang after 0.5.10 calls this on every quantized module before a
        # weight update and in its rollback; it refuses the update itself
        # first (the layer's _derived_weight_cache_error). Nothing to
        # restore: the loads are judged by what they carry (_watched_loader).
        return None

    def apply(self, layer, x, bias=None):
        torch = _torch()
        if torch.cuda.is_current_stream_capturing():
            # Captured, the event record and the waits would not run now
            # (the daemon's wait fails with a CUDA capture error), and a
            # replay of the graph would not call the daemon at all.
            raise RuntimeError(
                "projd: apply() cannot be captured in a CUDA graph (it calls the daemon); "
                "run SGLang without CUDA graphs (0.5.10: --disable-cuda-graph "
                "--disable-piecewise-cuda-graph; later: --cuda-graph-backend-decode=disabled "
                "--cuda-graph-backend-prefill=disabled)"
            )
        if getattr(layer, "_projd_stale", None):
            raise self._stale_error(layer, "is stale")
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
            device = x.get_device()
            for attempt in range(max(1, RECONNECT_TRIES)):
                # This attempt's connection and layer, read once: another
                # thread's reconnect may move self.client meanwhile, and
                # buffer ids registered on one connection mean other
                # memory (or nothing) on the next.
                client, L = self._conn
                reg = _registry(client)
                try:
                    with reg.lock:
                        # A lookup that fails (a buffer CUDA cannot share,
                        # a REGISTER refused) has sent no request: nothing
                        # of this call is kept then.
                        xb, xo = reg.lookup(x2.data_ptr(), device)
                        yb, yo = reg.lookup(y.data_ptr(), device)
                        try:
                            self._run(reg, client, L, torch, device, (xb, xo, ld, yb, yo, n), m)
                        except projd.ProjdError as e:
                            if e.code < 0:  # failed here, maybe once sent
                                reg.orphans.setdefault(device, []).append((x, x2, y))
                            raise
                        # The stream waits for this request, and so for
                        # every earlier one of the connection.
                        reg.orphans.pop(device, None)
                    break
                except ValueError:
                    # Another thread moved this method to a successor and
                    # closed the connection read above: go on there.
                    if attempt >= RECONNECT_TRIES - 1 or not client.closed or self.client is client:
                        raise
                except projd.ProjdError as e:
                    if attempt >= RECONNECT_TRIES - 1:
                        raise
                    # The ring dropped by a daemon that still serves the
                    # connection (ECONNRESET too): again on it, over nng;
                    # it runs the connection's requests in order, so the
                    # stream's wait for this one covers the dropped one.
                    if e.code == -errno.ECONNRESET and _answers(client):
                        continue
                    # Again on the successor, which another method may have
                    # joined before a second restart lost it too.
                    if not _lost(e):
                        raise
                    # Replies come at launch, so the daemon may have died
                    # with work it had answered unfinished: an earlier
                    # apply()'s y, maybe this x. The connection's work runs
                    # in order, so its last y_done record done means all
                    # of it was; otherwise running again would compute
                    # from unwritten memory, silently.
                    # A daemon that is stopping (E_SHUTDOWN) still runs what
                    # it accepted: wait for that, then move on.
                    stopping = e.code == projd.Status.E_SHUTDOWN
                    if not (_drained(reg, device) if stopping else _lost_work_done(reg, device)):
                        raise RuntimeError(
                            "projd was lost with work it had accepted still unfinished (an earlier "
                            "apply()'s output may never have been written); not retried"
                        ) from e
                    # projd restarted: y is rewritten whole on a new
                    # connection (nothing of the lost one's work is kept).
                    self._reconnect(client)
        y = y.reshape(*lead, n)
        if bias is not None:
            y += bias
        return y

    def _reconnect(self, lost: "projd.Client") -> None:
        """Move from lost to the connection that replaces it (made by the
        first method to find it lost), and find the layer there again, of
        the same k and at least the rows this method serves (a daemon
        restarted with another config must not be read with the old
        strides). A thread that finds this method moved already (another
        thread's reconnect) stays on the new connection."""
        with self.__dict__.setdefault("_move_lock", threading.Lock()):
            if self.client is not lost:
                return
            new = _successor(lost, self._settings)
            try:
                if new.info.backend != "cuda":
                    raise ValueError("projd at %s came back with the %s backend" % (new.url, new.info.backend))
                L = new.layer(self.L.name)
                rows = getattr(self, "_rows", self.L.n)
                if L.k != self.L.k or L.n < rows:
                    raise ValueError(
                        "projd at %s came back with layer %r of %d x %d (rows x input); this method "
                        "serves %d x %d" % (new.url, L.name, L.n, L.k, rows, self.L.k)
                    )
                # A daemon restarted on another model file: the worker's other
                # weights (embeddings, norms, the LM head) are still the old
                # model's, so computing on would mix two models unseen.
                was, now = getattr(self, "_digest", None), _served_digests(new).get(L.name)
                if was is not None and now is not None and was != now:
                    raise ValueError(
                        "projd at %s came back serving other weights for layer %r (digest %08x, "
                        "was %08x): the worker holds the old model's other weights; restart it"
                        % (new.url, L.name, now, was)
                    )
            except BaseException:
                _leave(new)  # this method stays on lost
                raise
            self._conn = (new, L)
            # Tensors kept for requests that failed on lost once sent: once
            # the lost connection's work on their device reads done (apply()
            # checks that before it reconnects), nothing can still read or
            # write them, and the registry of a client the caller passed in
            # is not used again, so they would be kept for good.
            reg = lost.__dict__.get("_projd_sglang_registrations")
            if reg is not None:
                with reg.lock:
                    for device in [d for d in reg.orphans if _lost_work_done(reg, d)]:
                        del reg.orphans[device]
        _leave(lost)

    def _requests(self, reg, client, L, xy, m):
        """The ops of m rows (at most max_m per op, max_ops_per_request per
        request) on client's layer L, packed into the connection's op array
        request by request: yields each request's op count. The caller
        holds reg.lock."""
        xb, xo, ld, yb, yo, n = xy
        lim = client.info.limits
        step, per = lim.max_m, lim.max_ops_per_request
        ops = reg.packed(min(per, -(-m // step)))
        row, index = 0, L.index
        while row < m:
            count = 0
            while row < m and count < per:
                ops.set(count, index, min(step, m - row), n, xb, xo + row * ld * 2, ld, yb, yo + row * n * 2, n)
                row += step
                count += 1
            yield ops, count

    def _run(self, reg, client, L, torch, device, xy, m) -> None:
        """Send the ops of m rows after the work queued on the current
        stream (x is written by it, and y's block may have been in use by
        it) and before what follows on it: by the connection's events, or,
        where the daemon has none, a sync here and replies at completion.
        The caller holds reg.lock."""
        stream = torch.cuda.current_stream(device)
        if not reg.events_ok:
            stream.synchronize()
            for ops, count in self._requests(reg, client, L, xy, m):
                client.project_packed(ops, count)
            return
        ev = reg.events_for(device, torch)
        ev.x_ready.record(stream)
        launched = False
        try:
            for ops, count in self._requests(reg, client, L, xy, m):
                try:
                    client.project_packed(ops, count, projd.PF_ACCEPT_REPLY, ev.x_handle, ev.y_handle)
                    launched = True
                except projd.ProjdError as e:
                    if e.status != projd.Status.E_FLAGS or launched:
                        raise
                    # No events here, and nothing ran: from now on the
                    # synchronous form, for this connection (said once: each
                    # apply() now waits for the stream).
                    reg.events_ok = False
                    warnings.warn(
                        "projd at %s takes no client events (%s): apply() synchronizes the stream "
                        "before each request from now on" % (client.url, e.message),
                        RuntimeWarning,
                    )
                    self._run(reg, client, L, torch, device, xy, m)
                    return
        finally:
            if launched:  # even on an error: what was launched reads x, writes y
                stream.wait_event(ev.y_done)


def quant_config(client: "projd.Client", layers=None):
    """An SGLang QuantizationConfig whose linear layers run in projd: pass it
    as the quant_config of a model class or of SGLang's linear layers
    (sglang.srt.layers.linear), which ask it for each layer's method by the
    layer's prefix (its name in the state dict, e.g.
    "model.layers.0.self_attn.qkv_proj").

    layers says which daemon layer serves a prefix: a dict prefix -> daemon
    layer name, a callable prefix -> name or None, or None (the default):
    the daemon's layer named as the prefix, where it serves one (give such
    a layer "tuned_as" in the daemon's config, config/CONFIG.md, to run
    the tuned engines of the reference layer of its shape). A linear
    layer that maps to no daemon layer (None or "") keeps SGLang's own
    method (UnquantizedLinearMethod: its weights on this GPU, as without
    projd); a name the daemon does not serve raises KeyError, here for a
    dict's names and when the layer is built for a callable's. Other
    layers (embeddings, the LM head, fused MoE experts) get None, which
    SGLang takes as its unquantized method. Each linear layer gets a
    ProjdLinearMethod of its own, all on client. A daemon serves at most
    1024 layers (model.layers in its config, each a host and device copy
    of its weights); linears it does not serve stay with SGLang.

    SGLang's server builds its QuantizationConfig from --quantization
    (only the names SGLang registered) in scheduler processes it spawns,
    so nothing here reaches `python -m sglang.launch_server` yet: this is
    for code that builds the model itself (tests/python/test_sglang_gpu.py
    does it with SGLang's layers). A model must call each linear's
    quant_method.apply; one that reads .weight itself (DeepSeek-V2's
    fused_qkv_a_proj_with_mqa) finds a meta tensor. A speculative draft
    model would be named like the target's first layers: give it its own
    method (SGLang: --speculative-draft-model-quantization unquant).
    Needs SGLang importable."""
    from sglang.srt.layers.linear import LinearBase
    from sglang.srt.layers.quantization.base_config import QuantizationConfig
    from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod

    if not isinstance(client, projd.Client):
        raise TypeError("client must be a projd.Client, not %s" % type(client).__name__)
    if layers is None:
        served = {L.name for L in client.layers}

        def name_for(prefix):
            return prefix if prefix in served else None

    elif isinstance(layers, dict):
        for name in set(layers.values()):
            if name:
                client.layer(name)  # a name the daemon does not serve: KeyError now, naming them
        name_for = layers.get
    elif callable(layers):
        name_for = layers
    else:
        raise TypeError("layers must be None, a dict or a callable, not %s" % type(layers).__name__)

    class ProjdQuantConfig(QuantizationConfig):
        def get_name(self):
            return "projd"

        def get_supported_act_dtypes(self):
            return [_torch().bfloat16]

        @classmethod
        def get_min_capability(cls):
            return 90  # the cuda backend's kernels are built for sm_90a

        @staticmethod
        def get_config_filenames():
            return []

        @classmethod
        def from_config(cls, config):
            raise ValueError("projd's SGLang config is made by projd_sglang.quant_config(client, layers)")

        def get_quant_method(self, layer, prefix):
            if not isinstance(layer, LinearBase):
                return None
            name = name_for(prefix)
            if not name:
                return UnquantizedLinearMethod()
            return ProjdLinearMethod(name, client)

        def get_scaled_act_names(self):
            return []

    return ProjdQuantConfig()
