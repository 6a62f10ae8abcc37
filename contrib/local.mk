# SPDX-License-Identifier: BSD-3-Clause
# contrib: package recipes (Spack, EasyBuild) and their parse test; examples/embed, the embedding example.
# The embedding example is installed as documentation, for users to copy:
#   cp -r $(embeddir) . && make -C embed
embeddir = $(docdir)/examples/embed
dist_embed_DATA = examples/embed/README.md examples/embed/Makefile examples/embed/embed.c
EXTRA_DIST += examples/embed/.gitignore
# The recipes (contrib/spack, contrib/easybuild) are repository files, neither
# installed nor in the tarball: they carry the tarball's sha256, which would
# change the tarball (doc/site.md, "Releases"); tests/recipes.sh skips without them.
TESTS += tests/recipes.sh tests/embed.sh
dist_check_SCRIPTS += tests/recipes.sh tests/recipes_check.py tests/embed.sh
dist_check_DATA += tests/cxx_hello.cpp
