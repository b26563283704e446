def word_count(text):
    raise NotImplementedError


def top_words(text, n):
    raise NotImplementedError


def is_palindrome(s):
    raise NotImplementedError
