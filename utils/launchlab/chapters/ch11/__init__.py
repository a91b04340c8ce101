"""Chapter 11, Communication inside graphs: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
