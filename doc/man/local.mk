# doc/man: the man pages (hand-written nroff, committed), installed under share/man, and their lint test.
