# slurm: the sbatch scripts (installed in $(pkgdatadir)/slurm) and the Lmod
# modulefile, generated here with the install directories and installed as
# $(datadir)/modulefiles/ddpc.lua (module use $prefix/share/modulefiles).
slurmdir = $(pkgdatadir)/slurm
dist_slurm_SCRIPTS = slurm/train-cpu.sbatch slurm/train-gpu.sbatch slurm/train-preemptible.sbatch

modulefilesdir = $(datadir)/modulefiles
modulefiles_DATA = slurm/ddpc.lua
EXTRA_DIST += slurm/ddpc.lua.in
CLEANFILES += slurm/ddpc.lua
slurm/ddpc.lua: $(srcdir)/slurm/ddpc.lua.in Makefile
	$(AM_V_GEN)$(MKDIR_P) slurm && sed \
	    -e 's|@PACKAGE_VERSION[@]|$(PACKAGE_VERSION)|g' -e 's|@prefix[@]|$(prefix)|g' \
	    -e 's|@bindir[@]|$(bindir)|g' -e 's|@libdir[@]|$(libdir)|g' \
	    -e 's|@includedir[@]|$(includedir)|g' -e 's|@mandir[@]|$(mandir)|g' \
	    -e 's|@docdir[@]|$(docdir)|g' -e 's|@modulefilesdir[@]|$(modulefilesdir)|g' -e 's|@slurmdir[@]|$(slurmdir)|g' \
	    $(srcdir)/slurm/ddpc.lua.in >$@.tmp && mv $@.tmp $@

TESTS += tests/modulefile.sh
dist_check_SCRIPTS += tests/modulefile.sh
