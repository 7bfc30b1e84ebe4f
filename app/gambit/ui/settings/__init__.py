"""Settings: the dialog (``settings_dialog``), its pages (``settings_pages``,
and ``settings_workers`` for other machines that hold the target's layers)
and the widgets each declared setting gets (``settings_widgets``, which the
server dialog uses too). Of ``ui`` it may import only ``theme``; the window,
the models dialog and the server dialog import it.
"""
