"""Chapter 08, Graphs across GPUs: chapter.py (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
