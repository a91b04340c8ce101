"""Chapter 03, torch.compile and graph breaks: chapter.py (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
