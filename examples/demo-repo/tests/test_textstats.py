import pytest

from textstats import is_palindrome, top_words, word_count


@pytest.mark.parametrize("text,n", [("", 0), ("one", 1), ("two words", 2),
                                    ("  spaced   out\twords\n here ", 4)])
def test_word_count(text, n):
    assert word_count(text) == n


def test_top_words_counts_case_insensitively():
    assert top_words("b a B c b A", 2) == [("b", 3), ("a", 2)]


def test_top_words_breaks_ties_alphabetically():
    assert top_words("pear fig apple fig apple pear", 3) == [("apple", 2), ("fig", 2), ("pear", 2)]


def test_top_words_ignores_punctuation():
    assert top_words("Hi! hi, hi.", 1) == [("hi", 3)]


@pytest.mark.parametrize("s", ["racecar", "A man, a plan, a canal: Panama", "", "No 'x' in Nixon"])
def test_palindromes(s):
    assert is_palindrome(s)


@pytest.mark.parametrize("s", ["warren", "ab", "palindrome"])
def test_not_palindromes(s):
    assert not is_palindrome(s)
