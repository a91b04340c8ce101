"""Chapter 10, Graphs in real code: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
