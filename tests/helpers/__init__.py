"""What several test modules share (a test module never imports another): tokens and
key sets, LibreChat v0.8.6+'s settings and tokens, the real npm clients' drivers, the
hello programs of every language, a PNG's size, the MicroVM fake trusted over HTTPS, a fleet
of runners stopped one by one."""
