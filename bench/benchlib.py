# SPDX-License-Identifier: BSD-3-Clause
"""benchlib.py: what the Python sides of the benchmarks share, so that each
reads the data and names its BLAS the same way: the idx files of an
MNIST-format directory (the trainer's normalization constants with them) and
what an OpenBLAS library says about itself. Standard library only; the
callers turn the bytes into torch or numpy arrays."""
import ctypes
import gzip
import os

# the trainer's normalization of Fashion-MNIST pixels (examples/trainer.c)
MEAN, STD = 0.2860, 0.3530


def idx_path(data, split, kind):
    """<data>/<split>-<kind>, raw if present, else its .gz
    (kind: images-idx3-ubyte or labels-idx1-ubyte)"""
    base = os.path.join(data, f"{split}-{kind}")
    return base if os.path.exists(base) else base + ".gz"


def read_idx(path):
    """(dims, the file's bytes, offset of the first element) of an idx file
    of uint8 elements, raw or gzip"""
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = bytearray(f.read())
    nd = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return dims, data, 4 + 4 * nd


def openblas_info(path, threads=False):
    """{"openblas", "openblas_corename", "openblas_config"} (and
    "openblas_num_threads" with threads) of the OpenBLAS at path; {} when it
    is not one or cannot be loaded"""
    try:
        lib = ctypes.CDLL(path)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        info = {"openblas": path,
                "openblas_corename": lib.openblas_get_corename().decode(),
                "openblas_config": lib.openblas_get_config().decode()}
        if threads:
            info["openblas_num_threads"] = lib.openblas_get_num_threads()
        return info
    except (OSError, AttributeError):
        return {}
