# slurm: fragment of the top Makefile.am (sources, programs, tests of this part)
