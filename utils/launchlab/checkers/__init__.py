"""Checkers for each chapter's lab, one module per chapter (ch00, ch01, ...)."""
