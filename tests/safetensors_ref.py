#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""safetensors_ref.py: an independent reader of the safetensors format, written
from its description (not from ddpc-ckpt's code), that checks a file written by
`ddpc-ckpt export` against the checkpoint it came from, read with h5py.

    safetensors_ref.py OUT.safetensors CHECKPOINT.h5

The format: 8 bytes, a little-endian u64 N; N bytes of UTF-8 JSON, an object
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{str: str}}, padded with spaces; then the data, little-endian, row-major,
offsets relative to the first byte after the header.

Checked: the header length and padding (8 + N a multiple of 8, fewer than 8
spaces of padding, nothing else after the JSON), no duplicate keys, the keys
in sorted order, every entry's fields and dtype F32, offsets in bounds,
begin <= end, end - begin = 4 * prod(shape), contiguous in name order from 0
to the end of the file; the metadata (strings only; format "ddpc"; step,
epoch, world_size, format_version, ddpc_version, created and the model
fingerprint equal to the checkpoint's); the tensor names are exactly the
datasets under /model; every tensor's shape and bytes equal the dataset's
(bitwise, via numpy) and its CRC-32 the dataset's crc32 attribute. Where the
`safetensors` package is installed, its loader must read the same tensors.
Exit 0 when all hold, 1 naming the first failure."""
import json
import struct
import sys
import zlib

import h5py
import numpy as np


def fail(msg):
    print("safetensors_ref: FAIL: %s" % msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    check(len(keys) == len(set(keys)), "duplicate keys in a JSON object: %r" % keys)
    return pairs  # keep the order: a list of (key, value)


def parse(path):
    with open(path, "rb") as f:
        raw = f.read()
    check(len(raw) >= 8, "%d bytes: shorter than the 8-byte header length" % len(raw))
    (n,) = struct.unpack("<Q", raw[:8])
    check(n <= len(raw) - 8, "header length %d exceeds the file (%d bytes)" % (n, len(raw)))
    check((8 + n) % 8 == 0, "the data does not start on a multiple of 8 (header length %d)" % n)
    head = raw[8:8 + n]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        fail("header is not UTF-8: %s" % e)
    check(text.startswith("{"), "header does not start with '{': %r" % text[:20])
    body = text.rstrip(" ")
    check(body.endswith("}"), "header JSON is followed by something other than spaces")
    check(len(text) - len(body) < 8, "%d bytes of padding (at most 7)" % (len(text) - len(body)))
    try:
        top = json.loads(body, object_pairs_hook=no_duplicates)
    except ValueError as e:
        fail("header is not JSON: %s" % e)
    check(isinstance(top, list), "header is not a JSON object")
    return raw, 8 + n, top


def main():
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    st_path, h5_path = sys.argv[1], sys.argv[2]
    raw, start, top = parse(st_path)
    data = raw[start:]
    meta = [v for k, v in top if k == "__metadata__"]
    tensors = [(k, v) for k, v in top if k != "__metadata__"]

    # the tensors: fields, sorted names, contiguous offsets
    names = [k for k, _ in tensors]
    check(names == sorted(names, key=lambda s: s.encode("utf-8")),
          "tensors are not in name order: %r" % names)
    pos = 0
    table = {}
    for name, v in tensors:
        check(isinstance(v, list), "%s: not an object" % name)
        d = dict(v)
        check(set(d) == {"dtype", "shape", "data_offsets"}, "%s: fields %r" % (name, sorted(d)))
        check(d["dtype"] == "F32", "%s: dtype %r, expected F32" % (name, d["dtype"]))
        shape, offs = d["shape"], d["data_offsets"]
        check(isinstance(shape, list) and all(isinstance(e, int) and e >= 0 for e in shape),
              "%s: bad shape %r" % (name, shape))
        check(isinstance(offs, list) and len(offs) == 2 and all(isinstance(e, int) for e in offs),
              "%s: bad data_offsets %r" % (name, offs))
        b, e = offs
        check(b == pos, "%s: begins at %d, the previous tensor ended at %d (hole or overlap)"
              % (name, b, pos))
        check(b <= e <= len(data), "%s: offsets %r outside the %d data bytes" % (name, offs, len(data)))
        check(e - b == 4 * int(np.prod(shape, dtype=np.int64)),
              "%s: %d bytes for shape %r" % (name, e - b, shape))
        table[name] = (tuple(shape), b, e)
        pos = e
    check(pos == len(data), "the tensors end at %d, the data has %d bytes" % (pos, len(data)))

    with h5py.File(h5_path, "r") as f:
        # the metadata: strings, the checkpoint's values
        check(len(meta) == 1, "%d __metadata__ entries, expected 1" % len(meta))
        m = dict(meta[0])
        check(all(isinstance(v, str) for v in m.values()), "__metadata__ values must be strings: %r" % m)
        check(m.get("format") == "ddpc", "__metadata__ format %r, expected 'ddpc'" % m.get("format"))
        for key in ("step", "epoch", "world_size", "format_version"):
            check(m.get(key) == str(int(f.attrs[key])),
                  "__metadata__ %s %r, the checkpoint has %r" % (key, m.get(key), f.attrs[key]))
        for key in ("ddpc_version", "created"):
            check(m.get(key) == f.attrs[key].decode(),
                  "__metadata__ %s %r, the checkpoint has %r" % (key, m.get(key), f.attrs[key]))
        fp = "%016x" % int(f.attrs["model_fingerprint"])
        check(m.get("model_fingerprint") == fp,
              "__metadata__ model_fingerprint %r, expected %s" % (m.get("model_fingerprint"), fp))

        # the tensors: exactly /model's datasets, bitwise equal
        want = {}
        f["model"].visititems(lambda n, o: want.__setitem__(n, o) if isinstance(o, h5py.Dataset) else None)
        check(set(want) == set(table),
              "names differ: only in the checkpoint %r, only in the export %r"
              % (sorted(set(want) - set(table)), sorted(set(table) - set(want))))
        nbytes = 0
        for name, (shape, b, e) in table.items():
            ds = want[name]
            check(ds.shape == shape, "%s: shape %r, the checkpoint %r" % (name, shape, ds.shape))
            got = np.frombuffer(data[b:e], dtype="<f4").reshape(shape)
            ref = ds[...].astype("<f4")
            check(got.tobytes() == ref.tobytes(), "%s: data differs from the checkpoint's" % name)
            check(zlib.crc32(got.tobytes()) == int(ds.attrs["crc32"]),
                  "%s: CRC-32 %08x, the checkpoint records %08x"
                  % (name, zlib.crc32(got.tobytes()), int(ds.attrs["crc32"])))
            nbytes += e - b

        try:
            from safetensors.numpy import load_file
        except ImportError:
            load_file = None
        if load_file:
            other = load_file(st_path)
            check(set(other) == set(table), "the safetensors package reads other names")
            for name in table:
                check(other[name].tobytes() == want[name][...].astype("<f4").tobytes(),
                      "the safetensors package reads other data for %s" % name)
    print("ok: %s: %d tensors, %d bytes equal to %s%s" % (st_path, len(table), nbytes, h5_path,
          "; the safetensors package agrees" if load_file else ""))


if __name__ == "__main__":
    main()
