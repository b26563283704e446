"""Text statistics. The functions live in solution.py, which each rollout writes."""
from .solution import is_palindrome, top_words, word_count  # noqa: F401
