"""Chapter 05, Multi-stream fork/join capture: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
