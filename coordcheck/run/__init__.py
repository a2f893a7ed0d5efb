"""The run and its frame: the training loop that turns a builder, a width and the probes into one job's tidy frame
(:mod:`~coordcheck.run.train`), and the sweep read back from its job directories on disk
(:mod:`~coordcheck.run.sweep`, torch-free). Imports the stages below: record, build, core."""
