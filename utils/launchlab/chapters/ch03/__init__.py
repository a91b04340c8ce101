"""Chapter 03, torch.compile and graph breaks: chapter.toml (its facts), checkers.py (its lab's checkers), guide.yml (its class)."""
