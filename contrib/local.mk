# contrib: package recipes (Spack, EasyBuild) and their parse test; examples/embed, the embedding example.
