# SPDX-License-Identifier: BSD-3-Clause
# slurm: the sbatch scripts (installed in $(pkgdatadir)/slurm) and the
# modulefiles, written at install time from slurm/ddpc.lua.in and
# slurm/ddpc.tcl.in with the final install directories.
slurmdir = $(pkgdatadir)/slurm
dist_slurm_SCRIPTS = slurm/train-cpu.sbatch slurm/train-gpu.sbatch slurm/train-preemptible.sbatch

# Modulefiles, one file per version so that versions sit side by side:
#   $(modulefilesdir)/ddpc/$(PACKAGE_VERSION).lua   Lmod        (module use $(modulefilesdir))
#   $(tclmodulefilesdir)/ddpc/$(PACKAGE_VERSION)    Environment Modules (Tcl twin)
# The Tcl twin has its own tree: Environment Modules users point `module use`
# at it and never see the .lua files; Lmod users point at modulefiles/ (Lmod
# also loads the Tcl tree, tests/modulefile.sh does both). One tree holding
# both ddpc/V.lua and ddpc/V would work for Lmod (it takes the .lua) but
# leaves Environment Modules to skip a file without its #%Module cookie, and
# a mixed tree is one more thing to explain: two trees it is.
# They are written at install time (not built), so that `make install
# prefix=P2` writes P2's directories and `make install DESTDIR=X` writes files
# under X whose paths do not contain X. Sites with a central module tree and
# one prefix per version override the trees:
#   make install prefix=/opt/ddpc/0.1.0 modulefilesdir=/opt/modulefiles/MPI/mpich \
#        tclmodulefilesdir=/opt/modulefiles-tcl/MPI/mpich
modulefilesdir = $(datadir)/modulefiles
tclmodulefilesdir = $(datadir)/modulefiles-tcl
# whatis URL: the project has no public home yet, so the installed
# documentation (a site may override DDPC_URL=... at install)
DDPC_URL = file://$(docdir)
EXTRA_DIST += slurm/ddpc.lua.in slurm/ddpc.tcl.in
ddpc_module_subst = sed \
	-e 's|@PACKAGE_VERSION[@]|$(PACKAGE_VERSION)|g' -e 's|@DDPC_URL[@]|$(DDPC_URL)|g' \
	-e 's|@prefix[@]|$(prefix)|g' -e 's|@bindir[@]|$(bindir)|g' -e 's|@libdir[@]|$(libdir)|g' \
	-e 's|@includedir[@]|$(includedir)|g' -e 's|@mandir[@]|$(mandir)|g' \
	-e 's|@docdir[@]|$(docdir)|g' -e 's|@embeddir[@]|$(embeddir)|g' -e 's|@slurmdir[@]|$(slurmdir)|g' \
	-e 's|@modulefilesdir[@]|$(modulefilesdir)|g' -e 's|@tclmodulefilesdir[@]|$(tclmodulefilesdir)|g' \
	-e 's|@MPICC[@]|$(MPICC)|g'
ddpc_lua_module = $(DESTDIR)$(modulefilesdir)/ddpc/$(PACKAGE_VERSION).lua
ddpc_tcl_module = $(DESTDIR)$(tclmodulefilesdir)/ddpc/$(PACKAGE_VERSION)

# Prerequisite-only rules, so that other fragments can hook install-data-local
# and uninstall-local the same way.
install-data-local: ddpc-install-modulefiles
uninstall-local: ddpc-uninstall-modulefiles
.PHONY: ddpc-install-modulefiles ddpc-uninstall-modulefiles
ddpc-install-modulefiles:
	@$(NORMAL_INSTALL)
	$(MKDIR_P) '$(DESTDIR)$(modulefilesdir)/ddpc' '$(DESTDIR)$(tclmodulefilesdir)/ddpc'
	$(ddpc_module_subst) '$(srcdir)/slurm/ddpc.lua.in' >'$(ddpc_lua_module).tmp'
	chmod 644 '$(ddpc_lua_module).tmp' && mv -f '$(ddpc_lua_module).tmp' '$(ddpc_lua_module)'
	$(ddpc_module_subst) '$(srcdir)/slurm/ddpc.tcl.in' >'$(ddpc_tcl_module).tmp'
	chmod 644 '$(ddpc_tcl_module).tmp' && mv -f '$(ddpc_tcl_module).tmp' '$(ddpc_tcl_module)'
# removes this version's files, and the ddpc/ directories once no version is
# left in them (the trees above are shared with other packages: kept)
ddpc-uninstall-modulefiles:
	@$(NORMAL_UNINSTALL)
	rm -f '$(ddpc_lua_module)' '$(ddpc_tcl_module)'
	for d in '$(DESTDIR)$(modulefilesdir)/ddpc' '$(DESTDIR)$(tclmodulefilesdir)/ddpc'; do \
	  test ! -d "$$d" || rmdir "$$d" 2>/dev/null || :; done

TESTS += tests/modulefile.sh
dist_check_SCRIPTS += tests/modulefile.sh
