"""bert_demo/app/tabs/fill_views.py: the words around Fill-mask's answers."""
from __future__ import annotations

from bert_demo.app.tabs import fill_views


def test_the_guesses_at_every_layer_are_one_a_line_so_that_a_phone_shows_the_table_whole():
    table = fill_views.layer_table([[[("door", 0.05), ("night", 0.03)], [("door", 0.67), ("window", 0.04)]]])
    assert "| 2 (last) | door 67%<br>window 4% |" in table
