"""Chapter 07, Capstone: the overhead ladder: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
