"""Measure on my chats: the dialog that replays the user's turns
(``measure_dialog``), the results it shows (``measure_results``) and the
library's other models offered as drafts to measure (``measure_candidates``).
Of ``ui`` it may import only ``theme``; the window's menus import it.
"""
