#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""recipes_check.py: check the package recipes in contrib/ without Spack or
EasyBuild, which do not run here: parse each with Python's ast (an easyconfig
is Python syntax too), check the parts a site relies on, and check that every
configure option they pass (--with-*, --without-*, --enable-*, --disable-*)
and every VAR= they set exists in `configure --help`.

    recipes_check.py [--tarball ddpc-VERSION.tar.gz] CONFIGURE_HELP_FILE RECIPE...

RECIPE is a Spack package.py or an EasyBuild .eb. With --tarball, the
recipes must name that release: the Spack recipe a version("VERSION",
sha256=<the tarball's>), the easyconfig version VERSION and that checksum.
Prints one "ok:" line per recipe; each problem is a "FAIL: file: ..." line;
exit status 1 if any."""
import ast
import hashlib
import os
import re
import sys

OPTION = re.compile(r"--(with|without|enable|disable)-([A-Za-z0-9_][A-Za-z0-9_-]*)")
PRECIOUS_HEAD = "Some influential environment variables:"
SHA256 = re.compile(r"[0-9a-f]{64}")
LICENSE = "BSD-3-Clause"  # LICENSE


def configure_help(path):
    """The options and precious variables `configure --help` lists."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    options = set()
    for kind, name in OPTION.findall(text):
        if name in ("PACKAGE", "FEATURE"):  # autoconf's generic lines
            continue
        # --with-X implies --without-X is accepted, --enable-X implies --disable-X
        pair = {"with": "without", "without": "with", "enable": "disable", "disable": "enable"}
        options.add(f"--{kind}-{name}")
        options.add(f"--{pair[kind]}-{name}")
    precious = set()
    if PRECIOUS_HEAD in text:
        section = text.split(PRECIOUS_HEAD, 1)[1].split("\n\n", 1)[0]
        precious = set(re.findall(r"^  ([A-Z][A-Z0-9_]*)\b", section, re.M))
    if not options or not precious:
        sys.exit(f"FAIL: {path} does not look like the output of configure --help")
    return options, precious


class Checker:
    def __init__(self, path, options, precious, release=None):
        self.path, self.options, self.precious = path, options, precious
        self.release = release  # (version, sha256) of --tarball, or None
        self.errors = []
        self.passed_options, self.passed_vars = set(), set()

    def fail(self, msg):
        self.errors.append(f"FAIL: {self.path}: {msg}")

    def check_passed(self, text, var_pattern):
        """Options and VAR= in text (recipe source or an option string)."""
        for kind, name in OPTION.findall(text):
            self.passed_options.add(f"--{kind}-{name}")
        self.passed_vars.update(re.findall(var_pattern, text))

    def check_against_configure(self):
        if not self.passed_options:
            self.fail("passes no configure option at all")
        for opt in sorted(self.passed_options):
            if opt not in self.options:
                self.fail(f"passes {opt}, which configure --help does not list")
        for var in sorted(self.passed_vars):
            if var not in self.precious:
                self.fail(f"sets {var}=, which is not one of configure's variables "
                          f"({' '.join(sorted(self.precious))})")

    # ------------------------------------------------------------ Spack
    def spack(self, tree, source):
        cls = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
        if cls is None:
            return self.fail("no package class")
        bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases}
        for want in ("AutotoolsPackage", "CudaPackage"):
            if want not in bases:
                self.fail(f"class {cls.name} does not derive from {want}")
        calls = {}  # directive name -> [(args, kwargs)], class level (for-loops included)
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef):
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Name):
                c = node.value
                args = [ast.get_source_segment(source, a) for a in c.args]
                kw = {k.arg: ast.get_source_segment(source, k.value) for k in c.keywords}
                calls.setdefault(c.func.id, []).append((args, kw))
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}

        if ([f'"{LICENSE}"'], {}) not in calls.get("license", []):
            self.fail(f'no license("{LICENSE}")')
        versions = calls.get("version", [])
        if not any(a and a[0] == '"main"' and kw.get("branch") == '"main"' for a, kw in versions):
            self.fail('no version("main", branch="main")')
        for a, kw in versions:
            if not ({"sha256", "branch", "tag", "commit"} & set(kw)):
                self.fail(f"version({a[0] if a else ''}) has no sha256 (Spack refuses it)")
            elif "sha256" in kw and not SHA256.fullmatch(kw["sha256"].strip('"')):
                self.fail(f"version({a[0] if a else ''}): sha256={kw['sha256']} is not 64 hex digits")
        releases = [(a[0].strip('"'), kw["sha256"].strip('"')) for a, kw in versions
                    if a and "sha256" in kw]
        names = [a[0] for a, kw in versions if a]
        if not releases:
            self.fail('no release version("X", sha256="...") (make release writes it)')
        elif '"main"' in names and names.index('"main"') < names.index(f'"{releases[0][0]}"'):
            self.fail(f'version("{releases[0][0]}") is below version("main"): releases go above it')
        if self.release and self.release not in releases:
            have = ", ".join(f"{v} {h}" for v, h in releases) or "none"
            self.fail(f'no version("{self.release[0]}", sha256="{self.release[1]}") of the tarball '
                      f"(releases here: {have})")
        variants = {a[0].strip('"'): kw for a, kw in calls.get("variant", []) if a}
        if variants.get("pmix", {}).get("default") != "True":
            self.fail("no variant pmix with default=True")
        if variants.get("nccl", {}).get("when") != '"+cuda"':
            self.fail('no variant nccl when="+cuda"')
        deps = {}
        for a, kw in calls.get("depends_on", []):
            if a:
                spec = a[0].strip('"').lstrip("f").strip('"')
                deps.setdefault(re.split(r"[@ +~:]", spec, 1)[0], []).append(kw)
        for name, when in (("mpi", None), ("hdf5", None), ("zlib-api", None), ("blas", None),
                           ("check", None), ("pmix", '"+pmix"'), ("nccl", '"+nccl"')):
            if name not in deps:
                self.fail(f"no depends_on({name!r})")
            elif when and not any(kw.get("when") == when for kw in deps[name]):
                self.fail(f"depends_on({name!r}) not when={when}")
        if "check" in deps and not any(kw.get("type") == '"test"' for kw in deps["check"]):
            self.fail('depends_on("check") is not type="test"')
        for m in ("configure_args", "autoreconf", "test_embed"):
            if m not in methods:
                self.fail(f"no method {m}()")
        if "test_embed" in methods:
            body = ast.get_source_segment(source, methods["test_embed"])
            if ast.get_docstring(methods["test_embed"]) is None:
                self.fail("test_embed has no docstring (Spack prints it as the test's purpose)")
            for want in ("examples", "embed", "PKG_CONFIG_PATH", "mpicc"):
                if want not in body:
                    self.fail(f"test_embed does not mention {want}")
        if "configure_args" in methods:
            fn = methods["configure_args"]
            self.check_passed(ast.get_source_segment(source, fn), r"[\"']([A-Z][A-Z0-9_]*)=")
            for node in ast.walk(fn):  # self.with_or_without("x") and friends
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr in ("with_or_without", "enable_or_disable") \
                        and node.args and isinstance(node.args[0], ast.Constant):
                    pos, neg = ("with", "without") if node.func.attr == "with_or_without" \
                        else ("enable", "disable")
                    self.passed_options.update({f"--{pos}-{node.args[0].value}",
                                                f"--{neg}-{node.args[0].value}"})
            for want in ("--with-pmix", "--without-pmix", "--with-cuda", "--without-cuda",
                         "--with-cuda-arch", "--with-nccl", "--without-nccl", "--with-blas"):
                if want not in self.passed_options:
                    self.fail(f"configure_args() never passes {want}")

    # ------------------------------------------------------------ EasyBuild
    def value(self, node, cfg):
        """An easyconfig value: literals, EasyBuild's constants as their names, + of strings."""
        if isinstance(node, ast.Name):
            return cfg.get(node.id, node.id)  # SYSTEM, SOURCE_TAR_GZ, or a local_ variable
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.value(node.left, cfg) + self.value(node.right, cfg)
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.value(e, cfg) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.Dict):
            return {self.value(k, cfg): self.value(v, cfg) for k, v in zip(node.keys, node.values)}
        return ast.literal_eval(node)

    def easybuild(self, tree):
        cfg = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                cfg[node.targets[0].id] = self.value(node.value, cfg)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                    and isinstance(node.op, ast.Add):
                cfg[node.target.id] = cfg.get(node.target.id, "") + self.value(node.value, cfg)
            elif not isinstance(node, ast.Expr):
                self.fail(f"line {node.lineno}: not a plain assignment")
        for key, want in (("easyblock", "ConfigureMake"), ("runtest", "check"),
                          ("moduleclass", "lib")):
            if cfg.get(key) != want:
                self.fail(f"{key} = {cfg.get(key)!r}, expected {want!r}")
        for key in ("name", "version", "homepage", "description", "toolchain", "sources"):
            if not cfg.get(key):
                self.fail(f"no {key}")
        # eb --check-contrib: one SHA256 per source
        checksums = cfg.get("checksums", [])
        if len(checksums) != len(cfg.get("sources", [])):
            self.fail(f"{len(checksums)} checksums for {len(cfg.get('sources', []))} sources "
                      "(make release writes the tarball's)")
        for c in checksums:
            if not (isinstance(c, str) and SHA256.fullmatch(c)):
                self.fail(f"checksum {c!r} is not a sha256 (64 hex digits)")
        if self.release and (cfg.get("version"), self.release[1]) != \
                (self.release[0], checksums[0] if checksums else None):
            self.fail(f"version {cfg.get('version')!r} checksums {checksums} are not the tarball's "
                      f"({self.release[0]!r}, [{self.release[1]!r}])")
        # EasyBuild 5 fails on an unresolved template: a %(cuda_...)s needs a value
        # even where the site sets no --cuda-compute-capabilities
        templates = " ".join(str(v) for v in cfg.values())
        if re.search(r"%\(cuda_(int|sm|cc|compute)[a-z_]*\)s", templates):
            ccs = cfg.get("cuda_compute_capabilities")
            if not ccs:
                self.fail("uses a %(cuda_...)s template but sets no cuda_compute_capabilities default")
            elif not all(isinstance(c, str) and re.fullmatch(r"\d+\.\d+", c) for c in ccs):
                self.fail(f"cuda_compute_capabilities = {ccs!r}: expected ['9.0', ...]")
        if "software_license" in cfg:
            self.fail("software_license: EasyBuild 5 knows no BSD class; name it in software_license_urls")
        if not any(str(u).endswith("/LICENSE") for u in cfg.get("software_license_urls", [])):
            self.fail("no software_license_urls naming LICENSE")
        if cfg.get("toolchainopts", {}).get("usempi") is not True:
            self.fail("toolchainopts has no 'usempi': True")
        deps = {d[0]: d for d in cfg.get("dependencies", [])}
        bdeps = {d[0] for d in cfg.get("builddependencies", [])}
        for want in ("CUDA", "NCCL", "HDF5", "PMIx"):
            if want not in deps:
                self.fail(f"no dependency {want}")
        if not {"OpenBLAS", "FlexiBLAS", "BLIS", "imkl"} & set(deps):
            self.fail("no BLAS dependency (gompi has none)")
        for want in ("Autotools", "Check"):
            if want not in bdeps:
                self.fail(f"no build dependency {want}")
        files = set(cfg.get("sanity_check_paths", {}).get("files", []))
        for want in ("bin/ddpc-info", "bin/trainer", "lib/libddpc.so", "include/ddpc.h",
                     "lib/pkgconfig/ddpc.pc"):
            if want not in files:
                self.fail(f"sanity_check_paths files lack {want}")
        if "ddpc-info --version" not in cfg.get("sanity_check_commands", []):
            self.fail("sanity_check_commands lack 'ddpc-info --version'")
        # the file name EasyBuild expects: name-version-toolchain-version+suffix.eb
        tc = cfg.get("toolchain", {})
        suffix = cfg.get("versionsuffix", "")
        if "CUDA" in deps:
            suffix = suffix.replace("%(cudaver)s", deps["CUDA"][1])
        want = f"{cfg.get('name')}-{cfg.get('version')}-{tc.get('name')}-{tc.get('version')}{suffix}.eb"
        if os.path.basename(self.path) != want:
            self.fail(f"file name should be {want}")
        opts = cfg.get("preconfigopts", "") + " " + cfg.get("configopts", "")
        self.check_passed(opts, r"(?:^|\s)([A-Z][A-Z0-9_]*)=")
        for want in ("--with-pmix", "--with-cuda", "--with-cuda-arch", "--with-nccl", "--with-blas"):
            if want not in self.passed_options:
                self.fail(f"configopts never pass {want}")
        for root in ("$EBROOTCUDA", "$EBROOTNCCL", "$EBROOTPMIX"):
            if root not in opts:
                self.fail(f"configopts do not use {root}")

    def run(self):
        with open(self.path, encoding="utf-8") as f:
            source = f.read()
        try:
            tree = ast.parse(source, filename=self.path)
        except SyntaxError as e:
            self.fail(f"line {e.lineno}: Python syntax error: {e.msg}")
            return
        if self.path.endswith(".eb"):
            self.easybuild(tree)
        else:
            self.spack(tree, source)
        self.check_against_configure()


def tarball_release(path):
    """(version, sha256) of a ddpc-VERSION.tar.gz."""
    m = re.fullmatch(r"ddpc-(.+)\.tar\.gz", os.path.basename(path))
    if not m:
        sys.exit(f"FAIL: {path} is not a ddpc-VERSION.tar.gz")
    with open(path, "rb") as f:
        return m.group(1), hashlib.sha256(f.read()).hexdigest()


def main(argv):
    release = None
    if len(argv) > 2 and argv[1] == "--tarball":
        release = tarball_release(argv[2])
        argv = argv[:1] + argv[3:]
    if len(argv) < 3:
        sys.exit(__doc__)
    options, precious = configure_help(argv[1])
    failed = False
    for path in argv[2:]:
        c = Checker(path, options, precious, release)
        c.run()
        for e in c.errors:
            print(e)
        failed |= bool(c.errors)
        if not c.errors:
            print(f"ok: {path}: parses; passes {' '.join(sorted(c.passed_options))}"
                  f" and sets {' '.join(sorted(c.passed_vars))}: all in configure --help"
                  + (f"; names release {release[0]} sha256 {release[1]}" if release else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
