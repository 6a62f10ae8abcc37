# SPDX-License-Identifier: BSD-3-Clause
# Spack recipe for ddpc. Copy it into a Spack package repository as
# repos/spack_repo/<namespace>/packages/ddpc/package.py (spack-packages layout)
# and `spack install ddpc +cuda cuda_arch=90`. tests/recipes.sh parses it and
# checks every configure option it passes against ./configure --help, and
# the release's sha256 against the tarball `make release` builds.

import os

from spack_repo.builtin.build_systems.autotools import AutotoolsPackage
from spack_repo.builtin.build_systems.cuda import CudaPackage

from spack.package import *


class Ddpc(AutotoolsPackage, CudaPackage):
    """ddpc: a C runtime for synchronous data-parallel training of neural
    networks on HPC clusters (what PyTorch's DistributedDataParallel does, for
    C, C++ and CUDA programs): rank discovery through PMIx, Slurm, MPI
    launchers or torchrun's environment; bucketed gradient all-reduces over
    MPI or NCCL overlapped with the backward pass; SGD and AdamW; HDF5
    checkpoints; a distributed sampler; and a reference trainer."""

    # placeholders: the project has no public home yet; a site points these
    # at its own mirror of the repository
    homepage = "https://github.com/ddpc-hpc/ddpc"
    url = "https://github.com/ddpc-hpc/ddpc/releases/download/v0.1.0/ddpc-0.1.0.tar.gz"
    git = "https://github.com/ddpc-hpc/ddpc.git"

    license("BSD-3-Clause")

    # releases, newest first: make dist's tarball (it has configure), its
    # sha256 written here by `make release` (scripts/release.sh); main builds
    # from git and needs the autotools
    version("0.1.0", sha256="c2faec2a6728dc111edb77e6f7a0bf34d59655a7e7ad6ef984a34227bfd09431")
    version("main", branch="main")

    variant(
        "pmix", default=True, description="Rank discovery through a PMIx client (srun --mpi=pmix)"
    )
    variant("nccl", default=True, when="+cuda", description="NCCL for GPU all-reduce")

    depends_on("c", type="build")
    depends_on("cxx", type="build", when="+cuda")  # nvcc's host compiler, and -lstdc++
    depends_on("pkgconfig", type="build")  # configure finds HDF5, zlib, Check, PMIx by pkg-config

    # a git checkout has no configure: autoreconf() below runs ./autogen.sh
    depends_on("autoconf@2.69:", type="build", when="@main")
    depends_on("automake@1.16:", type="build", when="@main")
    depends_on("libtool", type="build", when="@main")
    depends_on("m4", type="build", when="@main")

    depends_on("mpi")
    # the serial HDF5 API only, on rank 0: hdf5~mpi or +mpi both do, +hl is not needed
    depends_on("hdf5@1.10:")
    depends_on("zlib-api")
    # CBLAS (cblas_sgemm, cblas.h) for the trainer's CPU model: openblas, blis
    # and amdblis ship it in the library; netlib's is a separate libcblas
    depends_on("blas")
    depends_on("pmix@3:", when="+pmix")
    depends_on("nccl", when="+nccl")
    # NCCL built for the same GPUs (as Aluminum does)
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"nccl cuda_arch={_arch}", when=f"+nccl cuda_arch={_arch}")

    # Check builds the unit tests of `make check` and nothing else: configure
    # detects it and builds without it. type="test" adds it to the build
    # environment exactly when tests run (spack install --test=root), which is
    # when `make check` runs; ("build", "test") would make every install
    # depend on it for nothing.
    depends_on("check@0.11:", type="test")

    conflicts("cuda_arch=none", when="+cuda", msg="+cuda needs cuda_arch=<capability>, e.g. 90")

    def autoreconf(self, spec, prefix):
        """Only a git checkout needs it: a release tarball has configure."""
        if os.path.exists(self.configure_abs_path):
            return
        Executable("./autogen.sh")()

    def setup_build_environment(self, env: EnvironmentModifications) -> None:
        # link against the CUDA driver stubs on build hosts without a GPU driver
        if self.spec.satisfies("+cuda"):
            env.prepend_path("LIBRARY_PATH", self.spec["cuda"].prefix.lib64.stubs)

    def setup_run_environment(self, env: EnvironmentModifications) -> None:
        env.set("DDPC_ROOT", self.prefix)  # as ddpc's own modulefiles do

    def configure_args(self):
        spec = self.spec
        # configure takes the compiler from MPICC only when CC is unset, and
        # Spack sets CC: pass the MPI wrapper as both
        args = [f"MPICC={spec['mpi'].mpicc}", f"CC={spec['mpi'].mpicc}"]
        mpiexec = join_path(spec["mpi"].prefix.bin, "mpiexec")
        if os.path.exists(mpiexec):  # the launcher of make check's multi-rank tests
            args.append(f"MPIEXEC={mpiexec}")
        # HDF5 without relying on an hdf5.pc (CMake-built HDF5 may lack one)
        args.append(f"HDF5_CFLAGS={spec['hdf5'].headers.include_flags}")
        args.append(f"HDF5_LIBS={spec['hdf5'].libs.ld_flags}")
        args.append(f"--with-blas={spec['blas'].libs.ld_flags}")

        if spec.satisfies("+pmix"):
            args.append(f"--with-pmix={spec['pmix'].prefix}")
        else:
            args.append("--without-pmix")

        if spec.satisfies("+cuda"):
            args.append(f"--with-cuda={spec['cuda'].prefix}")
            cuda_arch = spec.variants["cuda_arch"].value
            args.append("--with-cuda-arch=" + ",".join(cuda_arch))
        else:
            args.append("--without-cuda")

        if spec.satisfies("+nccl"):
            args.append(f"--with-nccl={spec['nccl'].prefix}")
        else:
            args.append("--without-nccl")
        return args

    def test_embed(self):
        """compile examples/embed against the installed ddpc with pkg-config and run it"""
        src = join_path(self.prefix.share, "doc", "ddpc", "examples", "embed")
        if not os.path.isdir(src):
            raise SkipTest(f"{src} is not installed")
        copy_tree(src, "embed")
        with working_dir("embed"):
            make = which("make", required=True)
            pkgconfig_env = {"PKG_CONFIG_PATH": self.prefix.lib.pkgconfig}
            make(f"CC={self.spec['mpi'].mpicc}", extra_env=pkgconfig_env)
            mpiexec = which(
                join_path(self.spec["mpi"].prefix.bin, "mpiexec"), "mpiexec", required=True
            )
            # first run: trains 10 steps, checkpoints; second: resumes at step 10
            for steps, want in (("10", "done: step=10"), ("20", "start: resumed step=10")):
                out = mpiexec(
                    "-n", "2", "./embed", "--steps", steps, "--save-every", "5",
                    output=str, error=str,
                )
                assert want in out, f"mpiexec -n 2 ./embed --steps {steps}: no '{want}' in:\n{out}"
