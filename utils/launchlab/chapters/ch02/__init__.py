"""Chapter 02, PyTorch dispatch overhead: chapter.py (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
