"""Chapter 00, Measuring GPU time: chapter.py (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
