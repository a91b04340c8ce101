"""Chapter 09, Past graphs: PDL and persistent kernels: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
