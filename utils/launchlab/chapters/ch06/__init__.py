"""Chapter 06, Device-side graph launch: chapter.py (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
