#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""sampler_ref.py: an independent implementation of the sampler algorithm as
doc/sampler.md states it (generator, permutation, sharding, resume), used to
pin the C library's output (tests/sampler-ref.sh) and to compute the golden
values hard-coded in tests/check_sampler.c.

  sampler_ref.py golden     the golden values (C initializers)
  sampler_ref.py cases      the case lines the cross-check feeds both sides
  sampler_ref.py expect     reads case lines on stdin, writes the expected
                            output in tests/sampler_dump.c's format
"""
import sys

M64 = (1 << 64) - 1


def splitmix64(state):
    """One step: returns (new_state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Rng:
    """xoshiro256** seeded from (seed, stream) through splitmix64."""

    def __init__(self, seed, stream):
        _, h = splitmix64(seed & M64)
        x = (h + stream) & M64
        self.s = []
        for _ in range(4):
            x, out = splitmix64(x)
            self.s.append(out)

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, bound):
        """Lemire: high word of x*bound, rejecting low words < 2^64 mod bound."""
        m = self.next() * bound
        lo = m & M64
        if lo < bound:
            threshold = (1 << 64) % bound
            while lo < threshold:
                m = self.next() * bound
                lo = m & M64
        return m >> 64


def permutation(seed, epoch, n):
    r = Rng(seed, epoch)
    p = list(range(n))
    for i in range(n, 1, -1):  # position i-1 swaps with a draw from [0, i)
        j = r.below(i)
        p[i - 1], p[j] = p[j], p[i - 1]
    return p


def shards(n, world, batch, shuffle, drop_last, seed, epoch, consumed):
    """Per rank: list of batches for the pass starting at `consumed`; and the
    consumed count after the first batch (all ranks together)."""
    p = permutation(seed, epoch, n) if shuffle else list(range(n))
    tail = p[consumed:]
    if drop_last:
        g = tail[: len(tail) // world * world]
    else:
        per = -(-len(tail) // world)
        pad = per * world - len(tail)
        g = tail + [p[k % n] for k in range(pad)]  # padding repeats P from its start
    out = []
    for r in range(world):
        mine = g[r::world]
        out.append([mine[k:k + batch] for k in range(0, len(mine), batch)])
    nb = len(out[0])
    if nb <= 1:  # after the pass's last batch (or an empty pass) the epoch is over
        c1 = n
    else:
        c1 = consumed + batch * world
    return out, c1


def cases():
    seeds = [0, 42, 2**64 - 1]
    for n in [1, 2, 3, 5, 7, 10, 13, 31, 64, 97, 100, 101]:
        for world in range(1, 9):
            if n < world:
                continue
            for batch in [1, 3, 8]:
                for shuffle in [0, 1]:
                    for drop_last in [0, 1]:
                        for seed in (seeds if shuffle else [0]):
                            for epoch in [0, 1, 7]:
                                for consumed in sorted({0, n // 3, n - 1, n}):
                                    if consumed and (epoch != 1 or batch != 3):
                                        continue  # resume cases: one slice of the grid
                                    print(n, world, batch, shuffle, drop_last, seed, epoch,
                                          consumed)


def expect():
    for line in sys.stdin:
        f = line.split()
        if not f:
            continue
        n, world, batch, shuffle, drop_last, seed, epoch, consumed = map(int, f)
        out, c1 = shards(n, world, batch, shuffle, drop_last, seed, epoch, consumed)
        print("case", *f)
        for r, batches in enumerate(out):
            flat = sum(len(b) for b in batches)
            body = " / ".join(" ".join(map(str, b)) for b in batches)
            print("rank %d ns %d nb %d c1 %d :%s" % (r, flat, len(batches), c1,
                                                    " " + body if body else ""))


def golden():
    for seed in (0, 42):
        r = Rng(seed, 0)
        print("/* seed %d stream 0: ddpc_rng_next x 4 */" % seed)
        print("{" + ", ".join("0x%016xu" % r.next() for _ in range(4)) + "},")
    r = Rng(42, 3)
    print("/* seed 42 stream 3: ddpc_rng_below(2^63 + 1) x 4, ddpc_rng_below(10) x 4 */")
    print("{" + ", ".join("0x%016xu" % r.below(2**63 + 1) for _ in range(4)) + ", " +
          ", ".join("%du" % r.below(10) for _ in range(4)) + "},")
    for seed, epoch in ((0, 0), (42, 0), (42, 1)):
        print("/* permutation(seed %d, epoch %d, 10) */" % (seed, epoch))
        print("{" + ", ".join(map(str, permutation(seed, epoch, 10))) + "},")


if __name__ == "__main__":
    {"golden": golden, "cases": cases, "expect": expect}[sys.argv[1]]()
