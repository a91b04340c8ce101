"""Chapter 00, Measuring GPU time: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
