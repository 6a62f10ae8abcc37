#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""plot.py: the report of bench/train_bench.sh (`make bench`): reads what it
left in BENCH_OUT (runs.tsv, runs/*, gemm, ckpt and ddp outputs) and writes
  - a markdown report on stdout (also BENCH_OUT/report.md),
  - BENCH_OUT/bench.json: every raw run as parsed, the GEMM rates, the
    summary, the same-job check, ckpt_bench's and ddp_bench's key figures,
  - BENCH_OUT/throughput.png and loss.png (matplotlib, Agg; skipped with a
    note when matplotlib is missing).
Exit 1 when the same-job check failed or a run failed; a slow figure never
fails. What is compared and how is in doc/performance.md ("The CPU trainer").

  plot.py --out BENCH_OUT [--check-tol 0.01] [--mlp-hidden 1024,1024]
          [--mlp-batch 128] [--linear-batch 64] [--max-steps 0] [--wall-s S]"""
import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import openblas_info  # noqa: E402

GEMM_LAYERS = [784, 1024, 1024, 10]  # the shapes bench/gemm_bench.c times
CHECK_WINDOW = 100  # the same-job check holds the losses of the first steps to --check-tol


def flops_per_sample(dims):
    """the GEMMs of one sample's step: forward and weight gradient 2 x weights
    each, data gradient 2 x weights but the first layer's (the input needs
    none); bias, ReLU, softmax and the optimizer not counted"""
    w = [dims[i] * dims[i + 1] for i in range(len(dims) - 1)]
    return 6 * sum(w) - 2 * w[0]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rng(xs):
    xs = [x for x in xs if x is not None]
    return (min(xs), max(xs)) if xs else (None, None)


def fmt(x, f="{:.0f}"):
    return "-" if x is None else f.format(x)


def read_index(out):
    cols = ["part", "tag", "cfg", "impl", "np", "rep", "seed", "idle", "load", "rc", "wall_s",
            "file"]
    runs = []
    p = os.path.join(out, "runs.tsv")
    if not os.path.exists(p):
        return runs
    with open(p) as f:
        for line in f:
            v = line.rstrip("\n").split("\t")
            if len(v) != len(cols):
                continue
            r = dict(zip(cols, v))
            for k in ("np", "rep", "seed", "rc", "wall_s"):
                r[k] = int(r[k])
            runs.append(r)
    return runs


def parse_trainer(out, r):
    res = {"log": []}
    path = os.path.join(out, r["file"])
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                ev = e.get("event")
                if ev == "log":
                    res["log"].append({"step": e["step"], "loss": e["loss"],
                                       "train_acc": e["train_acc"]})
                elif ev == "epoch":
                    res["epoch_s"] = e["epoch_s"]
                    res["epoch_samples_per_s"] = e["samples_per_s"]
                elif ev == "final":
                    for k in ("samples_per_s", "test_acc", "test_loss", "steps", "params_crc32"):
                        res[k] = e.get(k)
    lp = os.path.join(out, "runs", r["tag"] + ".log")
    if os.path.exists(lp):
        with open(lp) as f:
            for line in f:
                if line.startswith("trainer: ") and "rank(s)" in line:
                    res["banner"] = line.strip()
    return res


def parse_torch(out, r):
    path = os.path.join(out, r["file"])
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        lp = os.path.join(out, "runs", r["tag"] + ".log")
        err = "no result"
        if os.path.exists(lp):
            with open(lp) as f:
                errs = [l for l in f if '"error"' in l]
            if errs:
                err = errs[-1].strip()
        return {"error": err, "log": []}


def parse_gemm(out, r, dims, batch):
    """gemm_bench's R lines; the rate of the trainer's GEMMs of one step:
    total FLOP over total median time of the shapes it runs (all but the
    first layer's data gradient), by CPU time and by wall time"""
    path = os.path.join(out, "runs", r["tag"] + ".log")
    g = {"shapes": [], "info": {}}
    if not os.path.exists(path):
        return g
    with open(path) as f:
        for line in f:
            if line.startswith("# ") and "=" in line:
                k, _, v = line[2:].strip().partition("=")
                g["info"][k] = v
            elif line.startswith("R "):
                p = line.split()
                op, M, N, K = p[2], int(p[4]), int(p[5]), int(p[6])
                g["shapes"].append({"op": op, "M": M, "N": N, "K": K, "wall_gflops": float(p[7]),
                                    "cpu_gflops": float(p[10]), "ok": p[-1] == "ok"})
            elif line.startswith("S "):
                for kv in line.split()[2:]:
                    k, _, v = kv.partition("=")
                    g.setdefault("S", {})[k] = float(v)
    step = [s for s in g["shapes"] if not (s["op"] == "bwd_d" and s["N"] == GEMM_LAYERS[0])
            and (s["M"] == batch or s["K"] == batch)]
    if step:
        fl = [2.0 * s["M"] * s["N"] * s["K"] for s in step]
        for key in ("cpu", "wall"):
            t = sum(f / (s[key + "_gflops"] * 1e9) for f, s in zip(fl, step))
            g["step_" + key + "_gflops"] = sum(fl) / t / 1e9
        g["step_flops"] = sum(fl)
        g["step_shapes"] = len(step)
    g["valid"] = dims == GEMM_LAYERS and bool(step) and all(s["ok"] for s in g["shapes"])
    return g


def kv_line(path, needle):
    """the last line of a file with key=value pairs containing needle"""
    if not os.path.exists(path):
        return None
    last = None
    with open(path) as f:
        for line in f:
            if needle in line and "=" in line:
                last = line
    if not last:
        return None
    d = {}
    for kv in last.split():
        k, _, v = kv.partition("=")
        try:
            d[k] = float(v)
        except ValueError:
            d[k] = v
    return d


def trainer_blas(out):
    """the BLAS the trainer's binary loads (ldd) and OpenBLAS's kernel there"""
    info = {}
    p = os.path.join(out, "trainer-ldd.txt")
    if not os.path.exists(p):
        return info
    with open(p) as f:
        for line in f:
            m = re.match(r"\s*(\S*(?:blas|blis|mkl)\S*)\s+=>\s+(\S+)", line)
            if m:
                info.setdefault("libs", []).append(os.path.realpath(m.group(2)))
    for lib in info.get("libs", []):
        if "openblas" in os.path.basename(lib):
            info.update(openblas_info(lib))
    return info


def machine():
    m = {"nproc": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    m["cpu"] = line.split(":", 1)[1].strip()
                    break
        m["avx512"] = "avx512f" in open("/proc/cpuinfo").read()
        with open("/proc/meminfo") as f:
            m["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    m["os"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return m


def first_loss(res):
    log = res.get("log") or []
    return log[0]["loss"] if log else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--check-tol", type=float, default=0.01)
    ap.add_argument("--mlp-hidden", default="1024,1024")
    ap.add_argument("--mlp-batch", type=int, default=128)
    ap.add_argument("--linear-batch", type=int, default=64)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--wall-s", type=int, default=None)
    a = ap.parse_args()
    out = a.out
    dims = {"mlp": [784] + [int(h) for h in a.mlp_hidden.split(",")] + [10],
            "linear": [784, 10]}
    runs = read_index(out)
    bad = 0
    for r in runs:
        if r["rc"] != 0:
            bad = 1
        if r["part"] in ("train", "check"):
            r["result"] = parse_trainer(out, r) if r["impl"] == "trainer" else parse_torch(out, r)
    lines = []
    say = lines.append

    # ---------------------------------------------------------------- GEMM bound
    gemms = [parse_gemm(out, r, dims["mlp"], a.mlp_batch) for r in runs if r["part"] == "gemm"]
    gemm = {"rounds": gemms}
    fps = {m: flops_per_sample(d) for m, d in dims.items()}
    if gemms and all(g.get("valid") for g in gemms):
        gemm["gflops_cpu"] = med([g["step_cpu_gflops"] for g in gemms])
        gemm["gflops_wall"] = med([g["step_wall_gflops"] for g in gemms])
        gemm["bound_per_core"] = gemm["gflops_cpu"] * 1e9 / fps["mlp"]
    elif gemms:
        gemm["note"] = ("no bound: gemm_bench times 784-1024-1024-10 only" if dims["mlp"] !=
                        GEMM_LAYERS else "no bound: a gemm_bench run failed or checked wrong")

    # ---------------------------------------------------------------- summary
    train = [r for r in runs if r["part"] == "train"]
    cfgs = []
    for r in train:
        if r["cfg"] not in cfgs:
            cfgs.append(r["cfg"])
    impls = []
    for r in train:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    summary = {}
    for c in cfgs:
        model, np_ = c.split(".np")[0], int(c.split(".np")[1])
        s = {"model": model, "ranks": np_, "dims": "-".join(map(str, dims[model])),
             "batch_per_rank": a.mlp_batch if model == "mlp" else a.linear_batch,
             "flops_per_sample": fps[model], "impls": {}}
        for i in impls:
            rs = [r for r in train if r["cfg"] == c and r["impl"] == i]
            sps = [r["result"].get("samples_per_s") if r["rc"] == 0 else None for r in rs]
            lo, hi = rng(sps)
            s["impls"][i] = {
                "samples_per_s": med(sps), "min": lo, "max": hi,
                "n": len([x for x in sps if x]), "runs": sps,
                "epoch_s": med([r["result"].get("epoch_s") for r in rs]),
                "test_acc": med([r["result"].get("test_acc") for r in rs]),
                "test_accs": [r["result"].get("test_acc") for r in rs],
                "first_loss": med([first_loss(r["result"]) for r in rs]),
                "errors": [r["result"].get("error") for r in rs if r["result"].get("error")]}
        base = s["impls"].get("torch", {})
        tr = s["impls"].get("trainer", {})
        if base.get("samples_per_s") and tr.get("samples_per_s"):
            s["trainer_vs_torch"] = tr["samples_per_s"] / base["samples_per_s"]
            pairs = []  # the interleaved repeats, pair by pair
            for rep in sorted({r["rep"] for r in train if r["cfg"] == c}):
                x = [r["result"].get("samples_per_s") for r in train
                     if r["cfg"] == c and r["rep"] == rep and r["impl"] == "trainer" and r["rc"] == 0]
                y = [r["result"].get("samples_per_s") for r in train
                     if r["cfg"] == c and r["rep"] == rep and r["impl"] == "torch" and r["rc"] == 0]
                if x and y and x[0] and y[0]:
                    pairs.append(x[0] / y[0])
            s["pair_ratios"] = pairs
        if model == "mlp" and gemm.get("bound_per_core"):
            s["bound_samples_per_s"] = np_ * gemm["bound_per_core"]
            for i, v in s["impls"].items():
                if v["samples_per_s"]:
                    v["of_bound"] = v["samples_per_s"] / s["bound_samples_per_s"]
        if tr.get("test_acc") is not None and base.get("test_acc") is not None:
            s["acc_diff"] = tr["test_acc"] - base["test_acc"]
        summary[c] = s
    scaling = {}
    for model in dims:
        one, two = summary.get(model + ".np1"), summary.get(model + ".np2")
        if not (one and two):
            continue
        scaling[model] = {}
        for i in impls:
            x, y = one["impls"][i]["samples_per_s"], two["impls"][i]["samples_per_s"]
            scaling[model][i] = y / (2 * x) if x and y else None

    # ---------------------------------------------------------------- same-job check
    check = {}
    for r in [r for r in runs if r["part"] == "check" and r["impl"] == "trainer"]:
        t = [x for x in runs if x["part"] == "check" and x["cfg"] == r["cfg"] and
             x["impl"] == "torch"]
        if not t:
            continue
        la = {e["step"]: e["loss"] for e in r["result"].get("log", [])}
        lb = {e["step"]: e["loss"] for e in t[0]["result"].get("log", [])}
        steps = sorted(set(la) & set(lb))
        rel = {k: abs(la[k] - lb[k]) / abs(la[k]) for k in steps if la[k]}
        early = [v for k, v in rel.items() if k <= CHECK_WINDOW]
        acc_a, acc_b = r["result"].get("test_acc"), t[0]["result"].get("test_acc")
        acc_ok = acc_a is not None and acc_b is not None and abs(acc_a - acc_b) <= 0.01
        ok = bool(early) and max(early) <= a.check_tol and acc_ok and r["rc"] == 0 and \
            t[0]["rc"] == 0
        check[r["cfg"]] = {"steps": steps, "trainer": [la[k] for k in steps],
                           "torch": [lb[k] for k in steps],
                           "max_rel_diff_early": max(early) if early else None,
                           "max_rel_diff": max(rel.values()) if rel else None, "ok": ok,
                           "tol": a.check_tol, "window": CHECK_WINDOW,
                           "trainer_test_acc": acc_a, "torch_test_acc": acc_b}
        bad |= not ok

    # ---------------------------------------------------------------- the report
    m = machine()
    tb = trainer_blas(out)
    ran = [r for r in runs if r["part"] in ("train", "check")]
    torch_info = next((r["result"] for r in ran if r["impl"] == "torch" and "blas" in
                       r.get("result", {})), {})
    torch2_info = next((r["result"] for r in ran if r["impl"] == "torch2" and "blas" in
                        r.get("result", {})), {})
    loads = [float(r["load"]) for r in runs if r["load"] not in ("-", "")]
    idles = [int(r["idle"]) for r in runs if r["idle"] not in ("-", "")]
    span = "one epoch" if a.max_steps == 0 else f"{a.max_steps} steps (not a full epoch)"
    if train or gemms or check:
        report_train(a, say, m, tb, torch_info, torch2_info, loads, idles, span, gemm, gemms,
                     fps, dims, summary, scaling, check)
    ck = kv_line(os.path.join(out, "runs", "ckpt.1.log"), "save_vs_raw=")
    if ck:
        say("checkpoints (bench/ckpt_bench, 1 GiB, 2 ranks): " + " ".join(
            f"{k}={v}" for k, v in ck.items()))
    dd = kv_line(os.path.join(out, "ddp_bench.txt"), "allreduce_ratio_min=")
    if dd:
        say("DDP engine (bench/ddp_bench.sh, full tables in ddp_bench.txt): " + " ".join(
            f"{k}={v}" for k, v in dd.items()))
    pp = kv_line(os.path.join(out, "pipe_bench.txt"), "pipe_summary")
    if pp:
        say("pipelines, samples/s over data parallel on the same 2 ranks (bench/pipe_bench.py, "
            "the table with bubbles in pipe_bench.txt): " + " ".join(
                f"{k}={v}" for k, v in pp.items() if v != ""))
    tl = kv_line(os.path.join(out, "timeline_bench.txt"), "timeline_summary")
    if tl:
        say("DDPC_TIMELINE's cost, samples/s on over off (bench/timeline_bench.py; the picture in "
            "timeline.png): " + " ".join(f"{k}={v}" for k, v in tl.items()))
    sb = kv_line(os.path.join(out, "shard_bench.txt"), "shard_summary")
    if sb:
        say("DDPC_SHARD (bench/shard_bench.py, the table in shard_bench.txt): samples/s over "
            "unsharded, RSS saved, optimizer state and gradients per rank: " + " ".join(
                f"{k}={v}" for k, v in sb.items()))
    sd = kv_line(os.path.join(out, "shard_deep_bench.txt"), "shard_deep_summary")
    if sd:
        say("DDPC_SHARD=grads on a deep MLP (32 hidden layers of 256) with 0.5 MiB buckets, "
            "where its gradients shrink (the table in shard_deep_bench.txt): " + " ".join(
                f"{k}={v}" for k, v in sd.items()))
        sb = dict(sb or {}, deep=sd)
    targets(say, summary, dd)
    if a.wall_s is not None:
        say(f"(the whole bench took {a.wall_s / 60:.1f} min; raw runs in {out}/runs, "
            f"json {out}/bench.json)")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text + "\n")

    result = {"machine": m, "trainer_blas": tb, "settings": vars(a), "runs": runs,
              "gemm": gemm, "summary": summary, "scaling": scaling, "check": check,
              "ckpt": ck, "ddp": dd, "pipe": pp, "timeline": tl, "shard": sb}
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    plots(out, summary, runs, check, impls)
    return 1 if bad else 0


def targets(say, summary, dd):
    """The CPU engine's targets (issue 24), each a ratio measured in this run with its
    spread, and whether the median meets it. Printed, never judged: the exit status
    does not depend on them."""
    rows = []
    dd = dd or {}  # the ddp part may not have run (BENCH_PARTS)
    mlp = summary.get("mlp.np2", {})
    tr = mlp.get("impls", {}).get("trainer", {})
    if tr.get("of_bound") and mlp.get("bound_samples_per_s"):
        b = mlp["bound_samples_per_s"]
        rows.append(("MLP %s at 2 ranks, samples/s of the SGEMM bound" % mlp["dims"],
                     tr["of_bound"], "%.3f..%.3f of the runs" % (tr["min"] / b, tr["max"] / b),
                     0.85))
    lin = summary.get("linear.np2", {})
    if lin.get("trainer_vs_torch"):
        pr = lin.get("pair_ratios") or []
        rows.append(("linear model at 2 ranks, samples/s over PyTorch DDP (gloo)",
                     lin["trainer_vs_torch"],
                     "pairs %.2f..%.2f" % (min(pr), max(pr)) if pr else "one pair", 15.0))
    if dd.get("allreduce_ratio_min_from_1mib"):
        rows.append(("the engine's all-reduce over raw MPI_Allreduce, 2 ranks, the worst size "
                     "from 1 MiB (shared-memory path on: DDPC_SHM_ALLREDUCE=auto)",
                     float(dd["allreduce_ratio_min_from_1mib"]),
                     "runs %s over those sizes" % dd.get("allreduce_ratio_range_from_1mib", "?"),
                     1.2))
    if not rows:
        return
    say("")
    say("targets of the CPU engine (issue 24): median of this run (spread); target; met?")
    for what, v, spread, want in rows:
        say(f"- {what}: {v:.3f} ({spread}); target >= {want:g}: {'met' if v >= want else 'not met'}")


def report_train(a, say, m, tb, torch_info, torch2_info, loads, idles, span, gemm, gemms, fps,
                 dims, summary, scaling, check):
    say("## ddpc trainer vs PyTorch DDP (gloo) on the CPU\n")
    say(f"- machine: {m.get('cpu', '?')}, {m.get('nproc')} CPUs, {m.get('mem_gib')} GiB, "
        f"{m.get('os', '?')}, AVX-512 {'shown' if m.get('avx512') else 'not shown'} in "
        f"/proc/cpuinfo; load average before the runs {fmt(min(loads) if loads else None, '{:.1f}')}"
        f"..{fmt(max(loads) if loads else None, '{:.1f}')}, idle {fmt(min(idles) if idles else None)}"
        f"..{fmt(max(idles) if idles else None)}%")
    say(f"- trainer: {tb.get('openblas', ', '.join(tb.get('libs', [])) or '?')}, OpenBLAS core "
        f"{tb.get('openblas_corename', '?')}, 1 thread per rank, mpiexec -bind-to core")
    if torch_info:
        b = torch_info.get("blas", {})
        say(f"- torch {torch_info.get('torch')} ({torch_info.get('launcher')}): BLAS_INFO="
            f"{b.get('blas_info')}, calls {b.get('openblas', '?')}, OpenBLAS core "
            f"{b.get('openblas_corename', '?')}, {b.get('openblas_num_threads')} OpenBLAS thread, "
            f"{torch_info.get('threads')} intra-op thread per rank, CPU capability "
            f"{b.get('cpu_capability')}")
    if torch2_info:
        b = torch2_info.get("blas", {})
        say(f"- torch2 {torch2_info.get('torch')} ({torch2_info.get('launcher')}): BLAS_INFO="
            f"{b.get('blas_info')}, {b.get('mkl') or b.get('openblas') or ', '.join(b.get('mapped', []))}"
            f", {torch2_info.get('threads')} intra-op thread per rank, CPU capability "
            f"{b.get('cpu_capability')}")
    say(f"- timed: {span} per run, samples over the time spent in training steps (batch "
        f"fetch, forward, backward with the all-reduce, optimizer) on rank 0; setup, progress "
        f"all-reduces and evaluation excluded on both sides")
    if gemm.get("bound_per_core"):
        info = gemms[0]["info"]
        say(f"- SGEMM bound: bench/gemm_bench ({info.get('openblas_corename', info.get('blis_arch', '?'))}"
            f", 1 thread, pinned) on the trainer's {gemms[0].get('step_shapes')} GEMMs of an MLP "
            f"step at batch {a.mlp_batch}: {gemm['gflops_cpu']:.1f} GFLOP/s per core by CPU time "
            f"(wall {gemm['gflops_wall']:.1f}; rounds "
            f"{', '.join('%.1f' % g['step_cpu_gflops'] for g in gemms)}); "
            f"{fps['mlp']:,} FLOP per sample (6 x {sum(dims['mlp'][i] * dims['mlp'][i + 1] for i in range(len(dims['mlp']) - 1)):,} "
            f"weights - 2 x {dims['mlp'][0] * dims['mlp'][1]:,}, the first layer's data gradient): "
            f"bound {gemm['bound_per_core']:.0f} samples/s per core")
    elif gemm.get("note"):
        say(f"- SGEMM bound: {gemm['note']}")
    say("")
    if summary:
        say("| model | ranks | impl | samples/s median (min..max) | n | vs torch | of SGEMM "
            "bound | epoch s | test acc | loss, first log |")
        say("|---|---|---|---|---|---|---|---|---|---|")
    for c, s in summary.items():
        for i, v in s["impls"].items():
            vs = "-"
            if i == "trainer" and s.get("trainer_vs_torch"):
                pr = s.get("pair_ratios") or []
                vs = f"{s['trainer_vs_torch']:.2f}x" + (
                    f" ({min(pr):.2f}..{max(pr):.2f})" if len(pr) > 1 else "")
            elif i != "torch" and v["samples_per_s"] and s["impls"].get("torch", {}).get(
                    "samples_per_s"):
                vs = f"{v['samples_per_s'] / s['impls']['torch']['samples_per_s']:.2f}x"
            rate = (f"{v['samples_per_s']:.0f} ({v['min']:.0f}..{v['max']:.0f})"
                    if v["samples_per_s"] else "failed")
            say(f"| {s['model']} {s['dims']}, {s['batch_per_rank']}/rank | {s['ranks']} | {i} | "
                f"{rate} | {v['n']} | {vs} | {fmt(v.get('of_bound'), '{:.2f}')} | "
                f"{fmt(v['epoch_s'], '{:.2f}')} | {fmt(v['test_acc'], '{:.4f}')} | "
                f"{fmt(v['first_loss'], '{:.4f}')} |")
    say("")
    if scaling:
        say("2-rank scaling efficiency (samples/s at 2 ranks / (2 x at 1 rank)): " + "; ".join(
            f"{mo}: " + ", ".join(f"{i} {fmt(e, '{:.2f}')}" for i, e in sc.items())
            for mo, sc in scaling.items()))
    for c, s in summary.items():
        if "acc_diff" in s:
            d = s["acc_diff"]
            if abs(d) > 0.01:
                ra = rng(s["impls"]["trainer"]["test_accs"])
                rb = rng(s["impls"]["torch"]["test_accs"])
                say(f"WARNING: {c}: test accuracy trainer {s['impls']['trainer']['test_acc']:.4f} "
                    f"vs torch {s['impls']['torch']['test_acc']:.4f} (medians over the seeds): "
                    f"{100 * d:+.2f} points, more than 1 point apart; over the seeds trainer "
                    f"{fmt(ra[0], '{:.4f}')}..{fmt(ra[1], '{:.4f}')}, torch "
                    f"{fmt(rb[0], '{:.4f}')}..{fmt(rb[1], '{:.4f}')}"
                    + (" (runs shorter than an epoch)" if a.max_steps else ""))
        for i, v in s["impls"].items():
            for e in v["errors"]:
                say(f"ERROR: {c} {i}: {e}")
    diffs = [f"{c} {100 * s['acc_diff']:+.2f}" for c, s in summary.items() if "acc_diff" in s]
    if diffs:
        say("test accuracy, trainer - torch (points, medians over repeats): " + ", ".join(diffs))
    for c, k in check.items():
        first = [f"{x:.4f}" for st, x in zip(k["steps"], k["trainer"]) if st <= k["window"]]
        firstt = [f"{x:.4f}" for st, x in zip(k["steps"], k["torch"]) if st <= k["window"]]
        n = k["steps"][-1] if k["steps"] else 0
        say(f"same-job check {c} (torch with the trainer's initialization and batch order, "
            f"{n} steps): loss every 10 steps to step {k['window']}: trainer {' '.join(first)}; "
            f"torch {' '.join(firstt)}; largest relative difference there "
            f"{fmt(k['max_rel_diff_early'], '{:.1e}')} (over all {n} steps "
            f"{fmt(k['max_rel_diff'], '{:.1e}')}); test accuracy trainer "
            f"{fmt(k['trainer_test_acc'], '{:.4f}')}, torch {fmt(k['torch_test_acc'], '{:.4f}')}: "
            + ("ok" if k["ok"] else f"FAILED (losses to {k['tol']} relative, accuracy to 1 point)"))


def plots(out, summary, runs, check, impls):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plots)")
        return
    models = []
    for s in summary.values():
        if s["model"] not in models:
            models.append(s["model"])
    if models:
        fig, axs = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
        for ax, mo in zip(axs[0], models):
            ss = [s for s in summary.values() if s["model"] == mo]
            w = 0.8 / max(len(impls), 1)
            for k, i in enumerate(impls):
                xs = [s["ranks"] + (k - (len(impls) - 1) / 2) * w for s in ss]
                ys = [s["impls"][i]["samples_per_s"] or 0 for s in ss]
                lo = [y - (s["impls"][i]["min"] or y) for y, s in zip(ys, ss)]
                hi = [(s["impls"][i]["max"] or y) - y for y, s in zip(ys, ss)]
                ax.bar(xs, ys, w, yerr=[lo, hi], capsize=3, label=i)
            bx = [s["ranks"] for s in ss if s.get("bound_samples_per_s")]
            by = [s["bound_samples_per_s"] for s in ss if s.get("bound_samples_per_s")]
            if bx:
                ax.hlines(by, [x - 0.45 for x in bx], [x + 0.45 for x in bx], colors="r",
                          linewidth=2, label="SGEMM bound (cores x GEMM rate)")
            ax.set_xticks(sorted({s["ranks"] for s in ss}))
            ax.set_xlabel("ranks (1 core, 1 BLAS thread each)")
            ax.set_ylabel("samples/s (median, min..max)")
            ax.set_title(f"{mo} {ss[0]['dims']}, batch {ss[0]['batch_per_rank']}/rank")
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "throughput.png"), dpi=110)
        plt.close(fig)
    # losses: the timed runs' first repeat and the same-job check
    series = {}
    for r in runs:
        if r["part"] == "train" and r["rep"] == 1 or r["part"] == "check":
            log = (r.get("result") or {}).get("log") or []
            if log:
                series[(r["cfg"].split(".np")[0], r["part"], r["cfg"], r["impl"])] = log
    if series:
        ms = sorted({k[0] for k in series})
        fig, axs = plt.subplots(1, len(ms), figsize=(5.5 * len(ms), 4), squeeze=False)
        for ax, mo in zip(axs[0], ms):
            for (m2, part, cfg, impl), log in sorted(series.items()):
                if m2 != mo:
                    continue
                st = "o-" if part == "check" else ".-"
                ax.plot([e["step"] for e in log], [e["loss"] for e in log], st, markersize=3,
                        label=f"{impl} {cfg.split('.')[-1]}" + (" (same init/order)" if part ==
                                                                 "check" else ""))
            ax.set_yscale("log")
            ax.set_xlabel("optimizer step")
            ax.set_ylabel("training loss since the last log")
            ax.set_title(mo)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "loss.png"), dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
