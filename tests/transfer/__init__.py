"""Tests of ``coordcheck.transfer``, one file per module (``test_fit``, ``test_train``, ``test_cli`` for the app and
its command line, ``test_known_answers`` for the whole experiment on models whose answer is known).

A package, so that its test modules (``transfer.test_train``) do not clash with the same-named ones in ``tests/``
under pytest's default import mode.
"""
