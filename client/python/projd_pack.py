#!/usr/bin/env python3
"""projd_pack — a Hugging Face checkpoint's dense projections as projd serves them.

A Hugging Face checkpoint stores q, k and v (and gate and up) as separate
tensors, often across several files (model-00001-of-00004.safetensors and
an index); SGLang fuses them into qkv_proj and gate_up_proj, and projd
serves one tensor a layer. This tool writes one safetensors file with the
fused tensors, rows in SGLang's order (q, k, v; gate, up), and a projd
configuration naming each layer as SGLang names its module
(model.layers.3.self_attn.qkv_proj), which projd_sglang.quant_config maps
by default. Bytes are copied, never converted: the file holds exactly the
checkpoint's values, so projd_sglang.check_weight on the fused tensor
SGLang loaded agrees with the daemon.

    python3 projd_pack.py /models/Llama-3-8B /var/lib/projd/llama8b.safetensors \\
        --config /etc/projd/llama8b.json

With --tune-config FILE it also writes a configuration of one layer of
each kind and shape (a model's decoder layers repeat four shapes) for the
tuner, and gives every layer its tuned_as, so that one tuned table serves
them all:

    projd-bench --config FILE --tune /etc/projd/llama8b-h200.json   # on the GPU host
    # then "tuning": {"table": "/etc/projd/llama8b-h200.json"} in the main configuration

Needs only the Python standard library. Streams the tensors (64 MiB at a
time), so memory stays small whatever the model's size.
"""

import argparse
import json
import os
import re
import struct
import sys

# The projections a decoder layer has, as SGLang's modules name them, and
# the checkpoint tensors each is made of, in row order.
GROUPS = (
    ("self_attn.qkv_proj", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
    ("self_attn.o_proj", ("self_attn.o_proj",)),
    ("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj")),
    ("mlp.down_proj", ("mlp.down_proj",)),
)
MAX_LAYERS = 1024  # PJ_CFG_MAX_LAYERS: what one projd serves
CHUNK = 64 << 20
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4}

_LAYER_RE = re.compile(r"^(?P<prefix>.*\.layers\.(?P<index>\d+))\.(?P<rest>(?:self_attn|mlp)\.\w+)\.weight$")


class PackError(Exception):
    """What is wrong with the checkpoint or the arguments, said whole."""


class Tensor:
    __slots__ = ("name", "path", "dtype", "shape", "begin", "end")

    def __init__(self, name, path, dtype, shape, begin, end):
        self.name, self.path, self.dtype, self.shape, self.begin, self.end = name, path, dtype, shape, begin, end

    @property
    def nbytes(self):
        return self.end - self.begin


def read_header(path):
    """The tensors of one safetensors file, their data's byte ranges made
    absolute (the file: 8-byte little-endian header length, JSON, data)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise PackError("%s: not a safetensors file (shorter than its 8-byte header length)" % path)
        (hlen,) = struct.unpack("<Q", head)
        size = os.fstat(f.fileno()).st_size
        if hlen > min(size - 8, 100 << 20):
            raise PackError("%s: header length %d does not fit the file (%d bytes)" % (path, hlen, size))
        try:
            header = json.loads(f.read(hlen).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise PackError("%s: the header is not JSON: %s" % (path, e)) from None
    base = 8 + hlen
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            a, b = t["data_offsets"]
            out[name] = Tensor(name, path, t["dtype"], tuple(t["shape"]), base + a, base + b)
        except (KeyError, TypeError, ValueError):
            raise PackError("%s: tensor %s: no dtype, shape and data_offsets" % (path, name)) from None
        if out[name].end > size:
            raise PackError("%s: tensor %s ends at byte %d, past the file's %d" % (path, name, out[name].end, size))
    return out


def checkpoint_files(src):
    """The safetensors files of a checkpoint: a file, or a directory (its
    model.safetensors.index.json's files when it has one, else every
    *.safetensors in it)."""
    if os.path.isfile(src):
        return [src]
    if not os.path.isdir(src):
        raise PackError("%s: no such file or directory" % src)
    index = os.path.join(src, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            try:
                weight_map = json.load(f)["weight_map"]
            except (ValueError, KeyError) as e:
                raise PackError("%s: no weight_map (%s)" % (index, e)) from None
        return [os.path.join(src, name) for name in sorted(set(weight_map.values()))]
    files = sorted(os.path.join(src, n) for n in os.listdir(src) if n.endswith(".safetensors"))
    if not files:
        raise PackError("%s: no *.safetensors files and no model.safetensors.index.json" % src)
    return files


def plan(tensors, only=None):
    """[(layer name, [pieces])] in decoder-layer order: each GROUPS entry a
    decoder layer has whole. A group with some pieces but not all is an
    error (a checkpoint this tool does not understand), not skipped."""
    by_layer = {}
    for name, t in tensors.items():
        m = _LAYER_RE.match(name)
        if m:
            by_layer.setdefault((int(m.group("index")), m.group("prefix")), {})[m.group("rest")] = t
    layers = []
    for (index, prefix), parts in sorted(by_layer.items()):
        for fused, pieces in GROUPS:
            have = [p for p in pieces if p in parts]
            if fused in parts and fused not in pieces:  # already fused in the checkpoint
                have, got = [fused], [parts[fused]]
            else:
                got = [parts[p] for p in have]
            if not have:
                continue
            if have != [fused] and len(have) != len(pieces):
                raise PackError(
                    "%s: has %s but not %s: cannot make %s"
                    % (prefix, ", ".join(have), ", ".join(p for p in pieces if p not in have), fused)
                )
            name = "%s.%s" % (prefix, fused)
            if only and not re.search(only, name):
                continue
            check_pieces(name, got)
            layers.append((name, got))
    if not layers:
        raise PackError("no decoder-layer projections (*.layers.N.self_attn.q_proj.weight, ...) found")
    if len(layers) > MAX_LAYERS:
        raise PackError(
            "%d layers; one projd serves at most %d (choose some with --only, e.g. --only 'layers\\.([0-9]|1[0-5])\\.')"
            % (len(layers), MAX_LAYERS)
        )
    return layers


def check_pieces(name, pieces):
    first = pieces[0]
    for t in pieces:
        if t.dtype not in DTYPE_BYTES:
            raise PackError("%s: %s is %s; projd serves BF16, F16 or F32" % (name, t.name, t.dtype))
        if len(t.shape) != 2:
            raise PackError("%s: %s has shape %s, not [N, K]" % (name, t.name, list(t.shape)))
        if t.nbytes != t.shape[0] * t.shape[1] * DTYPE_BYTES[t.dtype]:
            raise PackError("%s: %s holds %d bytes, not %s x %s" % (name, t.name, t.nbytes, t.dtype, list(t.shape)))
        if t.dtype != first.dtype or t.shape[1] != first.shape[1]:
            raise PackError(
                "%s: %s is %s %s but %s is %s %s: rows of one layer need one dtype and K"
                % (name, t.name, t.dtype, list(t.shape), first.name, first.dtype, list(first.shape))
            )


def write(out_path, layers, source, progress=None):
    """The fused file, written to out_path + ".tmp" and renamed: a reader
    never sees half a file."""
    header, offset = {"__metadata__": {"format": "pt", "projd_pack": source}}, 0
    for name, pieces in layers:
        rows = sum(t.shape[0] for t in pieces)
        nbytes = sum(t.nbytes for t in pieces)
        header[name + ".weight"] = {
            "dtype": pieces[0].dtype,
            "shape": [rows, pieces[0].shape[1]],
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data 8-byte aligned
    tmp = out_path + ".tmp"
    done, total, shown = 0, offset, -1
    handles = {}
    try:
        with open(tmp, "wb") as out:
            out.write(struct.pack("<Q", len(text)) + text)
            for _, pieces in layers:
                for t in pieces:
                    src = handles.get(t.path)
                    if src is None:
                        src = handles[t.path] = open(t.path, "rb")
                    src.seek(t.begin)
                    left = t.nbytes
                    while left:
                        chunk = src.read(min(CHUNK, left))
                        if not chunk:
                            raise PackError("%s: ends inside tensor %s" % (t.path, t.name))
                        out.write(chunk)
                        left -= len(chunk)
                        done += len(chunk)
                        pct = done * 100 // total if total else 100
                        if progress and pct // 5 != shown:
                            shown = pct // 5
                            progress("projd_pack: %3d%% (%.1f of %.1f GiB)" % (pct, done / 2**30, total / 2**30))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        for h in handles.values():
            h.close()
    return total


def config(out_path, layers, tuned=None):
    """A projd configuration (applied on top of the built-in defaults)
    serving the file: every layer named as SGLang names its module, and
    with tuned (layer name -> tuning name) each one's tuned_as."""
    entries = []
    for name, _ in layers:
        e = {"name": name, "tensor": name + ".weight"}
        if tuned:
            e["tuned_as"] = tuned[name]
        entries.append(e)
    return {"model": {"path": os.path.abspath(out_path), "layers": entries}}


def tuning_layers(layers):
    """One layer of each kind and shape, for the tuner (projd-bench
    --config): the decoder layers of a model repeat a few shapes, and a
    tuning table's entries serve every layer of their shape through
    tuned_as. Returns (tune config's layers, layer name -> tuning name);
    a kind with two shapes gets the shape in the second's name."""
    first, tuned = {}, {}
    for name, pieces in layers:
        kind = name.split(".layers.", 1)[1].split(".", 1)[1]  # self_attn.qkv_proj
        shape = (sum(t.shape[0] for t in pieces), pieces[0].shape[1], pieces[0].dtype)
        key = (kind, shape)
        if key not in first:
            taken = any(k == kind for k, _ in first)
            first[key] = (kind if not taken else "%s.%dx%d" % (kind, shape[0], shape[1]), name)
        tuned[name] = first[key][0]
    return [{"name": tname, "tensor": src + ".weight"} for tname, src in first.values()], tuned


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="projd_pack",
        description="Write a Hugging Face checkpoint's dense projections as one safetensors file projd "
        "serves (q/k/v and gate/up fused in SGLang's order), and its projd configuration.",
    )
    ap.add_argument("checkpoint", help="a checkpoint directory (with model.safetensors.index.json) or one file")
    ap.add_argument("out", help="the safetensors file to write")
    ap.add_argument("--config", metavar="FILE", help="write the projd configuration here (else to standard output)")
    ap.add_argument("--only", metavar="REGEX", help="only the layers whose SGLang name matches (re.search)")
    ap.add_argument(
        "--tune-config",
        metavar="FILE",
        help="also write a configuration of one layer of each kind and shape, for projd-bench --config "
        "FILE --tune TABLE, and give every layer of the main configuration its tuned_as",
    )
    ap.add_argument("--quiet", action="store_true", help="no progress on standard error")
    a = ap.parse_args(argv)
    try:
        tensors = {}
        for path in checkpoint_files(a.checkpoint):
            for name, t in read_header(path).items():
                if name in tensors:
                    raise PackError("tensor %s is in both %s and %s" % (name, tensors[name].path, path))
                tensors[name] = t
        layers = plan(tensors, a.only)
        say = None if a.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
        total = write(a.out, layers, os.path.abspath(a.checkpoint), say)
        tuned = None
        if a.tune_config:
            tune_layers, tuned = tuning_layers(layers)
            tune = {"model": {"path": os.path.abspath(a.out), "layers": tune_layers}}
            with open(a.tune_config, "w") as f:
                f.write(json.dumps(tune, indent=2) + "\n")
        text = json.dumps(config(a.out, layers, tuned), indent=2) + "\n"
        if a.config:
            with open(a.config, "w") as f:
                f.write(text)
        else:
            sys.stdout.write(text)
        if say:
            say("projd_pack: %d layers, %.2f GiB, in %s" % (len(layers), total / 2**30, a.out))
    except PackError as e:
        print("projd_pack: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        print("projd_pack: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
