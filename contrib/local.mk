# contrib: package recipes (Spack, EasyBuild) and their parse test; examples/embed, the embedding example.
# The embedding example is installed as documentation, for users to copy:
#   cp -r $(embeddir) . && make -C embed
embeddir = $(docdir)/examples/embed
dist_embed_DATA = examples/embed/README.md examples/embed/Makefile examples/embed/embed.c
EXTRA_DIST += examples/embed/.gitignore
# recipes: not installed (a site copies them into its Spack repo or easyconfigs)
EXTRA_DIST += contrib/spack/package.py contrib/easybuild/ddpc-0.1.0-gompi-2025a-CUDA-12.8.0.eb
TESTS += tests/recipes.sh tests/embed.sh
dist_check_SCRIPTS += tests/recipes.sh tests/recipes_check.py tests/embed.sh
dist_check_DATA += tests/cxx_hello.cpp
