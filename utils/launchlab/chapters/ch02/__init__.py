"""Chapter 02, PyTorch dispatch overhead: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
