"""Chapter 06, Device-side graph launch: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
