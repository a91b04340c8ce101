"""Chapter 01, Launch cost with CuPy RawKernels: chapter.py (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
