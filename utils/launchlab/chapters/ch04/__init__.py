"""Chapter 04, CUDA graphs by stream capture: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
