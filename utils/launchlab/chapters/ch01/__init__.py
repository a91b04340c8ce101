"""Chapter 01, Launch cost with CuPy RawKernels: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
