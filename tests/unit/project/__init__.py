"""Tests of the repository as a whole: package layout and layers, examples, the cluster install, the test tree."""
