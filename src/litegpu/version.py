"""litegpu's version (pyproject's; ``tests/test_import.py`` keeps them equal), in a module of its own at the bottom
of the package, so that any layer can read it (the compile cache keys by it) without importing the package's top."""

__version__ = "0.1.0"
