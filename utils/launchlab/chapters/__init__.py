"""The chapters: a folder each (chapter.toml declares its facts, checkers.py checks its lab, guide.yml guides its class)."""
