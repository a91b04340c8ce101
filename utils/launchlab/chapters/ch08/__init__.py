"""Chapter 08, Graphs across GPUs: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
