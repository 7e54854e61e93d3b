"""Tests of the harness: a package, so that a test file of yours may share a name with one of these."""
