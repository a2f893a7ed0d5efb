"""Tests of ``coordcheck.gradflow``, one file per module.

A package, so that its test modules (``gradflow.test_report``) do not clash with the
same-named ones in ``tests/`` under pytest's default import mode.
"""
