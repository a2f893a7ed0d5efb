"""``my_pkg``: the user's package of the docs' commands, a stand-in built from ``coordcheck``'s own models.

The pages write a user's model as ``my_pkg.<module>.<name>``; ``tests/test_docs.py`` puts ``tests/docs/`` on
``PYTHONPATH`` when it runs those commands, so they run against these. Each module is one name the docs use.
"""
